"""A JSON POST with the standard library only, run in a worker thread."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any, Tuple

from .errors import NpcmemError


def _post(url: str, body: bytes, timeout: float) -> Tuple[int, bytes]:
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


async def post_json(url: str, body: bytes, timeout: float) -> Tuple[int, Any]:
    """POST ``body`` to ``url``; returns (status, decoded JSON). A connection failure
    raises ``NpcmemError("unavailable")``, a non-JSON answer ``invalid_reply``."""
    try:
        status, raw = await asyncio.to_thread(_post, url, body, timeout)
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise NpcmemError("unavailable", f"POST {url} failed: {reason}") from error
    try:
        return status, json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError) as error:
        raise NpcmemError(
            "invalid_reply", f"POST {url} answered {status} with a body that is not JSON: {raw[:200]!r}", status=status
        ) from error
