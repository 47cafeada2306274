"""Against a real running npcmem (NATS, PostgreSQL and the services).

Skipped unless NPCMEM_SDK_INTEGRATION=1; with it set they FAIL when no system answers.
The endpoints come from the usual settings search (NPCMEM_* variables, NPCMEM_ENV_FILE,
or .local/env), e.g.:

    NPCMEM_SDK_INTEGRATION=1 NPCMEM_ENV_FILE=/path/to/.local/env pytest tests/test_integration.py
"""

import asyncio
import contextlib
import os
import time
import uuid

import pytest

import npcmem
from npcmem import Client, NpcmemError

ENABLED = os.environ.get("NPCMEM_SDK_INTEGRATION", "") not in ("", "0")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not ENABLED, reason="set NPCMEM_SDK_INTEGRATION=1 to run against a running npcmem"),
]

DEADLINE = float(os.environ.get("NPCMEM_SDK_DEADLINE", "60"))
UNREACHABLE_NATS = "nats://127.0.0.1:1"

THREAT = [
    ("player", "Give me your gold or I will kill you."),
    ("npc", "Get out of my forge!"),
    ("player", "I'll burn your forge to the ground."),
]
TRADE = [
    ("player", "I'd like to buy a sword."),
    ("npc", "Fifty gold for a fine blade."),
    ("player", "Deal, here is fifty gold."),
]
BROM = npcmem.Persona(name="Brom", role="the blacksmith", personality="gruff but fair")


def conversation(npc_id, player_id, lines, minutes_ago):
    end = time.time() - minutes_ago * 60
    stamp = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    return npcmem.ConversationEnded(
        conversation_id=uuid.uuid4(),
        npc_id=npc_id,
        player_id=player_id,
        npc=npcmem.NpcInfo(name="Brom", role="blacksmith", factions=["smiths_guild"]),
        player=npcmem.PlayerInfo(name="Aria"),
        location="Market Square",
        started_at=stamp(end - 120),
        ended_at=stamp(end),
        messages=[npcmem.TranscriptMessage(speaker, text) for speaker, text in lines],
    )


async def connect(**kwargs):
    named = os.environ.get("NPCMEM_ENV_FILE")
    if named and not os.path.isfile(named):
        pytest.fail(f"NPCMEM_ENV_FILE={named} does not exist (is the system up?)")
    try:
        return await Client.connect(**kwargs)
    except NpcmemError as error:
        pytest.fail(f"NPCMEM_SDK_INTEGRATION is set but npcmem is not reachable: {error}")


@contextlib.asynccontextmanager
async def nats_client():
    """Connected over NATS with enrich answering, or the test fails (inside the test
    body, so a missing system is a failure, not a setup error)."""
    c = await connect(http_fallback=False, timeout=5.0)
    assert c.transport == "nats"
    try:
        # enrich must answer too, not only NATS.
        await c.query_relationship(uuid.uuid4(), uuid.uuid4())
    except NpcmemError as error:
        await c.close()
        pytest.fail(f"NATS answers but the enrich service does not: {error}")
    try:
        yield c
    finally:
        await c.close()


async def until(what, probe, done):
    """Poll ``probe`` until ``done(result)``; fail with the last result at the deadline."""
    deadline = time.monotonic() + DEADLINE
    while True:
        result = await probe()
        if done(result):
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {DEADLINE} s waiting for {what}; last: {result!r}")
        await asyncio.sleep(0.3)


