"""The models cannot drift from docs/schemas silently: every property a schema lists is
a field of its model, every required property is required in the model (and nothing
else is), and every schema example survives a decode/encode round trip."""

import dataclasses
import inspect
import json
import os
import typing
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import npcmem
from npcmem import models

SCHEMAS = Path(os.environ["NPCMEM_TEST_SCHEMAS"])
FIXTURES = Path(os.environ["NPCMEM_TEST_FIXTURES"])

# (schema file, path inside it, model). A path names properties from the top, "[]"
# stepping into an array's items: "messages[]" is one transcript message.
CASES = [
    ("conversation.ended", "", models.ConversationEnded),
    ("conversation.ended", "npc", models.NpcInfo),
    ("conversation.ended", "player", models.PlayerInfo),
    ("conversation.ended", "messages[]", models.TranscriptMessage),
    ("world.player_privacy", "", models.PlayerPrivacy),
    ("world.npc_moved", "", models.NpcMoved),
    ("world.npc_profile", "", models.NpcProfile),
    ("world.npc_profile", "drives", models.Drives),
    ("world.npc_profile", "mood", models.Mood),
    ("world.observation", "", models.Observation),
    ("world.fact", "", models.WorldFact),
    ("enrich.request", "", models.EnrichRequest),
    ("enrich.request", "npc", models.Persona),
    ("enrich.reply", "", models.EnrichReply),
    ("enrich.reply", "sections[]", models.ContextSection),
    ("error-reply", "", models.ErrorReply),
    ("error-reply", "error", models.ErrorBody),
    ("signal", "", models.Signal),
    ("query.relationship.reply", "", models.RelationshipState),
    ("query.memories.reply", "", models.MemoriesAnswer),
    ("query.memories.reply", "memories[]", models.MemoryItem),
    ("query.knowledge.reply", "", models.KnowledgeAnswer),
    ("query.knowledge.reply", "facts[]", models.KnowledgeFact),
    ("query.recall.reply", "", models.RecallAnswer),
    ("query.recall.reply", "turns[]", models.RecalledTurn),
]
ALWAYS_THERE = {
    "query.relationship",
    "query.relationship.reply",
    "query.memories",
    "query.memories.reply",
    "query.knowledge",
    "query.knowledge.reply",
    "query.recall",
    "query.recall.reply",
    "conversation.ended",
    "world.player_privacy",
    "world.npc_moved",
    "world.npc_profile",
    "world.observation",
    "world.fact",
    "enrich.request",
    "enrich.reply",
    "error-reply",
    "signal",
}

# Request schemas -> the client method whose keyword parameters build that request.
# (JSON name -> Python parameter name where they differ.)
REQUESTS = [
    ("enrich.request", npcmem.Client.context, {}),
    ("query.relationship", npcmem.Client.query_relationship, {}),
    ("query.memories", npcmem.Client.query_memories, {}),
    ("query.knowledge", npcmem.Client.query_knowledge, {}),
    ("query.recall", npcmem.Client.query_recall, {"from": "from_"}),
]


def load(name):
    path = SCHEMAS / f"{name}.schema.json"
    return json.loads(path.read_text(encoding="utf-8"))


def resolve(node, root):
    """Follow local $refs, and take the object branch of anyOf/oneOf (Option<T>)."""
    for _ in range(32):
        if "$ref" in node:
            ref = node["$ref"]
            assert ref.startswith("#/"), f"non-local $ref {ref}"
            target = root
            for part in ref[2:].split("/"):
                target = target[part]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            continue
        branches = node.get("anyOf") or node.get("oneOf")
        if branches and "properties" not in node:
            objects = [b for b in branches if b.get("type") != "null"]
            if len(objects) == 1:
                node = {**objects[0], **{k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}}
                continue
        return node
    raise AssertionError("$ref loop")


def at(schema, path):
    node = resolve(schema, schema)
    for part in [p for p in path.split(".") if p]:
        items = part.endswith("[]")
        node = resolve(node["properties"][part[:-2] if items else part], schema)
        if items:
            node = resolve(node["items"], schema)
    return node


def is_required(f):
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING  # type: ignore[misc]


def test_the_schemas_are_there():
    assert SCHEMAS.is_dir(), f"no schemas at {SCHEMAS}"
    for name in ALWAYS_THERE:
        assert (SCHEMAS / f"{name}.schema.json").is_file(), name


