"""Signal deduplication by signal_id and per-pair version ordering (wire-protocol §6),
fed directly to the filter and through SignalStream with a fake consumer."""

import asyncio
import json
import uuid

import pytest

from npcmem import Signal, SignalFilter, SignalStream
from npcmem.settings import Settings

NPC = "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21"
PLAYER = "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32"
OTHER_PLAYER = "5f3a2b1c-0d9e-4f8a-b7c6-d5e4f3a2b1c0"


def sig(version=None, signal_id=None, npc=NPC, player=PLAYER, event_type="npc_hostile", **extra):
    return Signal(
        signal_id=signal_id or str(uuid.uuid4()),
        signal_type="relationship_changed",
        npc_id=npc,
        at="2025-06-01T12:05:00Z",
        event_type=event_type,
        player_id=player,
        version=version,
        extra=extra,
    )


def test_same_signal_id_is_applied_once():
    f = SignalFilter()
    s = sig(version=3)
    assert f.admit(s)
    assert not f.admit(s)
    assert f.check(sig(version=3, signal_id=s.signal_id.upper())) == "duplicate"  # same UUID, other case


def test_older_version_for_the_pair_is_stale():
    f = SignalFilter()
    assert f.admit(sig(version=7))
    assert f.check(sig(version=6)) == "stale"
    assert not f.admit(sig(version=2))
    assert f.admit(sig(version=8))
    assert f.highest_version(NPC, PLAYER) == 8


def test_signals_of_one_update_share_a_version_and_all_pass():
    # relate gives the threshold crossing, the stage change and the milestone of one
    # conversation the same version: none of them is stale.
    f = SignalFilter()
    assert f.admit(sig(version=4, event_type="npc_hostile"))
    assert f.admit(sig(version=4, event_type="stage_changed", old_stage="rival"))
    assert f.admit(sig(version=4, event_type=None, memory_count=10))


def test_versions_are_per_pair():
    f = SignalFilter()
    assert f.admit(sig(version=9))
    assert f.admit(sig(version=1, player=OTHER_PLAYER))
    assert f.admit(sig(version=1, npc=str(uuid.uuid4())))


def test_signals_without_version_or_player_are_only_deduplicated():
    f = SignalFilter()
    assert f.admit(sig(version=9))
    assert f.admit(sig(version=None))  # faction_reputation_shift carries no version
    secret = sig(version=None, player=None)
    assert f.admit(secret) and not f.admit(secret)


def test_memory_is_bounded():
    f = SignalFilter(max_ids=3, max_pairs=2)
    first = sig(version=1)
    f.admit(first)
    for _ in range(3):
        f.admit(sig(version=1, player=str(uuid.uuid4())))
    assert len(f) == 3
    assert f.check(first) == "accept"  # forgotten: only the newest 3 ids are kept
    assert f.highest_version(NPC, PLAYER) is None


def test_check_records_nothing_until_commit():
    f = SignalFilter()
    s = sig(version=5)
    assert f.check(s) == "accept"
    assert f.check(s) == "accept"
    f.commit(s)
    assert f.check(s) == "duplicate"


# --- SignalStream over a fake pull subscription ------------------------------------------


class FakeMsg:
    def __init__(self, payload, subject="npcmem.signal.relationship_changed"):
        self.data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.subject = subject
        self.acked = False
        self.termed = False

    async def ack(self):
        self.acked = True

    async def term(self):
        self.termed = True


class FakeSub:
    def __init__(self, batches):
        self.batches = list(batches)

    async def fetch(self, batch, timeout=None):
        if not self.batches:
            await asyncio.sleep(0)
            raise asyncio.TimeoutError
        return self.batches.pop(0)

    async def unsubscribe(self):
        pass


class FakeClient:
    def __init__(self):
        self.settings = Settings()
        self._streams = []
        self._nc = None


def stream_over(batches, signal_filter=None):
    client = FakeClient()
    s = SignalStream(
        client,
        durable="game-test",
        subject="npcmem.signal.>",
        deliver_policy="all",
        batch=64,
        fetch_timeout=0.01,
        ack_wait=30,
        max_ack_pending=1000,
        signal_filter=SignalFilter() if signal_filter is None else signal_filter,
    )
    s._sub = FakeSub(batches)
    return s


def payload(s):
    body = {k: v for k, v in vars(s).items() if k != "extra"}
    body.update(s.extra)
    return body


async def test_stream_drops_duplicates_and_stale_and_acks_everything():
    a, b = sig(version=2), sig(version=3)
    msgs = [
        FakeMsg(payload(a)),
        FakeMsg(payload(a)),  # redelivered: same signal_id
        FakeMsg(payload(b)),
        FakeMsg(payload(sig(version=1))),  # older than 3: stale
        FakeMsg(b"not json"),
    ]
    stream = stream_over([msgs[:2], msgs[2:]])
    got = [await stream.next(timeout=1), await stream.next(timeout=1)]
    assert [g.signal_id for g in got] == [a.signal_id, b.signal_id]
    with pytest.raises(asyncio.TimeoutError):
        await stream.next(timeout=0.2)
    assert msgs[0].acked and msgs[1].acked and msgs[2].acked and msgs[3].acked
    assert msgs[4].termed
    assert stream.dropped == {"duplicate": 1, "stale": 1, "invalid": 1}
    await stream.close()


async def test_signal_is_acked_only_when_the_caller_comes_back():
    a = sig(version=1)
    first, again = FakeMsg(payload(a)), FakeMsg(payload(a))
    f = SignalFilter()
    stream = stream_over([[first]], f)
    got = await stream.next(timeout=1)
    assert got.signal_id == a.signal_id and not first.acked
    assert f.check(a) == "accept"  # not applied yet: a redelivery would be handed out again
    await stream.close()  # leaving normally acks the last one
    assert first.acked and f.check(a) == "duplicate"

    # A handler that raised inside `async with`: not acked, not remembered, so the
    # redelivery is handed out again.
    f2 = SignalFilter()
    failed = FakeMsg(payload(a))
    with pytest.raises(RuntimeError):
        async with stream_over([[failed]], f2) as failing:
            async for _ in failing:
                raise RuntimeError("handler failed")
    assert not failed.acked and f2.check(a) == "accept"
    retry = stream_over([[again]], f2)
    assert (await retry.next(timeout=1)).signal_id == a.signal_id
    await retry.close()
    assert again.acked and f2.check(a) == "duplicate"


async def test_async_for_yields_signals_in_order():
    signals = [sig(version=v) for v in (1, 2, 3)]
    stream = stream_over([[FakeMsg(payload(s)) for s in signals]])
    seen = []
    async for s in stream:
        seen.append(s.version)
        if len(seen) == 3:
            break
    await stream.close()
    assert seen == [1, 2, 3]
