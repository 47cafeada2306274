"""Client behaviour without servers: error replies become NpcmemError, publishes carry
the right Nats-Msg-Id and are retried, and the HTTP fallback (against a stdlib HTTP
server standing in for ingest and enrich)."""

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import nats.errors
import pytest

import npcmem
from npcmem import Client, NpcmemError
from npcmem.client import WORLD_NAMESPACE, _uuid5, world_msg_id
from npcmem.settings import Settings

NPC = "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21"
PLAYER = "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32"


def conversation(cid=None):
    return {
        "conversation_id": cid or str(uuid.uuid4()),
        "npc_id": NPC,
        "player_id": PLAYER,
        "npc": {"name": "Brom", "role": "blacksmith"},
        "player": {"name": "Aria"},
        "started_at": "2025-06-01T12:00:00Z",
        "ended_at": "2025-06-01T12:05:00Z",
        "messages": [{"speaker": "player", "text": "I need a sword."}],
    }


class Reply:
    def __init__(self, body):
        self.data = json.dumps(body).encode()


class Ack:
    def __init__(self, duplicate=False):
        self.stream, self.seq, self.duplicate = "NPCMEM_CONVERSATIONS", 42, duplicate


class FakeJS:
    def __init__(self, failures=()):
        self.failures = list(failures)
        self.calls = []

    async def publish(self, subject, payload, timeout=None, headers=None):
        self.calls.append((subject, payload, headers))
        if self.failures:
            raise self.failures.pop(0)
        return Ack(duplicate=len(self.calls) > 1 and not self.failures and len(self.calls) > 3)


class FakeNC:
    def __init__(self, replies=None, js=None):
        self.replies = replies or {}
        self.js = js or FakeJS()
        self.requests = []
        self.is_closed = False

    def jetstream(self):
        return self.js

    async def request(self, subject, payload, timeout=None):
        self.requests.append((subject, json.loads(payload)))
        reply = self.replies.get(subject)
        if reply is None:
            raise nats.errors.NoRespondersError
        return Reply(reply)

    async def close(self):
        self.is_closed = True


def test_error_reply_becomes_an_exception():
    error = NpcmemError.from_reply(
        {"error": {"code": "invalid_field", "message": "npc: must be an object, got a string", "field": "npc"}}
    )
    assert (error.code, error.field) == ("invalid_field", "npc")
    assert "npc: must be an object" in error.message and "invalid_field" in str(error)
    plain = NpcmemError.from_reply({"error": {"code": "unavailable", "message": "store down"}})
    assert plain.field is None and plain.code == "unavailable"


async def test_enrich_error_reply_raises_with_code_message_and_field():
    nc = FakeNC(
        {
            "npcmem.enrich.request": {
                "error": {"code": "invalid_uuid", "message": "npc_id: not a UUID", "field": "npc_id"}
            }
        }
    )
    client = Client(Settings(), nc)
    with pytest.raises(NpcmemError) as caught:
        await client.enrich({"npc_id": "nope", "player_id": PLAYER})
    assert (caught.value.code, caught.value.field, caught.value.message) == (
        "invalid_uuid",
        "npc_id",
        "npc_id: not a UUID",
    )


async def test_query_error_and_success_replies():
    nc = FakeNC(
        {
            "game.query.memories": {"error": {"code": "invalid_field", "message": "limit: 1000 > 200", "field": "limit"}},
            "game.query.relationship": {
                "npc_id": NPC, "player_id": PLAYER, "has_met": False, "stage": "stranger", "disposition": 0.0,
                "trust": 0.5, "fear": 0.0, "respect": 0.5, "loyalty": 0.3, "friendliness": 0.5,
                "romantic_interest": 0.0, "interaction_count": 0, "version": 0, "future_field": 1,
            },
        }
    )
    client = Client(Settings(subject_prefix="game"), nc)
    with pytest.raises(NpcmemError) as caught:
        await client.query_memories(NPC, PLAYER, limit=1000)
    assert caught.value.field == "limit"
    state = await client.query_relationship(NPC, PLAYER)
    assert state.stage == "stranger" and state.extra == {"future_field": 1}
    assert nc.requests[-1] == ("game.query.relationship", {"schema_version": 1, "npc_id": NPC, "player_id": PLAYER})


async def test_no_responders_is_unavailable():
    client = Client(Settings(), FakeNC({}))
    with pytest.raises(NpcmemError) as caught:
        await client.context(NPC, PLAYER, message="hi", npc={"name": "Brom"})
    assert caught.value.code == "unavailable"