@pytest.mark.parametrize("name, path, model", CASES, ids=[f"{c[0]}:{c[1]}" if c[1] else c[0] for c in CASES])
def test_model_matches_schema(name, path, model):
    node = at(load(name), path)
    fields = {f.name: f for f in dataclasses.fields(model)}
    properties = set(node.get("properties", {}))
    required = set(node.get("required", []))
    assert properties, f"{name}:{path} has no properties (schema layout changed?)"

    missing = properties - set(fields)
    assert not missing, f"{model.__name__} lacks schema properties {sorted(missing)}"

    not_required = {p for p in required if not is_required(fields[p])}
    assert not not_required, f"{model.__name__} makes required properties optional: {sorted(not_required)}"

    over_required = {n for n, f in fields.items() if is_required(f) and n not in required}
    assert not over_required, f"{model.__name__} requires what the schema does not: {sorted(over_required)}"

    assert "extra" in fields, "unknown fields must survive (additionalProperties)"
    assert node.get("additionalProperties", True) is not False


@pytest.mark.parametrize("name, method, renamed", REQUESTS, ids=[r[0] for r in REQUESTS])
def test_request_methods_match_request_schemas(name, method, renamed):
    node = at(load(name), "")
    parameters = inspect.signature(method).parameters
    properties = set(node.get("properties", {})) - {"schema_version"}
    required = set(node.get("required", []))
    python = {prop: renamed.get(prop, prop) for prop in properties}
    missing = {prop for prop, param in python.items() if param not in parameters}
    assert not missing, f"Client.{method.__name__} cannot send {sorted(missing)}"
    optional = {p for p in required if parameters[python[p]].default is not inspect.Parameter.empty}
    assert not optional, f"Client.{method.__name__} makes required {sorted(optional)} optional"
    wanted = {p for p, v in parameters.items() if p != "self" and v.default is inspect.Parameter.empty}
    extra_required = wanted - {python[p] for p in required}
    assert not extra_required, f"Client.{method.__name__} requires {sorted(extra_required)}"


def without_nulls(value):
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


TOP_LEVEL = [c for c in CASES if not c[1]]