async def test_conversations_memories_context_signals_and_errors():
    async with nats_client() as client:
        npc, player = str(uuid.uuid4()), str(uuid.uuid4())
        threat = conversation(npc, player, THREAT, minutes_ago=30)
        trade = conversation(npc, player, TRADE, minutes_ago=10)

        first = await client.publish_conversation(threat)
        again = await client.publish_conversation(threat)  # a retry: JetStream drops it
        assert (first.duplicate, again.duplicate) == (False, True)
        assert again.seq == first.seq and first.stream == f"{client.settings.stream_prefix}_CONVERSATIONS"
        assert not (await client.publish_conversation(trade)).duplicate

        memories = await until(
            "the threat and the trade as memories",
            lambda: client.query_memories(npc, player),
            lambda m: m.count >= 2 and {"threat", "trade"} <= {t for mem in m.memories for t in mem.tags},
        )
        threat_memories = await client.query_memories(npc, player, tags=["threat"])
        assert threat_memories.has_memory_matching
        assert any("kill" in m.content or "burn" in m.content for m in threat_memories.memories)

        relationship = await until(
            "both conversations applied",
            lambda: client.query_relationship(npc, player),
            lambda r: r.interaction_count >= 2,
        )
        assert relationship.has_met and relationship.fear > 0

        # The same conversation again beyond JetStream's window (a new Nats-Msg-Id, as after
        # 2 minutes): ingest's ledger applies it once, so nothing doubles.
        ack = await client.nats.jetstream().publish(
            client.subject("conversation.ended"), npcmem.encode(threat), headers={"Nats-Msg-Id": f"replay-{uuid.uuid4()}"}
        )
        assert not ack.duplicate
        js = client.nats.jetstream()
        stream = f"{client.settings.stream_prefix}_CONVERSATIONS"
        await until(  # a work queue: ingest has taken (and acked) the replay once it is empty
            "ingest to consume the replay",
            lambda: js.stream_info(stream),
            lambda info: info.state.messages == 0,
        )
        await asyncio.sleep(2)  # time for extract/relate, had ingest queued anything
        assert (await client.query_memories(npc, player)).count == memories.count
        after = await client.query_relationship(npc, player)
        assert (after.interaction_count, after.version) == (relationship.interaction_count, relationship.version)

        reply = await client.context(npc, player, message="Do you remember me?", max_tokens=1024, npc=BROM)
        prompt = reply.system_prompt or ""
        assert "Brom" in prompt
        assert "kill you" in prompt or "burn your forge" in prompt, prompt
        assert "sword" in prompt, prompt
        assert {s.provider for s in reply.sections} >= {"memory"}
        assert reply.token_count <= 1024

        recall = await client.query_recall(npc, player, text="forge", speaker="player")
        assert recall.count >= 1 and any("forge" in t.text for t in recall.turns)

        # Signals: a durable of our own, read from the start, deduplicated and ordered.
        durable = f"sdk-test-{uuid.uuid4().hex[:12]}"
        ours = []
        try:
            async with client.signals(durable, fetch_timeout=1.0) as signals:
                deadline = time.monotonic() + DEADLINE
                while time.monotonic() < deadline and not ours:
                    try:
                        signal = await signals.next(timeout=2)
                    except asyncio.TimeoutError:
                        continue
                    assert isinstance(signal, npcmem.Signal)
                    if signal.npc_id == npc and signal.player_id == player:
                        ours.append(signal)
                # what arrived for this pair is in version order (stale ones were dropped)
                versions = [s.version for s in ours if s.version is not None]
                assert versions == sorted(versions)
                assert len({s.signal_id for s in ours}) == len(ours)
        finally:
            await client.nats.jetstream().delete_consumer(f"{client.settings.stream_prefix}_SIGNALS", durable)
        assert ours, "no story signal for the pair (two conversations change its stage)"
        assert ours[0].signal_type == "relationship_changed"

        # Errors name the field at fault.
        with pytest.raises(NpcmemError) as caught:
            await client.enrich({"npc_id": "not-a-uuid", "player_id": player})
        assert (caught.value.code, caught.value.field) == ("invalid_uuid", "npc_id")
        with pytest.raises(NpcmemError) as caught:
            await client.enrich({"npc_id": npc, "player_id": player, "npc": "Brom"})
        assert (caught.value.code, caught.value.field) == ("invalid_field", "npc")
        with pytest.raises(NpcmemError) as caught:
            await client.context(npc, player, max_tokens=5)
        assert (caught.value.code, caught.value.field) == ("invalid_field", "max_tokens")
        with pytest.raises(NpcmemError) as caught:
            await client.query_recall(npc, player, limit=0)
        assert caught.value.code == "invalid_field" and caught.value.field == "limit"