async def test_context_sends_the_request_and_decodes_the_reply():
    reply = {"sections": [{"provider": "memory", "content": "Aria threatened you.", "token_count": 5}],
             "placeholders": {"reputation": "enemy"}, "system_prompt": "You are Brom.", "token_count": 9,
             "degraded": [], "elapsed_us": 100}
    nc = FakeNC({"npcmem.enrich.request": reply})
    client = Client(Settings(), nc)
    got = await client.context(NPC, PLAYER, message="Remember me?", max_tokens=512,
                               npc=npcmem.Persona(name="Brom", role="the blacksmith"))
    assert got.sections[0].content == "Aria threatened you." and got.text() == "You are Brom."
    subject, sent = nc.requests[0]
    assert subject == "npcmem.enrich.request"
    assert sent == {"schema_version": 1, "npc_id": NPC, "player_id": PLAYER, "message": "Remember me?",
                    "max_tokens": 512, "npc": {"name": "Brom", "role": "the blacksmith"}}


async def test_publish_conversation_sets_msg_id_and_retries_transient_failures():
    js = FakeJS(failures=[nats.errors.TimeoutError(), nats.errors.NoRespondersError()])
    client = Client(Settings(), FakeNC(js=js))
    cid = str(uuid.uuid4())
    ack = await client.publish_conversation(conversation(cid))
    assert (ack.msg_id, ack.stream, ack.seq) == (cid, "NPCMEM_CONVERSATIONS", 42)
    assert len(js.calls) == 3
    assert {c[2]["Nats-Msg-Id"] for c in js.calls} == {cid}
    assert len({c[1] for c in js.calls}) == 1  # the same bytes each time
    assert js.calls[0][0] == "npcmem.conversation.ended"


async def test_publish_gives_up_after_the_retries():
    js = FakeJS(failures=[nats.errors.TimeoutError()] * 10)
    client = Client(Settings(), FakeNC(js=js), publish_retries=2)
    with pytest.raises(NpcmemError) as caught:
        await client.publish_conversation(conversation())
    assert caught.value.code == "unavailable" and len(js.calls) == 3


async def test_publish_checks_ids_before_sending():
    js = FakeJS()
    client = Client(Settings(), FakeNC(js=js))
    bad = conversation("00000000-0000-0000-0000-000000000000")
    with pytest.raises(NpcmemError) as caught:
        await client.publish_conversation(bad)
    assert (caught.value.code, caught.value.field) == ("invalid_uuid", "conversation_id")
    missing = conversation()
    del missing["messages"]
    with pytest.raises(NpcmemError) as caught:
        await client.publish_conversation(missing)
    assert (caught.value.code, caught.value.field) == ("missing_field", "messages")
    assert js.calls == []


async def test_world_messages_subjects_and_msg_ids():
    js = FakeJS()
    client = Client(Settings(), FakeNC(js=js))
    oid, fid = uuid.uuid4(), uuid.uuid4()
    await client.observation([NPC], "world_event", "Bandits raided the mill", 0.8, observation_id=oid)
    await client.fact([NPC], "location_info", "The cave has treasure", 0.6, tags=["cave"], fact_id=fid)
    await client.npc_moved(NPC, "tavern-1", at="2025-06-01T12:05:00Z")
    await client.npc_profile(NPC, "Brom", role="blacksmith", drives={"social": 0.8}, mood="calm")
    await client.player_privacy(PLAYER, False)
    subjects = [c[0] for c in js.calls]
    assert subjects == [f"npcmem.world.{k}" for k in ("observation", "fact", "npc_moved", "npc_profile", "player_privacy")]
    ids = [c[2]["Nats-Msg-Id"] for c in js.calls]
    assert ids[0] == f"observation-{oid}" and ids[1] == f"fact-{fid}"
    moved_body = js.calls[2][1]
    assert ids[2] == f"npc_moved-{_uuid5(WORLD_NAMESPACE, moved_body)}"
    assert json.loads(js.calls[3][1])["drives"] == {"social": 0.8}
    assert json.loads(js.calls[3][1])["mood"] == {"mood": "calm"}
    with pytest.raises(NpcmemError):
        await client.fact([NPC], "gossip", "x", 0.5)


def test_uuid5_matches_the_standard_library():
    name = "npc_moved body"
    assert _uuid5(WORLD_NAMESPACE, name.encode()) == uuid.uuid5(WORLD_NAMESPACE, name)
    assert world_msg_id("npc_profile", {}, b"{}").startswith("npc_profile-")