@pytest.mark.parametrize("name, path, model", TOP_LEVEL, ids=[c[0] for c in TOP_LEVEL])
def test_wire_fixtures_round_trip(name, path, model):
    """The repository keeps the messages clients send and read today; each one decodes
    into its model and encodes back to the same JSON (nulls left out)."""
    fixture = FIXTURES / f"{name}.jsonl"
    assert fixture.is_file(), f"no fixture {fixture}"
    lines = [line for line in fixture.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines
    for line in lines:
        message = json.loads(line)
        decoded = npcmem.from_dict(model, message)
        expected = without_nulls(message)
        if "schema_version" in {f.name for f in dataclasses.fields(model)}:
            expected.setdefault("schema_version", 1)
        assert json.loads(npcmem.encode(decoded)) == expected


@pytest.mark.parametrize("name, method, renamed", REQUESTS, ids=[r[0] for r in REQUESTS])
def test_wire_fixture_requests_fit_the_methods(name, method, renamed):
    parameters = inspect.signature(method).parameters
    for line in (FIXTURES / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            keys = set(json.loads(line)) - {"schema_version"}
            assert {renamed.get(k, k) for k in keys} <= set(parameters), (name, keys)


@pytest.mark.parametrize("name, path, model", TOP_LEVEL, ids=[c[0] for c in TOP_LEVEL])
def test_schema_examples_round_trip(name, path, model):
    examples = load(name).get("examples", [])
    if not examples:
        pytest.skip(f"{name} has no examples")
    for example in examples:
        decoded = npcmem.from_dict(model, example)
        assert isinstance(decoded, model)
        again = json.loads(npcmem.encode(decoded))
        expected = without_nulls(example)
        if "schema_version" in {f.name for f in dataclasses.fields(model)}:
            expected.setdefault("schema_version", 1)  # absent means 1; the SDK always sends it
        assert again == expected


CONVERSATION = {
    "schema_version": 1,
    "conversation_id": "0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10",
    "npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21",
    "player_id": "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32",
    "npc": {"name": "Brom", "role": "blacksmith", "factions": ["smiths_guild"]},
    "player": {"name": "Aria", "factions": ["thieves_guild"]},
    "location": "Market Square",
    "started_at": "2025-06-01T12:00:00Z",
    "ended_at": "2025-06-01T12:05:00Z",
    "messages": [{"speaker": "player", "text": "I need a sword."}, {"speaker": "npc", "text": "Forty gold."}],
}
FACTION_SHIFT = {
    "schema_version": 1, "signal_id": "4f1c8e96-ad4c-4b0e-9185-7d6e5a3c2f54",
    "signal_type": "faction_reputation_shift", "event_type": "reputation_down",
    "npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21", "player_id": "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32",
    "dimension": "reputation", "old_value": -0.2, "new_value": -0.31, "stage": None,
    "conversation_id": "3e0b7d85-9c3b-4fad-8074-6c5d4f2b1e43", "version": None, "at": "2025-06-01T12:05:00Z",
    "faction": "city_guard", "level": -0.25, "npcs_known": 3,
}


def test_nested_fields_decode_to_models():
    conversation = npcmem.from_dict(npcmem.ConversationEnded, CONVERSATION)
    assert isinstance(conversation.npc, npcmem.NpcInfo) and conversation.npc.factions == ["smiths_guild"]
    assert isinstance(conversation.player, npcmem.PlayerInfo)
    assert all(isinstance(m, npcmem.TranscriptMessage) for m in conversation.messages)
    assert json.loads(npcmem.encode(conversation)) == CONVERSATION
    reply = npcmem.from_dict(
        npcmem.EnrichReply, {"sections": [{"provider": "memory", "content": "x", "token_count": 1}]}
    )
    assert all(isinstance(s, npcmem.ContextSection) for s in reply.sections) and reply.degraded == []
    profile = npcmem.from_dict(
        npcmem.NpcProfile,
        {"npc_id": "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21", "name": "Tobin", "drives": {"social": 0.8},
         "mood": {"mood": "anxious", "intensity": 0.6}},
    )
    assert isinstance(profile.drives, npcmem.Drives) and isinstance(profile.mood, npcmem.Mood)
    memories = npcmem.from_dict(
        npcmem.MemoriesAnswer,
        {"count": 1, "has_memory_matching": True, "memories": [
            {"id": "236ef910-1f3c-4b7b-87c9-ef3f21f7423a", "memory_type": "episodic", "content": "c",
             "tags": ["threat"], "importance": 0.7, "locked": False, "created_at": "2026-12-05T10:03:00Z"}]},
    )
    assert isinstance(memories.memories[0], npcmem.MemoryItem)


def test_signal_extra_fields_are_kept_and_readable():
    signal = npcmem.from_dict(npcmem.Signal, FACTION_SHIFT)
    assert signal["faction"] == "city_guard" and signal["level"] == -0.25
    assert signal.extra == {"faction": "city_guard", "level": -0.25, "npcs_known": 3}
    assert signal.get("old_stage") is None
    assert signal["signal_type"] == "faction_reputation_shift" and signal.version is None
    assert json.loads(npcmem.encode(signal)) == {k: v for k, v in FACTION_SHIFT.items() if v is not None}


def test_encoding_ids_times_and_leaving_out_none():
    when = datetime(2025, 6, 1, 12, 5, tzinfo=timezone.utc)
    npc = uuid.UUID("1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21")
    moved = npcmem.NpcMoved(npc_id=npc, room_id="tavern-1", at=when)
    assert json.loads(npcmem.encode(moved)) == {
        "schema_version": 1,
        "npc_id": str(npc),
        "room_id": "tavern-1",
        "at": "2025-06-01T12:05:00Z",
    }
    plus_two = datetime(2025, 6, 1, 14, 5, tzinfo=timezone(timedelta(hours=2)))
    assert models.format_time(plus_two) == "2025-06-01T14:05:00+02:00"
    with pytest.raises(ValueError):
        npcmem.encode(npcmem.NpcMoved(npc_id=npc, room_id="r", at=datetime(2025, 6, 1)))


def test_encode_is_compact_utf8():
    body = npcmem.encode({"text": "Grüße"})
    assert body == '{"text":"Grüße"}'.encode("utf-8")


def test_model_type_hints_resolve():
    for _, _, model in CASES:
        typing.get_type_hints(model, vars(models))
