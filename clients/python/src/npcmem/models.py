"""Typed messages of the npcmem wire protocol.

Field names are exactly the JSON names. Optional fields default to ``None`` (or an empty
list where the protocol says so) and are left out of the JSON when ``None``; ``extra``
carries unknown fields both ways (a signal's type-specific fields such as ``faction`` or
``old_stage`` arrive there). Ids may be given as :class:`uuid.UUID` or strings, times as
timezone-aware :class:`datetime.datetime` or RFC 3339 strings; replies keep them as the
strings npcmem sent.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import sys
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Type, TypeVar, Union

Id = Union[str, uuid.UUID]
Time = Union[str, _dt.datetime]

SCHEMA_VERSION = 1

T = TypeVar("T")


# --- encoding ----------------------------------------------------------------------


def to_json_value(value: Any) -> Any:
    """A model, or anything holding models, ids and times, as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: Dict[str, Any] = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if f.name == "extra":
                continue
            if v is None:
                continue
            out[f.name] = to_json_value(v)
        extra = getattr(value, "extra", None)
        if extra:
            for key, v in extra.items():
                out.setdefault(key, to_json_value(v))
        return out
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, _dt.datetime):
        return format_time(value)
    if isinstance(value, Mapping):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    return value


def format_time(value: _dt.datetime) -> str:
    """RFC 3339 with an offset; a naive datetime is refused (npcmem needs the offset)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value!r}: give it a timezone (e.g. datetime.now(timezone.utc))")
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def now() -> str:
    """The current time as npcmem wants it (RFC 3339, UTC)."""
    return format_time(_dt.datetime.now(_dt.timezone.utc))


def encode(message: Any) -> bytes:
    """Compact UTF-8 JSON of a model or mapping, exactly the bytes that are published."""
    return json.dumps(to_json_value(message), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# --- decoding ----------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _shape(cls: type) -> Tuple[Dict[str, Any], frozenset]:
    # Resolving string annotations costs more than the rest of a request: once per model.
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    return hints, frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]


def from_dict(cls: Type[T], data: Mapping[str, Any]) -> T:
    """Build model ``cls`` from decoded JSON; unknown keys go to ``extra`` if it has one."""
    if not isinstance(data, Mapping):
        raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(data).__name__}")
    hints, names = _shape(cls)
    kwargs: Dict[str, Any] = {}
    extra: Dict[str, Any] = {}
    for key, value in data.items():
        if key in names and key != "extra":
            kwargs[key] = _convert(hints[key], value)
        else:
            extra[key] = value
    if "extra" in names:
        kwargs["extra"] = extra
    return cls(**kwargs)  # type: ignore[call-arg]


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Union:
        for arg in args:
            if arg is type(None):
                continue
            if dataclasses.is_dataclass(arg) and isinstance(value, Mapping):
                return from_dict(arg, value)
            if typing.get_origin(arg) in (list, List) and isinstance(value, list):
                return _convert(arg, value)
        return value
    if origin in (list, List) and isinstance(value, list) and args:
        return [_convert(args[0], v) for v in value]
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return from_dict(hint, value)
    return value


# --- conversation.ended ----------------------------------------------------------------


@dataclass
class TranscriptMessage:
    """One line of a conversation: ``speaker`` is ``"player"`` or ``"npc"``."""

    speaker: str
    text: str
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class NpcInfo:
    name: str
    role: Optional[str] = None
    factions: Optional[List[str]] = None
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class PlayerInfo:
    name: str
    factions: Optional[List[str]] = None
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ConversationEnded:
    """``<prefix>.conversation.ended``: a finished player-NPC conversation."""

    conversation_id: Id
    npc_id: Id
    player_id: Id
    npc: NpcInfo
    player: PlayerInfo
    started_at: Time
    ended_at: Time
    messages: List[TranscriptMessage]
    location: Optional[str] = None
    schema_version: Optional[int] = SCHEMA_VERSION
    extra: Dict[str, Any] = field(default_factory=dict)


# --- world messages ----------------------------------------------------------------------


@dataclass
class PlayerPrivacy:
    """``<prefix>.world.player_privacy``: the player opted in or out of NPC memory."""

    player_id: Id
    allow_memory: bool
    at: Time
    schema_version: Optional[int] = SCHEMA_VERSION
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class NpcMoved:
    """``<prefix>.world.npc_moved``: an NPC changed rooms (``room_id`` is the game's own)."""

    npc_id: Id
    room_id: str
    at: Time
    schema_version: Optional[int] = SCHEMA_VERSION
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Drives:
    """Gossip motivations in [0, 1]; a missing one is 0.5."""

    social: Optional[float] = None
    safety: Optional[float] = None
    loyalty: Optional[float] = None
    curiosity: Optional[float] = None
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Mood:
    mood: str
    intensity: Optional[float] = None
    expires_at: Optional[Time] = None
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class NpcProfile:
    """``<prefix>.world.npc_profile``: who an NPC is and what drives its gossip."""

    npc_id: Id
    name: str
    role: Optional[str] = None
    factions: Optional[List[str]] = None
    drives: Optional[Drives] = None
    mood: Optional[Mood] = None
    at: Optional[Time] = None
    schema_version: Optional[int] = SCHEMA_VERSION
    extra: Dict[str, Any] = field(default_factory=dict)


CATEGORIES = ("player_trait", "world_event", "location_info", "npc_gossip", "faction_intel")


@dataclass
class Observation:
    """``<prefix>.world.observation``: something NPCs witnessed."""

    observation_id: Id
    witness_ids: List[Id]
    category: str
    content: str
    importance: float
    at: Time
    subject_id: Optional[Id] = None
    tags: Optional[List[str]] = None
    schema_version: Optional[int] = SCHEMA_VERSION
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class WorldFact:
    """``<prefix>.world.fact``: an authored fact some NPCs know."""

    fact_id: Id
    npc_ids: List[Id]
    category: str
    content: str
    importance: float
    subject_id: Optional[Id] = None
    tags: Optional[List[str]] = None
    confidence: Optional[float] = None
    expires_at: Optional[Time] = None
    schema_version: Optional[int] = SCHEMA_VERSION
    extra: Dict[str, Any] = field(default_factory=dict)


# world kind (subject suffix, front-door path) -> model
WORLD_KINDS: Dict[str, type] = {
    "npc_moved": NpcMoved,
    "npc_profile": NpcProfile,
    "observation": Observation,
    "fact": WorldFact,
    "player_privacy": PlayerPrivacy,
}


# --- enrich ------------------------------------------------------------------------------


@dataclass
class Persona:
    """The NPC persona of an enrich request; only ``name`` is required."""

    name: str
    role: Optional[str] = None
    personality: Optional[str] = None
    speaking_style: Optional[str] = None
    knowledge_domains: Optional[List[str]] = None
    secret_knowledge: Optional[List[str]] = None
    will_discuss: Optional[List[str]] = None
    wont_discuss: Optional[List[str]] = None
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class EnrichRequest:
    """``<prefix>.enrich.request`` (or ``POST /v1/context``)."""

    npc_id: Id
    player_id: Id
    message: Optional[str] = None
    max_tokens: Optional[int] = None
    npc: Optional[Persona] = None
    template: Optional[str] = None
    schema_version: Optional[int] = SCHEMA_VERSION
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ContextSection:
    provider: str
    content: str
    token_count: int
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class EnrichReply:
    """Prompt context: ``system_prompt`` when the request had a persona, the ``sections``
    it was built from, ``placeholders`` for your own template."""

    sections: List[ContextSection] = field(default_factory=list)
    placeholders: Dict[str, str] = field(default_factory=dict)
    system_prompt: Optional[str] = None
    token_count: int = 0
    degraded: List[str] = field(default_factory=list)
    elapsed_us: int = 0
    extra: Dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """The system prompt if there is one, else the sections joined by blank lines."""
        if self.system_prompt:
            return self.system_prompt
        return "\n\n".join(section.content for section in self.sections)


@dataclass
class ErrorBody:
    code: str
    message: str
    field: Optional[str] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass
class ErrorReply:
    error: ErrorBody
    extra: Dict[str, Any] = field(default_factory=dict)


# --- story signals -------------------------------------------------------------------------


@dataclass
class Signal:
    """A story signal from ``<STREAM_PREFIX>_SIGNALS``. Fields a type does not use are
    ``None``; type-specific fields (``faction``, ``level``, ``old_stage``,
    ``memory_count``, ``fact_id``, ...) are in ``extra``."""

    signal_id: str
    signal_type: str
    npc_id: str
    at: str
    event_type: Optional[str] = None
    player_id: Optional[str] = None
    dimension: Optional[str] = None
    old_value: Optional[float] = None
    new_value: Optional[float] = None
    stage: Optional[str] = None
    conversation_id: Optional[str] = None
    version: Optional[int] = None
    schema_version: Optional[int] = SCHEMA_VERSION
    extra: Dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        """``signal["faction"]`` reads a field or an extra field."""
        if key != "extra" and key in {f.name for f in dataclasses.fields(self)}:
            return getattr(self, key)
        return self.extra[key]

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


# --- the query API -----------------------------------------------------------------------


@dataclass
class RelationshipState:
    """Answer of ``query.relationship``."""

    npc_id: str
    player_id: str
    has_met: bool
    stage: str
    disposition: float
    trust: float
    fear: float
    respect: float
    loyalty: float
    friendliness: float
    romantic_interest: float
    interaction_count: int
    version: int
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class MemoryItem:
    id: str
    memory_type: str
    content: str
    tags: List[str]
    importance: float
    locked: bool
    created_at: str
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class MemoriesAnswer:
    """Answer of ``query.memories``."""

    count: int
    has_memory_matching: bool
    memories: List[MemoryItem]
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class KnowledgeFact:
    id: str
    category: str
    content: str
    tags: List[str]
    confidence: float
    importance: float
    source: str
    told: str
    subject_id: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class KnowledgeAnswer:
    """Answer of ``query.knowledge``."""

    knows_fact: bool
    facts: List[KnowledgeFact]
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class RecalledTurn:
    conversation_id: str
    turn: int
    speaker: str
    text: str
    said_at: str
    score: Optional[float] = None
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class RecallAnswer:
    """Answer of ``query.recall``."""

    count: int
    turns: List[RecalledTurn]
    degraded: List[str]
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class PublishAck:
    """What storing a message returned: the stream and sequence over NATS (``None`` over
    HTTP), ``duplicate`` when the same ``msg_id`` was already stored, and the
    ``Nats-Msg-Id`` used."""

    msg_id: str
    duplicate: bool = False
    stream: Optional[str] = None
    seq: Optional[int] = None
    transport: str = "nats"
