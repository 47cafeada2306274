"""Where the SDK finds npcmem: explicit arguments, then ``NPCMEM_*`` environment
variables, then the env file ``deploy/local/up`` writes, then defaults.

The env file is ``NPCMEM_ENV_FILE`` when set, else ``.local/env`` in the working
directory or one of its ancestors. Its lines look like ``export NPCMEM_NATS_URL=...``
with values quoted the way bash's ``printf %q`` writes them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple, Union

ENV_FILE_NAME = os.path.join(".local", "env")
DEFAULT_NATS_URL = "nats://127.0.0.1:4222"
DEFAULT_SUBJECT_PREFIX = "npcmem"
DEFAULT_STREAM_PREFIX = "NPCMEM"
DEFAULT_TIMEOUT = 2.0

_KEY = re.compile(r"^NPCMEM_[A-Za-z0-9_]*$")
_PREFIX = re.compile(r"^[A-Za-z0-9_-]+$")

# Setting name -> environment variable.
VARIABLES: Dict[str, str] = {
    "nats_url": "NPCMEM_NATS_URL",
    "subject_prefix": "NPCMEM_SUBJECT_PREFIX",
    "stream_prefix": "NPCMEM_STREAM_PREFIX",
    "ingest_http": "NPCMEM_INGEST_HTTP",
    "enrich_http": "NPCMEM_ENRICH_HTTP",
    "nats_user": "NPCMEM_NATS_USER",
    "nats_password": "NPCMEM_NATS_PASSWORD",
}

DEFAULTS: Dict[str, Optional[str]] = {
    "nats_url": DEFAULT_NATS_URL,
    "subject_prefix": DEFAULT_SUBJECT_PREFIX,
    "stream_prefix": DEFAULT_STREAM_PREFIX,
    "ingest_http": None,
    "enrich_http": None,
    "nats_user": None,
    "nats_password": None,
}


@dataclass
class Settings:
    """The resolved settings, and where each came from (``sources``)."""

    nats_url: str = DEFAULT_NATS_URL
    subject_prefix: str = DEFAULT_SUBJECT_PREFIX
    stream_prefix: str = DEFAULT_STREAM_PREFIX
    ingest_http: Optional[str] = None
    enrich_http: Optional[str] = None
    nats_user: Optional[str] = None
    nats_password: Optional[str] = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    env_file: Optional[Path] = None
    # setting name -> "argument" | "environment" | "env file <path>" | "default"
    sources: Dict[str, str] = field(default_factory=dict)


def parse_env_file(text: str) -> List[Tuple[str, str]]:
    """The ``NPCMEM_*`` assignments of an env file, in order.

    Accepts ``export NPCMEM_X=value`` and ``NPCMEM_X=value``; values may be bare with
    backslash escapes (``p\\$ss\\ word``), single-quoted, double-quoted or ANSI-C quoted
    (``$'a\\nb'``), as ``printf %q`` writes them. Comments, blank lines and other
    variables are ignored.
    """
    out: List[Tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            continue
        out.append((key, unquote(value.strip())))
    return out


def unquote(value: str) -> str:
    """Undo shell quoting of one word (the forms ``printf %q`` produces, and plain quotes)."""
    out: List[str] = []
    i, n = 0, len(value)
    while i < n:
        c = value[i]
        if c == "'":
            end = value.find("'", i + 1)
            if end < 0:
                end = n
            out.append(value[i + 1 : end])
            i = end + 1
        elif c == "$" and i + 1 < n and value[i + 1] == "'":
            text, i = _ansi_c(value, i + 2)
            out.append(text)
        elif c == '"':
            i += 1
            while i < n and value[i] != '"':
                if value[i] == "\\" and i + 1 < n and value[i + 1] in '"\\$`':
                    out.append(value[i + 1])
                    i += 2
                else:
                    out.append(value[i])
                    i += 1
            i += 1
        elif c == "\\":
            if i + 1 < n:
                out.append(value[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


def _ansi_c(value: str, i: int) -> Tuple[str, int]:
    """Decode ``$'...'`` starting after the opening quote; returns (text, next index)."""
    out: List[str] = []
    n = len(value)
    while i < n and value[i] != "'":
        c = value[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = value[i + 1]
        i += 2
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
        elif e in "01234567":
            digits = e
            while i < n and len(digits) < 3 and value[i] in "01234567":
                digits += value[i]
                i += 1
            out.append(chr(int(digits, 8) & 0xFF))
        elif e in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[e]
            digits = ""
            while i < n and len(digits) < width and value[i] in "0123456789abcdefABCDEF":
                digits += value[i]
                i += 1
            out.append(chr(int(digits, 16)) if digits else "\\" + e)
        else:
            out.append("\\" + e)
    return "".join(out), i + 1


def locate_env_file(
    environ: Optional[Mapping[str, str]] = None, cwd: Optional[Union[str, Path]] = None
) -> Optional[Path]:
    """``NPCMEM_ENV_FILE`` if set, else the nearest ``.local/env`` from ``cwd`` upwards."""
    environ = os.environ if environ is None else environ
    explicit = environ.get("NPCMEM_ENV_FILE")
    if explicit:
        return Path(explicit)
    start = Path(cwd) if cwd is not None else Path.cwd()
    for directory in [start, *start.parents]:
        candidate = directory / ENV_FILE_NAME
        if candidate.is_file():
            return candidate
    return None


def resolve(
    *,
    environ: Optional[Mapping[str, str]] = None,
    cwd: Optional[Union[str, Path]] = None,
    env_file: Optional[Union[str, Path]] = None,
    timeout: Optional[float] = None,
    **explicit: Optional[str],
) -> Settings:
    """Resolve every setting: explicit (non-``None``) argument, environment, env file,
    default. An ``env_file`` argument that does not exist raises ``FileNotFoundError``;
    one found through ``NPCMEM_ENV_FILE`` that does not exist is ignored (as the npcmem
    CLI does)."""
    unknown = set(explicit) - set(VARIABLES)
    if unknown:
        raise TypeError(f"unknown settings: {', '.join(sorted(unknown))}")
    environ = os.environ if environ is None else environ

    path: Optional[Path]
    file_values: Dict[str, str] = {}
    if env_file is not None:
        path = Path(env_file)
        file_values = dict(parse_env_file(path.read_text(encoding="utf-8")))
    else:
        path = locate_env_file(environ, cwd)
        if path is not None:
            try:
                file_values = dict(parse_env_file(path.read_text(encoding="utf-8")))
            except OSError:
                path, file_values = None, {}

    settings = Settings(env_file=path)
    for name, variable in VARIABLES.items():
        value = explicit.get(name)
        source = "argument"
        if value is None and environ.get(variable):
            value, source = environ[variable], "environment"
        if value is None and file_values.get(variable):
            value, source = file_values[variable], f"env file {path}"
        if value is None:
            value, source = DEFAULTS[name], "default"
        setattr(settings, name, value)
        settings.sources[name] = source
    settings.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    for name in ("subject_prefix", "stream_prefix"):
        value = getattr(settings, name)
        if not _PREFIX.match(value):
            raise ValueError(f"{name} {value!r} may contain only letters, digits, '_' and '-'")
    for name in ("ingest_http", "enrich_http"):
        value = getattr(settings, name)
        if value:
            setattr(settings, name, value.rstrip("/"))
    return settings
