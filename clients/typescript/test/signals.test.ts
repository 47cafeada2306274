import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { SignalFilter, parseSignal, type Signal } from "../src/index.js";

const NPC = "1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21";
const PLAYER = "2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32";
const OTHER = "5f3a2b1c-0d9e-4f8a-b7c6-d5e4f3a2b1c0";

let counter = 0;
function signal(fields: Partial<Signal> = {}): Signal {
  counter += 1;
  return {
    schema_version: 1,
    signal_id: `00000000-0000-4000-8000-${String(counter).padStart(12, "0")}`,
    signal_type: "relationship_changed",
    event_type: "npc_hostile",
    npc_id: NPC,
    player_id: PLAYER,
    version: 1,
    at: "2025-06-01T12:05:00Z",
    ...fields,
  };
}

/** What a subscriber applies, feeding `offer` in delivery order. */
function applied(filter: SignalFilter, signals: Signal[]): string[] {
  return signals.filter((s) => filter.offer(s) === "accept").map((s) => s.signal_id);
}

describe("SignalFilter", () => {
  it("drops a redelivered signal_id, whatever else it carries", () => {
    const filter = new SignalFilter();
    const first = signal({ version: 3 });
    assert.equal(filter.offer(first), "accept");
    assert.equal(filter.offer({ ...first }), "duplicate");
    assert.equal(filter.offer({ ...first, signal_id: first.signal_id.toUpperCase() }), "duplicate");
  });

  it("treats a lower version for the same pair as stale, keeps the highest", () => {
    const filter = new SignalFilter();
    const v7 = signal({ version: 7 });
    const v5 = signal({ version: 5 });
    const v8 = signal({ version: 8 });
    assert.deepEqual(applied(filter, [v7, v5, v8]), [v7.signal_id, v8.signal_id]);
    assert.equal(filter.check(signal({ version: 6 })), "stale");
    assert.equal(filter.highestVersion(NPC, PLAYER), 8);
  });

  it("accepts siblings with the same version (one conversation's signals share it)", () => {
    const filter = new SignalFilter();
    const hostile = signal({ version: 4, event_type: "npc_hostile" });
    const stage = signal({ version: 4, event_type: "stage_changed", stage: "enemy" });
    const milestone = signal({ version: 4, signal_type: "memory_milestone", event_type: null });
    assert.deepEqual(applied(filter, [hostile, stage, milestone]), [hostile.signal_id, stage.signal_id, milestone.signal_id]);
  });

  it("orders each pair on its own", () => {
    const filter = new SignalFilter();
    const a9 = signal({ version: 9 });
    const b2 = signal({ version: 2, player_id: OTHER });
    const a3 = signal({ version: 3 });
    assert.deepEqual(applied(filter, [a9, b2, a3]), [a9.signal_id, b2.signal_id]);
  });

  it("never orders signals without a version or a player", () => {
    const filter = new SignalFilter();
    filter.offer(signal({ version: 10 }));
    const reputation = signal({ signal_type: "faction_reputation_shift", version: null, faction: "city_guard" });
    const secret = signal({ signal_type: "secret_learned", version: null, player_id: null });
    const noPlayer = signal({ version: 1, player_id: null });
    assert.deepEqual(applied(filter, [reputation, secret, noPlayer]), [reputation.signal_id, secret.signal_id, noPlayer.signal_id]);
  });

  it("check does not remember; record does (a failed handling is accepted again)", () => {
    const filter = new SignalFilter();
    const s = signal({ version: 2 });
    assert.equal(filter.check(s), "accept");
    assert.equal(filter.check(s), "accept");
    filter.record(s);
    assert.equal(filter.check(s), "duplicate");
  });

  it("keeps its memory bounded, forgetting the least recently used first", () => {
    const filter = new SignalFilter({ maxIds: 3, maxPairs: 2 });
    const ids = [signal({ version: null }), signal({ version: null }), signal({ version: null }), signal({ version: null })];
    for (const s of ids) filter.offer(s);
    assert.equal(filter.size.ids, 3);
    assert.equal(filter.check(ids[0]), "accept", "the oldest id was forgotten");
    assert.equal(filter.check(ids[3]), "duplicate");
    filter.offer(signal({ version: 5, player_id: "p1" }));
    filter.offer(signal({ version: 5, player_id: "p2" }));
    filter.offer(signal({ version: 5, player_id: "p3" }));
    assert.equal(filter.size.pairs, 2);
    assert.equal(filter.check(signal({ version: 1, player_id: "p1" })), "accept", "p1 was forgotten");
    assert.equal(filter.check(signal({ version: 1, player_id: "p3" })), "stale");
  });
});

describe("parseSignal", () => {
  it("reads the documented example and keeps type-specific fields", () => {
    const text =
      '{"schema_version":1,"signal_id":"0b7e4a52-6f0e-4c7a-9d41-3f2a1c9e8b10","signal_type":"faction_reputation_shift","event_type":"reputation_down",' +
      '"npc_id":"1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21","player_id":"2d9a6c74-8b2a-4e9c-9f63-5b4c3e1a0d32","dimension":"reputation","old_value":-0.2,"new_value":-0.31,"stage":null,' +
      '"conversation_id":"3e0b7d85-9c3b-4fad-8074-6c5d4f2b1e43","version":null,"at":"2025-06-01T12:05:00Z","faction":"city_guard","level":-0.25,"npcs_known":3}';
    const s = parseSignal(new TextEncoder().encode(text));
    assert.ok(s);
    assert.equal(s.faction, "city_guard");
    assert.equal(s.version, null);
  });

  it("rejects what is not a signal", () => {
    assert.equal(parseSignal("not json"), null);
    assert.equal(parseSignal("[1]"), null);
    assert.equal(parseSignal('{"signal_id":"x"}'), null);
  });
});