# --- HTTP fallback against a local stand-in -----------------------------------------------


class StandIn(BaseHTTPRequestHandler):
    seen = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        StandIn.seen.append((self.path, body))
        data = json.loads(body)
        if self.path == "/v1/conversations":
            if data["messages"][0]["speaker"] not in ("player", "npc"):
                self.answer(400, {"error": {"code": "invalid_field", "message": "messages[0].speaker: unknown",
                                            "field": "messages[0].speaker"}})
            else:
                dup = sum(1 for p, b in StandIn.seen if b == body) > 1
                self.answer(202, {"conversation_id": data["conversation_id"], "duplicate": dup})
        elif self.path.startswith("/v1/world/"):
            self.answer(202, {"msg_id": "from-server", "duplicate": False})
        elif self.path == "/v1/context":
            if data.get("npc") == "Brom":
                self.answer(400, {"error": {"code": "invalid_field", "message": "npc: must be an object, got a string",
                                            "field": "npc"}})
            else:
                self.answer(200, {"sections": [], "system_prompt": "You are Brom.", "token_count": 4})
        elif self.path == "/v1/recall":
            self.answer(200, {"count": 0, "turns": [], "degraded": []})
        else:
            self.answer(404, {"error": {"code": "not_found", "message": self.path}})

    def answer(self, status, body):
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def stand_in():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    StandIn.seen = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_falls_back_to_http_when_nats_is_unreachable(stand_in, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in ("NPCMEM_ENV_FILE", "NPCMEM_NATS_URL", "NPCMEM_INGEST_HTTP", "NPCMEM_ENRICH_HTTP"):
        monkeypatch.delenv(key, raising=False)
    async with await Client.connect(
        nats_url="nats://127.0.0.1:1", ingest_http=stand_in, enrich_http=stand_in + "/", timeout=1.0
    ) as client:
        assert client.transport == "http"
        c = conversation()
        first = await client.publish_conversation(c)
        again = await client.publish_conversation(c)
        assert (first.transport, first.msg_id, first.duplicate, again.duplicate) == (
            "http", c["conversation_id"], False, True)
        bad = conversation()
        bad["messages"][0]["speaker"] = "narrator"
        with pytest.raises(NpcmemError) as caught:
            await client.publish_conversation(bad)
        assert (caught.value.status, caught.value.field) == (400, "messages[0].speaker")
        assert (await client.npc_moved(NPC, "forge")).msg_id == "from-server"
        assert (await client.context(NPC, PLAYER, npc={"name": "Brom"})).system_prompt == "You are Brom."
        with pytest.raises(NpcmemError) as caught:
            await client.enrich({"npc_id": NPC, "player_id": PLAYER, "npc": "Brom"})
        assert (caught.value.code, caught.value.field, caught.value.status) == ("invalid_field", "npc", 400)
        assert (await client.query_recall(NPC, PLAYER, text="sword")).count == 0
        for query in (client.query_relationship(NPC, PLAYER), client.query_memories(NPC, PLAYER),
                      client.query_knowledge(NPC)):
            with pytest.raises(NpcmemError) as caught:
                await query
            assert caught.value.code == "not_supported" and "NATS" in caught.value.message
        with pytest.raises(NpcmemError):
            client.signals()
    assert [p for p, _ in StandIn.seen][:2] == ["/v1/conversations", "/v1/conversations"]


async def test_no_nats_and_no_http_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key in ("NPCMEM_ENV_FILE", "NPCMEM_INGEST_HTTP", "NPCMEM_ENRICH_HTTP"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(NpcmemError) as caught:
        await Client.connect(nats_url="nats://127.0.0.1:1", timeout=0.5)
    assert caught.value.code == "unavailable" and "127.0.0.1:1" in caught.value.message


async def test_http_unreachable_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NPCMEM_ENV_FILE", raising=False)
    client = await Client.connect(nats_url="nats://127.0.0.1:1", enrich_http="http://127.0.0.1:1", timeout=0.5)
    with pytest.raises(NpcmemError) as caught:
        await client.context(NPC, PLAYER)
    assert caught.value.code == "unavailable"
    with pytest.raises(NpcmemError) as caught:
        await client.publish_conversation(conversation())  # no ingest endpoint known
    assert caught.value.code == "unavailable" and "NPCMEM_INGEST_HTTP" in caught.value.message
    await client.close()
