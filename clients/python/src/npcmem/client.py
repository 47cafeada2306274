"""The async game-server client."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Type, TypeVar, Union

import nats
import nats.errors
import nats.js.api
import nats.js.errors

from . import settings as _settings
from ._http import post_json
from .errors import NpcmemError, is_error_reply
from .models import (
    CATEGORIES,
    WORLD_KINDS,
    ConversationEnded,
    Drives,
    EnrichReply,
    EnrichRequest,
    Id,
    KnowledgeAnswer,
    MemoriesAnswer,
    Mood,
    NpcMoved,
    NpcProfile,
    Observation,
    Persona,
    PlayerPrivacy,
    PublishAck,
    RecallAnswer,
    RelationshipState,
    Signal,
    Time,
    WorldFact,
    encode,
    from_dict,
    now,
    to_json_value,
)
from .signals import ACCEPT, SignalFilter

log = logging.getLogger("npcmem")

T = TypeVar("T")

# Ids of world messages without one of their own are UUID v5 of the body in this
# namespace: the same ids ingest's HTTP front door gives them, so a message published
# over NATS and over HTTP is one message.
WORLD_NAMESPACE = uuid.UUID("6a2e51c4-8f0b-4c7e-a0d3-2b9f7e41c5d8")

NATS = "nats"
HTTP = "http"


def _uuid5(namespace: uuid.UUID, data: bytes) -> uuid.UUID:
    digest = hashlib.sha1(namespace.bytes + data).digest()
    return uuid.UUID(bytes=digest[:16], version=5)


def world_msg_id(kind: str, message: Mapping[str, Any], body: bytes) -> str:
    """The ``Nats-Msg-Id`` of a world message, as ingest's front door chooses it."""
    if kind == "observation":
        return f"observation-{message['observation_id']}"
    if kind == "fact":
        return f"fact-{message['fact_id']}"
    return f"{kind}-{_uuid5(WORLD_NAMESPACE, body)}"


def _as_dict(message: Any) -> Dict[str, Any]:
    value = to_json_value(message)
    if not isinstance(value, dict):
        raise TypeError(f"expected a model or a mapping, got {type(message).__name__}")
    return value


def _require(message: Mapping[str, Any], names: Sequence[str], uuids: Sequence[str] = ()) -> None:
    """The checks every publish makes before anything leaves: required fields present
    and ids that parse (the rest is ingest's job, which dead-letters what it refuses)."""
    for name in names:
        if message.get(name) is None:
            raise NpcmemError("missing_field", f"{name}: required", name)
    for name in uuids:
        value = message.get(name)
        if value is None:
            continue
        try:
            parsed = uuid.UUID(str(value))
        except ValueError:
            raise NpcmemError("invalid_uuid", f"{name}: not a UUID: {value!r}", name) from None
        if parsed.int == 0:
            raise NpcmemError("invalid_uuid", f"{name}: the nil UUID is not an id", name)


def _decode_reply(cls: Type[T], reply: Any, what: str) -> T:
    if is_error_reply(reply):
        raise NpcmemError.from_reply(reply)
    try:
        return from_dict(cls, reply)
    except (TypeError, ValueError) as error:
        raise NpcmemError("invalid_reply", f"{what}: unexpected answer: {error}") from error


def _retryable(error: BaseException) -> bool:
    if isinstance(error, (nats.errors.TimeoutError, asyncio.TimeoutError, nats.errors.NoRespondersError)):
        return True
    if isinstance(error, (nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError)):
        return True
    if isinstance(error, nats.js.errors.ServiceUnavailableError):
        return True
    if isinstance(error, nats.js.errors.APIError):
        # 503 "no responders"/storage full (discard new), 5xx server trouble.
        return (error.code or 0) >= 500
    return False


