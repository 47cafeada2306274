"""The one exception type of the SDK, built from npcmem's error replies."""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional


class NpcmemError(Exception):
    """An error answer from npcmem, or a failure to reach it.

    ``code`` is machine-readable: the reason codes of the wire protocol (``invalid_field``,
    ``invalid_uuid``, ``missing_field``, ``max_tokens_too_small``, ``unavailable``, ...)
    for answers from the services, plus these from the SDK itself:

    - ``unavailable``: nothing answered (no NATS, no responders, HTTP unreachable);
    - ``timeout``: a request got no answer in time;
    - ``not_supported``: the call has no path in the current transport (HTTP mode);
    - ``invalid_reply``: the answer could not be decoded.

    ``field`` is the path of the offending field (``npc.name``) when one is at fault.
    ``status`` is the HTTP status when the error came over HTTP.
    """

    def __init__(
        self,
        code: str,
        message: str,
        field: Optional[str] = None,
        *,
        status: Optional[int] = None,
        raw: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.code = code
        self.message = message
        self.field = field
        self.status = status
        self.raw = dict(raw) if raw is not None else None
        text = f"{code}: {message}"
        if field:
            text += f" (field {field})"
        super().__init__(text)

    @classmethod
    def from_reply(cls, reply: Mapping[str, Any], *, status: Optional[int] = None) -> "NpcmemError":
        """Build the exception from ``{"error": {"code", "message", "field"?}}``."""
        body = reply.get("error")
        if not isinstance(body, Mapping):
            return cls("invalid_reply", f"not an error reply: {json.dumps(reply)[:300]}", status=status, raw=reply)
        code = body.get("code")
        message = body.get("message")
        field = body.get("field")
        return cls(
            str(code) if code is not None else "unknown",
            str(message) if message is not None else "",
            str(field) if field is not None else None,
            status=status,
            raw=reply,
        )


def is_error_reply(reply: Any) -> bool:
    """True for the error object every npcmem request/reply endpoint answers with."""
    return isinstance(reply, Mapping) and isinstance(reply.get("error"), Mapping)


def raise_for_reply(reply: Any, *, status: Optional[int] = None) -> None:
    """Raise :class:`NpcmemError` when ``reply`` is an error reply."""
    if is_error_reply(reply):
        raise NpcmemError.from_reply(reply, status=status)
