import shutil
import subprocess

import pytest

from npcmem import settings
from npcmem.settings import parse_env_file, resolve, unquote

UP_FILE = """# Written by deploy/local/up: the endpoints this world uses (source it).
export NPCMEM_NATS_URL=nats://127.0.0.1:59055
export NPCMEM_DATABASE_URL=postgres://postgres@127.0.0.1:5433/npcmem
export NPCMEM_NATS_USER=game
export NPCMEM_NATS_PASSWORD=p\\$ss\\ word\\'s
export NPCMEM_INGEST_HTTP=http://127.0.0.1:46749
export NPCMEM_ENRICH_HTTP=http://127.0.0.1:46750/
export PATH=/evil
export NPCMEM_X
not a line at all
"""


def test_parses_what_up_writes_and_nothing_else():
    assert parse_env_file(UP_FILE) == [
        ("NPCMEM_NATS_URL", "nats://127.0.0.1:59055"),
        ("NPCMEM_DATABASE_URL", "postgres://postgres@127.0.0.1:5433/npcmem"),
        ("NPCMEM_NATS_USER", "game"),
        ("NPCMEM_NATS_PASSWORD", "p$ss word's"),
        ("NPCMEM_INGEST_HTTP", "http://127.0.0.1:46749"),
        ("NPCMEM_ENRICH_HTTP", "http://127.0.0.1:46750/"),
    ]


@pytest.mark.parametrize(
    "quoted, value",
    [
        ("plain", "plain"),
        ("''", ""),
        ("'single quoted $x'", "single quoted $x"),
        ('"double \\"quoted\\" \\$HOME"', 'double "quoted" $HOME'),
        ("a\\ b\\&c", "a b&c"),
        ("$'line\\nbreak\\ttab\\'q\\x41\\101\\u00fc'", "line\nbreak\ttab'qAAü"),
        ("pre$'\\n'post", "pre\npost"),
    ],
)
def test_unquotes_shell_words(quoted, value):
    assert unquote(quoted) == value


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for printf %q")
@pytest.mark.parametrize(
    "value",
    ["nats://127.0.0.1:4222", "p$ss word", "it's \"quoted\"", "new\nline\ttab", "ünïcödé ✓", "", "a\\b;c|d&e*f?g[h]~"],
)
def test_reads_exactly_what_bash_printf_q_writes(value):
    line = subprocess.run(
        ["bash", "-c", 'printf "export NPCMEM_NATS_PASSWORD=%q\\n" "$1"', "_", value],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert parse_env_file(line) == [("NPCMEM_NATS_PASSWORD", value)]


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_precedence_argument_environment_file_default(tmp_path):
    env_file = write(
        tmp_path / "world" / ".local" / "env",
        "export NPCMEM_NATS_URL=nats://file:1\nexport NPCMEM_INGEST_HTTP=http://file:2\n"
        "export NPCMEM_ENRICH_HTTP=http://file:3\nexport NPCMEM_SUBJECT_PREFIX=filep\n",
    )
    environ = {
        "NPCMEM_ENV_FILE": str(env_file),
        "NPCMEM_NATS_URL": "nats://env:1",
        "NPCMEM_INGEST_HTTP": "http://env:2",
        "NPCMEM_STREAM_PREFIX": "",  # empty counts as unset
    }
    s = resolve(environ=environ, cwd=tmp_path, nats_url="nats://arg:1", subject_prefix=None)
    assert s.nats_url == "nats://arg:1" and s.sources["nats_url"] == "argument"
    assert s.ingest_http == "http://env:2" and s.sources["ingest_http"] == "environment"
    assert s.enrich_http == "http://file:3" and s.sources["enrich_http"].startswith("env file")
    assert s.subject_prefix == "filep"
    assert s.stream_prefix == "NPCMEM" and s.sources["stream_prefix"] == "default"
    assert s.env_file == env_file


def test_defaults_without_anything(tmp_path):
    s = resolve(environ={}, cwd=tmp_path)
    assert (s.nats_url, s.subject_prefix, s.stream_prefix) == ("nats://127.0.0.1:4222", "npcmem", "NPCMEM")
    assert s.ingest_http is None and s.enrich_http is None and s.env_file is None
    assert s.timeout == 2.0


def test_finds_local_env_in_an_ancestor(tmp_path):
    env_file = write(tmp_path / ".local" / "env", "export NPCMEM_NATS_URL='nats://up:7'\n")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    s = resolve(environ={}, cwd=deep)
    assert s.nats_url == "nats://up:7"
    assert s.env_file == env_file


def test_env_file_variable_beats_the_ancestor_search(tmp_path):
    write(tmp_path / ".local" / "env", "export NPCMEM_NATS_URL=nats://ancestor:1\n")
    named = write(tmp_path / "other.env", "export NPCMEM_NATS_URL=nats://named:1\n")
    assert resolve(environ={"NPCMEM_ENV_FILE": str(named)}, cwd=tmp_path).nats_url == "nats://named:1"


def test_explicit_env_file_argument_wins_and_must_exist(tmp_path):
    named = write(tmp_path / "x.env", "NPCMEM_ENRICH_HTTP=http://x:1\n")
    assert resolve(environ={}, cwd=tmp_path, env_file=named).enrich_http == "http://x:1"
    with pytest.raises(FileNotFoundError):
        resolve(environ={}, cwd=tmp_path, env_file=tmp_path / "missing.env")


def test_missing_env_file_variable_is_ignored_like_the_cli(tmp_path):
    s = resolve(environ={"NPCMEM_ENV_FILE": str(tmp_path / "gone")}, cwd=tmp_path)
    assert s.nats_url == settings.DEFAULT_NATS_URL and s.env_file is None


def test_prefixes_are_checked(tmp_path):
    with pytest.raises(ValueError):
        resolve(environ={}, cwd=tmp_path, subject_prefix="bad.prefix")
    assert resolve(environ={}, cwd=tmp_path, subject_prefix="world-2_eu").subject_prefix == "world-2_eu"


def test_http_endpoints_lose_a_trailing_slash(tmp_path):
    s = resolve(environ={"NPCMEM_ENRICH_HTTP": "http://e:1/"}, cwd=tmp_path)
    assert s.enrich_http == "http://e:1"