class Client:
    """npcmem for a game server. Create it with :meth:`connect`; use ``async with``.

    Over NATS everything is available. When NATS cannot be reached and HTTP endpoints are
    known (``NPCMEM_INGEST_HTTP``, ``NPCMEM_ENRICH_HTTP``), the client works over HTTP:
    publishing through ingest's front door, context and recall through enrich; the other
    queries and signals need NATS and raise ``NpcmemError("not_supported")``.
    """

    def __init__(self, config: _settings.Settings, nc: Any = None, *, publish_retries: int = 4) -> None:
        self.settings = config
        self._nc = nc
        self._js = nc.jetstream() if nc is not None else None
        self.publish_retries = publish_retries
        self._streams: List["SignalStream"] = []

    # --- lifecycle -------------------------------------------------------------------

    @classmethod
    async def connect(
        cls,
        nats_url: Optional[str] = None,
        subject_prefix: Optional[str] = None,
        stream_prefix: Optional[str] = None,
        env_file: Optional[str] = None,
        ingest_http: Optional[str] = None,
        enrich_http: Optional[str] = None,
        timeout: float = _settings.DEFAULT_TIMEOUT,
        *,
        nats_user: Optional[str] = None,
        nats_password: Optional[str] = None,
        http_fallback: bool = True,
        publish_retries: int = 4,
        **nats_options: Any,
    ) -> "Client":
        """Connect to npcmem.

        Each setting is taken from the argument when given, else from its ``NPCMEM_*``
        environment variable, else from the env file (``env_file``, ``NPCMEM_ENV_FILE``,
        or ``.local/env`` in the working directory or an ancestor), else the default
        (``nats://127.0.0.1:4222``, prefixes ``npcmem`` / ``NPCMEM``).

        If NATS cannot be reached and ``http_fallback`` is on and an HTTP endpoint is
        known, the client works over HTTP (see :attr:`transport`). Otherwise
        ``NpcmemError("unavailable")`` is raised. ``nats_options`` go to
        ``nats.connect`` as they are.
        """
        config = _settings.resolve(
            env_file=env_file,
            timeout=timeout,
            nats_url=nats_url,
            subject_prefix=subject_prefix,
            stream_prefix=stream_prefix,
            ingest_http=ingest_http,
            enrich_http=enrich_http,
            nats_user=nats_user,
            nats_password=nats_password,
        )
        reconnect_attempts = nats_options.pop("max_reconnect_attempts", -1)
        reconnect_wait = nats_options.pop("reconnect_time_wait", 2)

        async def quiet(error: Exception) -> None:
            log.debug("nats: %s", error)

        options: Dict[str, Any] = {
            "servers": [config.nats_url],
            "connect_timeout": config.timeout,
            # Fail fast on the first connect (two attempts); reconnect for good afterwards.
            "max_reconnect_attempts": 1,
            "reconnect_time_wait": min(0.5, config.timeout),
            "error_cb": quiet,
            "name": "npcmem-python",
        }
        if config.nats_user:
            options["user"] = config.nats_user
            options["password"] = config.nats_password or ""
        options.update(nats_options)
        try:
            nc = await nats.connect(**options)
        except Exception as error:  # noqa: BLE001 - any failure to connect means the same
            if http_fallback and (config.ingest_http or config.enrich_http):
                log.warning("npcmem: NATS at %s unreachable (%s); using HTTP", config.nats_url, error)
                return cls(config, None, publish_retries=publish_retries)
            hint = "" if config.ingest_http or config.enrich_http else " (and no HTTP endpoint is configured)"
            raise NpcmemError("unavailable", f"cannot connect to NATS at {config.nats_url}: {error!r}{hint}") from error
        nc.options["max_reconnect_attempts"] = reconnect_attempts
        nc.options["reconnect_time_wait"] = reconnect_wait
        return cls(config, nc, publish_retries=publish_retries)

    @property
    def transport(self) -> str:
        """``"nats"`` or ``"http"`` (NATS was unreachable at connect)."""
        return NATS if self._nc is not None else HTTP

    @property
    def nats(self) -> Any:
        """The underlying ``nats.aio.client.Client`` (``None`` in HTTP mode)."""
        return self._nc

    async def close(self, ack_last: bool = True) -> None:
        """Close signal streams (acking the signal each handed out last unless
        ``ack_last`` is false) and the NATS connection."""
        for stream in list(self._streams):
            await stream.close(ack_last=ack_last)
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        # Leaving on an exception: the signal being handled is not acked (redelivered).
        await self.close(ack_last=exc_type is None)

    def subject(self, suffix: str) -> str:
        return f"{self.settings.subject_prefix}.{suffix}"

    # --- publishing --------------------------------------------------------------------

    async def publish_conversation(self, conversation: Union[ConversationEnded, Mapping[str, Any]]) -> PublishAck:
        """Publish a finished conversation to ``<prefix>.conversation.ended`` with
        ``Nats-Msg-Id`` = ``conversation_id``, retrying transient failures (safe: a
        repeat is stored once). Returns the ack; ``duplicate`` means it was already
        stored."""
        message = _as_dict(conversation)
        message.setdefault("schema_version", 1)
        _require(
            message,
            ["conversation_id", "npc_id", "player_id", "npc", "player", "started_at", "ended_at", "messages"],
            ["conversation_id", "npc_id", "player_id"],
        )
        body = encode(message)
        msg_id = str(uuid.UUID(str(message["conversation_id"])))
        if self._nc is None:
            return await self._http_publish("/v1/conversations", body, msg_id)
        return await self._publish(self.subject("conversation.ended"), body, msg_id)

    async def publish_world(self, message: Any, kind: Optional[str] = None) -> PublishAck:
        """Publish any world message (a model, or a mapping with ``kind`` given) to
        ``<prefix>.world.<kind>``. The ``Nats-Msg-Id`` is ``observation-<id>``,
        ``fact-<id>``, or ``<kind>-<UUID v5 of the body>``: the ids ingest's HTTP front
        door uses, stable across retries of the same message."""
        if kind is None:
            for name, model in WORLD_KINDS.items():
                if isinstance(message, model):
                    kind = name
                    break
            else:
                raise TypeError("publish_world needs kind= for a mapping")
        if kind not in WORLD_KINDS:
            raise NpcmemError("not_found", f"no world message {kind!r}; kinds: {', '.join(WORLD_KINDS)}")
        data = _as_dict(message)
        data.setdefault("schema_version", 1)
        required = {
            "npc_moved": (["npc_id", "room_id", "at"], ["npc_id"]),
            "npc_profile": (["npc_id", "name"], ["npc_id"]),
            "observation": (
                ["observation_id", "witness_ids", "category", "content", "importance", "at"],
                ["observation_id", "subject_id"],
            ),
            "fact": (["fact_id", "npc_ids", "category", "content", "importance"], ["fact_id", "subject_id"]),
            "player_privacy": (["player_id", "allow_memory", "at"], ["player_id"]),
        }[kind]
        _require(data, *required)
        body = encode(data)
        msg_id = world_msg_id(kind, data, body)
        if self._nc is None:
            return await self._http_publish(f"/v1/world/{kind}", body, msg_id)
        return await self._publish(self.subject(f"world.{kind}"), body, msg_id)

    async def npc_moved(self, npc_id: Id, room_id: str, at: Optional[Time] = None) -> PublishAck:
        """An NPC changed rooms (``at`` defaults to now)."""
        return await self.publish_world(NpcMoved(npc_id=npc_id, room_id=room_id, at=at or now()))

    async def npc_profile(
        self,
        npc_id: Id,
        name: str,
        role: Optional[str] = None,
        factions: Optional[List[str]] = None,
        drives: Union[Drives, Mapping[str, float], None] = None,
        mood: Union[Mood, Mapping[str, Any], str, None] = None,
        at: Optional[Time] = None,
    ) -> PublishAck:
        """Who an NPC is (``at`` defaults to now, so a later profile wins)."""
        if isinstance(mood, str):
            mood = Mood(mood=mood)
        elif isinstance(mood, Mapping):
            mood = from_dict(Mood, mood)
        if isinstance(drives, Mapping):
            drives = from_dict(Drives, drives)
        profile = NpcProfile(
            npc_id=npc_id, name=name, role=role, factions=factions, drives=drives, mood=mood, at=at or now()
        )
        return await self.publish_world(profile)

    async def observation(
        self,
        witness_ids: Sequence[Id],
        category: str,
        content: str,
        importance: float,
        subject_id: Optional[Id] = None,
        tags: Optional[List[str]] = None,
        at: Optional[Time] = None,
        observation_id: Optional[Id] = None,
    ) -> PublishAck:
        """Something NPCs witnessed; ``observation_id`` is generated when not given."""
        _check_category(category)
        message = Observation(
            observation_id=observation_id or uuid.uuid4(),
            witness_ids=list(witness_ids),
            category=category,
            content=content,
            importance=importance,
            at=at or now(),
            subject_id=subject_id,
            tags=tags,
        )
        return await self.publish_world(message)

    async def fact(
        self,
        npc_ids: Sequence[Id],
        category: str,
        content: str,
        importance: float,
        subject_id: Optional[Id] = None,
        tags: Optional[List[str]] = None,
        confidence: Optional[float] = None,
        expires_at: Optional[Time] = None,
        fact_id: Optional[Id] = None,
    ) -> PublishAck:
        """An authored fact some NPCs know; ``fact_id`` is generated when not given."""
        _check_category(category)
        message = WorldFact(
            fact_id=fact_id or uuid.uuid4(),
            npc_ids=list(npc_ids),
            category=category,
            content=content,
            importance=importance,
            subject_id=subject_id,
            tags=tags,
            confidence=confidence,
            expires_at=expires_at,
        )
        return await self.publish_world(message)

    async def player_privacy(self, player_id: Id, allow_memory: bool, at: Optional[Time] = None) -> PublishAck:
        """The player opted in (``True``) or out (``False``) of NPC memory."""
        return await self.publish_world(PlayerPrivacy(player_id=player_id, allow_memory=allow_memory, at=at or now()))

    async def _publish(self, subject: str, body: bytes, msg_id: str) -> PublishAck:
        delay = 0.2
        for attempt in range(self.publish_retries + 1):
            try:
                ack = await self._js.publish(
                    subject, body, timeout=self.settings.timeout, headers={"Nats-Msg-Id": msg_id}
                )
                return PublishAck(msg_id=msg_id, duplicate=bool(ack.duplicate), stream=ack.stream, seq=ack.seq)
            except nats.errors.MaxPayloadError as error:
                raise NpcmemError("payload_too_large", f"{subject}: {error}") from error
            except Exception as error:  # noqa: BLE001
                if not _retryable(error):
                    raise NpcmemError(_code_of(error), f"publish to {subject} failed: {error!r}") from error
                if attempt == self.publish_retries:
                    raise NpcmemError(
                        "unavailable", f"publish to {subject} failed after {attempt + 1} attempts: {error!r}"
                    ) from error
                log.info("npcmem: publish to %s failed (%r); retrying", subject, error)
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 3, 5.0)
        raise AssertionError("unreachable")

    async def _http_publish(self, path: str, body: bytes, msg_id: str) -> PublishAck:
        base = self.settings.ingest_http
        if not base:
            raise NpcmemError("unavailable", "no NATS connection and no ingest HTTP endpoint (NPCMEM_INGEST_HTTP)")
        delay = 0.2
        for attempt in range(self.publish_retries + 1):
            try:
                status, reply = await post_json(base + path, body, self.settings.timeout)
            except NpcmemError as error:
                if error.code != "unavailable" or attempt == self.publish_retries:
                    raise
            else:
                if status == 202 and isinstance(reply, Mapping):
                    stored_id = reply.get("msg_id") or reply.get("conversation_id") or msg_id
                    return PublishAck(msg_id=str(stored_id), duplicate=bool(reply.get("duplicate")), transport=HTTP)
                if status != 503 or attempt == self.publish_retries:
                    if is_error_reply(reply):
                        raise NpcmemError.from_reply(reply, status=status)
                    raise NpcmemError("invalid_reply", f"POST {path} answered {status}: {reply!r}", status=status)
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 3, 5.0)
        raise AssertionError("unreachable")

    # --- requests ------------------------------------------------------------------------

    async def context(
        self,
        npc_id: Id,
        player_id: Id,
        message: Optional[str] = None,
        max_tokens: Optional[int] = None,
        npc: Union[Persona, Mapping[str, Any], None] = None,
        template: Optional[str] = None,
    ) -> EnrichReply:
        """Prompt context for the NPC's next line (see :class:`EnrichReply`)."""
        if isinstance(npc, Mapping):
            npc = from_dict(Persona, npc)
        request = EnrichRequest(
            npc_id=npc_id, player_id=player_id, message=message, max_tokens=max_tokens, npc=npc, template=template
        )
        return await self.enrich(request)

    async def enrich(self, request: Union[EnrichRequest, Mapping[str, Any]]) -> EnrichReply:
        """Send an enrich request as it is; an error reply raises :class:`NpcmemError`."""
        body = encode(request)
        if self._nc is None:
            reply = await self._http_request(self.settings.enrich_http, "/v1/context", body, "NPCMEM_ENRICH_HTTP")
        else:
            reply = await self._request("enrich.request", body)
        return _decode_reply(EnrichReply, reply, "enrich.request")

    async def query_relationship(self, npc_id: Id, player_id: Id) -> RelationshipState:
        """The NPC's relationship values for the player (a stranger: ``has_met`` false)."""
        reply = await self._query("relationship", {"npc_id": npc_id, "player_id": player_id})
        return _decode_reply(RelationshipState, reply, "query.relationship")

    async def query_memories(
        self,
        npc_id: Id,
        player_id: Id,
        tags: Optional[List[str]] = None,
        min_importance: Optional[float] = None,
        memory_type: Optional[str] = None,
        contains: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> MemoriesAnswer:
        """The NPC's memories of the player; every given tag must match."""
        request = {
            "npc_id": npc_id,
            "player_id": player_id,
            "tags": tags,
            "min_importance": min_importance,
            "memory_type": memory_type,
            "contains": contains,
            "limit": limit,
        }
        return _decode_reply(MemoriesAnswer, await self._query("memories", request), "query.memories")

    async def query_knowledge(
        self, npc_id: Id, tag: Optional[str] = None, subject_id: Optional[Id] = None, limit: Optional[int] = None
    ) -> KnowledgeAnswer:
        """The facts an NPC knows (expired and superseded ones excluded)."""
        request = {"npc_id": npc_id, "tag": tag, "subject_id": subject_id, "limit": limit}
        return _decode_reply(KnowledgeAnswer, await self._query("knowledge", request), "query.knowledge")

    async def query_recall(
        self,
        npc_id: Id,
        player_id: Id,
        text: Optional[str] = None,
        from_: Optional[Time] = None,
        to: Optional[Time] = None,
        speaker: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> RecallAnswer:
        """The pair's earlier turns, best match for ``text`` first (``from_`` is the JSON
        field ``from``). Also works in HTTP mode (enrich's ``POST /v1/recall``)."""
        request = {
            "npc_id": npc_id,
            "player_id": player_id,
            "text": text,
            "from": from_,
            "to": to,
            "speaker": speaker,
            "limit": limit,
        }
        if self._nc is None:
            body = encode({"schema_version": 1, **{k: v for k, v in request.items() if v is not None}})
            reply = await self._http_request(self.settings.enrich_http, "/v1/recall", body, "NPCMEM_ENRICH_HTTP")
            return _decode_reply(RecallAnswer, reply, "query.recall")
        return _decode_reply(RecallAnswer, await self._query("recall", request), "query.recall")

    async def _query(self, kind: str, request: Mapping[str, Any]) -> Any:
        if self._nc is None:
            raise NpcmemError(
                "not_supported", f"query.{kind} has no HTTP path; it needs NATS ({self.settings.nats_url} was unreachable)"
            )
        body = encode({"schema_version": 1, **{k: v for k, v in request.items() if v is not None}})
        return await self._request(f"query.{kind}", body)

    async def _request(self, suffix: str, body: bytes) -> Any:
        subject = self.subject(suffix)
        try:
            msg = await self._nc.request(subject, body, timeout=self.settings.timeout)
        except nats.errors.NoRespondersError as error:
            raise NpcmemError("unavailable", f"no enrich service answers on {subject}") from error
        except (nats.errors.TimeoutError, asyncio.TimeoutError) as error:
            raise NpcmemError("timeout", f"{subject}: no answer within {self.settings.timeout} s") from error
        except nats.errors.Error as error:
            raise NpcmemError("unavailable", f"{subject}: {error!r}") from error
        try:
            return json.loads(msg.data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as error:
            raise NpcmemError("invalid_reply", f"{subject}: answer is not JSON: {msg.data[:200]!r}") from error

    async def _http_request(self, base: Optional[str], path: str, body: bytes, variable: str) -> Any:
        if not base:
            raise NpcmemError("unavailable", f"no NATS connection and no HTTP endpoint ({variable})")
        status, reply = await post_json(base + path, body, self.settings.timeout)
        if is_error_reply(reply):
            raise NpcmemError.from_reply(reply, status=status)
        if status != 200:
            raise NpcmemError("invalid_reply", f"POST {path} answered {status}: {reply!r}", status=status)
        return reply

    # --- signals ---------------------------------------------------------------------------

    def signals(
        self,
        durable: Optional[str] = None,
        *,
        signal_type: Optional[str] = None,
        deliver_policy: Optional[str] = None,
        batch: int = 64,
        fetch_timeout: float = 5.0,
        ack_wait: float = 30.0,
        max_ack_pending: int = 1000,
        signal_filter: Optional[SignalFilter] = None,
    ) -> "SignalStream":
        """Story signals from ``<STREAM_PREFIX>_SIGNALS`` as an async iterator::

            async for signal in client.signals("game-eu1"):
                ...   # acked when the loop asks for the next one

        ``durable`` names a durable pull consumer (it resumes where it left off; do not
        start it with the stream prefix); without one an ephemeral consumer is used.
        ``deliver_policy`` is ``"all"`` for a durable (the doc's recommendation) and
        ``"new"`` for an ephemeral one unless given. Repeated ``signal_id`` and signals
        older than the highest ``version`` applied for their NPC-player pair are dropped
        (and acked) by ``signal_filter``; share one filter between streams to share
        that memory."""
        if self._nc is None:
            raise NpcmemError("not_supported", "signals need NATS; the client is in HTTP mode")
        stream = SignalStream(
            self,
            durable=durable,
            subject=self.subject(f"signal.{signal_type}" if signal_type else "signal.>"),
            deliver_policy=deliver_policy or ("all" if durable else "new"),
            batch=batch,
            fetch_timeout=fetch_timeout,
            ack_wait=ack_wait,
            max_ack_pending=max_ack_pending,
            signal_filter=SignalFilter() if signal_filter is None else signal_filter,
        )
        self._streams.append(stream)
        return stream


def _check_category(category: str) -> None:
    if category not in CATEGORIES:
        raise NpcmemError("invalid_field", f"category: must be one of {', '.join(CATEGORIES)}", "category")


def _code_of(error: BaseException) -> str:
    if isinstance(error, nats.js.errors.NotFoundError):
        return "not_found"
    if isinstance(error, nats.js.errors.APIError):
        return "refused"
    return "unavailable"


class SignalStream:
    """An async iterator of :class:`Signal` over a JetStream pull consumer. Each signal
    is acked (and remembered by the filter) when the iteration moves past it, so a
    signal whose handling raised is redelivered later. Duplicates and stale signals are
    acked and skipped. Call :meth:`close` (or use ``async with``) to stop."""

    def __init__(
        self,
        client: Client,
        *,
        durable: Optional[str],
        subject: str,
        deliver_policy: str,
        batch: int,
        fetch_timeout: float,
        ack_wait: float,
        max_ack_pending: int,
        signal_filter: SignalFilter,
    ) -> None:
        self._client = client
        self.durable = durable
        self.subject = subject
        self.stream_name = f"{client.settings.stream_prefix}_SIGNALS"
        self.deliver_policy = deliver_policy
        self.batch = batch
        self.fetch_timeout = fetch_timeout
        self.ack_wait = ack_wait
        self.max_ack_pending = max_ack_pending
        self.filter = signal_filter
        self.dropped = {"duplicate": 0, "stale": 0, "invalid": 0}
        self._sub: Any = None
        self._buffer: List[Any] = []
        self._pending: Optional[tuple] = None  # (msg, signal) yielded, not yet acked
        self._closed = False

    async def _subscribe(self) -> None:
        config = nats.js.api.ConsumerConfig(
            ack_policy=nats.js.api.AckPolicy.EXPLICIT,
            deliver_policy=nats.js.api.DeliverPolicy(self.deliver_policy),
            ack_wait=self.ack_wait,
            max_ack_pending=self.max_ack_pending,
            filter_subject=self.subject,
        )
        if self.durable is None:
            config.inactive_threshold = 300.0
        try:
            self._sub = await self._client._js.pull_subscribe(
                self.subject, durable=self.durable, stream=self.stream_name, config=config
            )
        except nats.js.errors.NotFoundError as error:
            raise NpcmemError(
                "unavailable", f"stream {self.stream_name} not found (has any npcmem service started?)"
            ) from error
        except nats.errors.Error as error:
            raise NpcmemError("unavailable", f"cannot consume {self.stream_name}: {error!r}") from error

    def __aiter__(self) -> "SignalStream":
        return self

    async def __anext__(self) -> Signal:
        await self._settle()
        if self._sub is None:
            if self._closed:
                raise StopAsyncIteration
            await self._subscribe()
        while not self._closed:
            if not self._buffer:
                try:
                    self._buffer = await self._sub.fetch(self.batch, timeout=self.fetch_timeout)
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    continue
                except nats.errors.ConnectionClosedError:
                    break
            msg = self._buffer.pop(0)
            try:
                signal = from_dict(Signal, json.loads(msg.data.decode("utf-8")))
            except Exception as error:  # noqa: BLE001 - not a signal: skip it for good
                log.warning("npcmem: dropping an undecodable signal on %s: %s", msg.subject, error)
                self.dropped["invalid"] += 1
                await msg.term()
                continue
            verdict = self.filter.check(signal)
            if verdict != ACCEPT:
                self.dropped[verdict] += 1
                await msg.ack()
                continue
            self._pending = (msg, signal)
            return signal
        raise StopAsyncIteration

    async def _settle(self) -> None:
        """Ack the signal handed out last (the caller came back for more)."""
        if self._pending is not None:
            msg, signal = self._pending
            self._pending = None
            self.filter.commit(signal)
            await msg.ack()

    async def next(self, timeout: Optional[float] = None) -> Signal:
        """The next signal, or ``asyncio.TimeoutError`` after ``timeout`` seconds."""
        return await asyncio.wait_for(self.__anext__(), timeout)

    async def close(self, ack_last: bool = True) -> None:
        """Stop. The signal handed out last is acked when ``ack_last`` (it was applied)
        and otherwise left for redelivery, like the fetched ones not handed out yet."""
        if self._closed:
            return
        self._closed = True
        if ack_last:
            try:
                await self._settle()
            except Exception as error:  # noqa: BLE001
                log.debug("npcmem: ack on close failed: %s", error)
        self._pending = None
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception as error:  # noqa: BLE001
                log.debug("npcmem: unsubscribe failed: %s", error)
            consumer = getattr(self._sub, "_consumer", None)
            if self.durable is None and consumer and not self._client._nc.is_closed:
                try:  # an ephemeral consumer would otherwise linger until inactive_threshold
                    await self._client._js.delete_consumer(self.stream_name, consumer)
                except Exception as error:  # noqa: BLE001
                    log.debug("npcmem: deleting consumer %s failed: %s", consumer, error)
        if self in self._client._streams:
            self._client._streams.remove(self)

    async def __aenter__(self) -> "SignalStream":
        return self

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        await self.close(ack_last=exc_type is None)