async def test_world_messages_reach_gossip():
    async with nats_client() as client:
        witness, subject = str(uuid.uuid4()), str(uuid.uuid4())
        await client.npc_profile(witness, "Tobin", role="stable boy", drives={"social": 0.8}, mood="anxious")
        await client.npc_moved(witness, f"stable-{uuid.uuid4().hex[:6]}")
        ack = await client.observation(
            [witness], "world_event", "Bandits raided the mill", 0.8, subject_id=subject, tags=["bandits"]
        )
        assert ack.msg_id.startswith("observation-") and not ack.duplicate
        fact = await client.fact([witness], "location_info", "The cave has treasure", 0.6, tags=["cave"])
        assert fact.msg_id.startswith("fact-")
        knowledge = await until(
            "the observation and the fact as knowledge",
            lambda: client.query_knowledge(witness),
            lambda k: len(k.facts) >= 2,
        )
        contents = {f.content for f in knowledge.facts}
        assert any("Bandits" in c for c in contents) and any("cave" in c for c in contents)
        assert (await client.query_knowledge(witness, tag="cave")).knows_fact
        assert (await client.player_privacy(str(uuid.uuid4()), True)).msg_id.startswith("player_privacy-")


async def test_http_fallback_front_door_and_context():
    async with nats_client() as client:
        http = await connect(nats_url=UNREACHABLE_NATS, timeout=5.0)
        try:
            assert http.transport == "http", "an unreachable NATS with HTTP endpoints known falls back"
            assert http.settings.ingest_http and http.settings.enrich_http
            npc, player = str(uuid.uuid4()), str(uuid.uuid4())
            threat = conversation(npc, player, THREAT, minutes_ago=5)
            first = await http.publish_conversation(threat)
            again = await http.publish_conversation(threat)
            assert (first.transport, first.msg_id, first.duplicate, again.duplicate) == (
                "http",
                str(threat.conversation_id),
                False,
                True,
            )

            bad = conversation(npc, player, [("narrator", "Once upon a time")], minutes_ago=1)
            with pytest.raises(NpcmemError) as caught:
                await http.publish_conversation(bad)
            assert caught.value.status == 400 and caught.value.code == "invalid_field"
            assert caught.value.field and "speaker" in caught.value.field

            # The same world message over HTTP and over NATS is one message: the SDK derives
            # the Nats-Msg-Id exactly as the front door does.
            moved = npcmem.NpcMoved(npc_id=npc, room_id="forge", at=npcmem.now())
            over_http = await http.publish_world(moved)
            over_nats = await client.publish_world(moved)
            assert over_http.msg_id == over_nats.msg_id and over_nats.duplicate

            # Queries need NATS: use the NATS client to wait, then context over HTTP.
            await until(
                "the threat posted over HTTP as a memory",
                lambda: client.query_memories(npc, player, tags=["threat"]),
                lambda m: m.count >= 1,
            )
            reply = await http.context(npc, player, message="Do you remember me?", npc=BROM)
            assert "kill you" in (reply.system_prompt or "") or "burn your forge" in (reply.system_prompt or "")
            recall = await http.query_recall(npc, player, text="gold")
            assert recall.count >= 1

            with pytest.raises(NpcmemError) as caught:
                await http.context(npc, player, max_tokens=5)
            assert (caught.value.status, caught.value.field) == (400, "max_tokens")
            with pytest.raises(NpcmemError) as caught:
                await http.query_memories(npc, player)
            assert caught.value.code == "not_supported"
        finally:
            await http.close()
