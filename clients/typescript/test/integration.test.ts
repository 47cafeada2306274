// Against a real running npcmem (deploy/local/up): set NPCMEM_SDK_INTEGRATION=1 and point
// the SDK at it (NPCMEM_ENV_FILE, or .local/env found from the working directory, or
// NPCMEM_* variables). Without NPCMEM_SDK_INTEGRATION the suite is skipped; with it, an
// unreachable system fails the suite.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Client, NpcmemError, newId, type ConversationEnded, type Signal, type TranscriptMessage } from "../src/index.js";

const enabled = process.env.NPCMEM_SDK_INTEGRATION === "1";
const DEADLINE_MS = 60_000;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `probe` until it returns a value, failing with `what` at the deadline. */
async function eventually<T>(what: string, probe: () => Promise<T | undefined | null | false>, deadlineMs = DEADLINE_MS): Promise<T> {
  const until = Date.now() + deadlineMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value as T;
    } catch (error) {
      last = error;
    }
    if (Date.now() > until) assert.fail(`${what} within ${deadlineMs} ms${last ? ` (last error: ${String(last)})` : ""}`);
    await sleep(250);
  }
}

function conversation(npcId: string, playerId: string, npc: string, startedAt: string, lines: [TranscriptMessage["speaker"], string][]): ConversationEnded {
  const ended = new Date(Date.parse(startedAt) + 4 * 60_000).toISOString();
  return {
    conversation_id: newId(),
    npc_id: npcId,
    player_id: playerId,
    npc: { name: npc, role: npc === "Brom" ? "blacksmith" : "merchant", factions: [] },
    player: { name: "Aria", factions: [] },
    location: "Market Square",
    started_at: startedAt,
    ended_at: ended,
    messages: lines.map(([speaker, text]) => ({ speaker, text })),
  };
}

if (!enabled) {
  it("integration against a running npcmem", { skip: "set NPCMEM_SDK_INTEGRATION=1 to run against a running npcmem" }, () => {});
}

describe("integration: a real npcmem", { skip: !enabled }, () => {
  let client: Client;
  const brom = newId();
  const mara = newId();
  const aria = newId();
  const signalsSeen: Signal[] = [];
  let signalLoop: Promise<void> | null = null;
  let stopSignals: (() => Promise<void>) | null = null;

  before(async () => {
    // transport "nats": an unreachable NATS must fail here, not fall back to HTTP.
    client = await Client.connect({ transport: "nats", connectTimeoutMs: 5000 });
    // Open our consumer before anything is published, so every signal of this run reaches it.
    const stream = client.signals({ deliverPolicy: "new" });
    await stream.open();
    stopSignals = () => stream.close();
    signalLoop = (async () => {
      for await (const signal of stream) {
        if (signal.npc_id === brom || signal.npc_id === mara) signalsSeen.push(signal);
      }
    })();
  });

  after(async () => {
    await stopSignals?.();
    await signalLoop?.catch(() => undefined);
    await client?.close();
  });

  const threat1 = conversation(brom, aria, "Brom", "2026-12-05T10:00:00Z", [
    ["player", "Give me your gold or I will kill you."],
    ["npc", "Get out of my forge!"],
  ]);
  const threat2 = conversation(brom, aria, "Brom", "2026-12-05T11:00:00Z", [
    ["player", "I'll burn your forge to the ground."],
    ["npc", "Guards! Guards!"],
  ]);
  const trade = conversation(mara, aria, "Mara", "2026-12-05T12:00:00Z", [
    ["player", "How much for the steel sword?"],
    ["npc", "Fifty gold."],
    ["player", "Fifty it is. Here."],
  ]);

  it("publishes conversations through JetStream; a repeat is a duplicate", async () => {
    const first = await client.publishConversation(threat1);
    assert.equal(first.transport, "nats");
    assert.equal(first.stream, `${client.settings.streamPrefix}_CONVERSATIONS`);
    assert.equal(first.msgId, threat1.conversation_id);
    assert.equal(first.duplicate, false);
    const again = await client.publishConversation(threat1);
    assert.equal(again.duplicate, true, "the same conversation_id inside the duplicate window is dropped by JetStream");
    assert.equal((await client.publishConversation(threat2)).duplicate, false);
    assert.equal((await client.publishConversation(trade)).duplicate, false);
  });

  it("remembers: memories appear, and the repeated conversation was applied once", async () => {
    const memories = await eventually("Brom remembers both threats", async () => {
      const reply = await client.queryMemories(brom, aria);
      return reply.count >= 2 && reply;
    });
    assert.ok(memories.memories.every((m) => m.tags.includes("threat")), JSON.stringify(memories.memories));
    assert.ok(memories.memories.some((m) => m.content.includes("gold")), JSON.stringify(memories.memories));
    const threats = await client.queryMemories(brom, aria, { tags: ["threat"], limit: 50 });
    assert.equal(threats.count, 2, "two threatening conversations, three publishes: two memories");
    assert.equal(threats.has_memory_matching, true);

    const relationship = await eventually("relate applied both conversations", async () => {
      const r = await client.queryRelationship(brom, aria);
      return r.interaction_count >= 2 && r;
    });
    assert.equal(relationship.interaction_count, 2, "the duplicate publish was not applied again");
    assert.equal(relationship.has_met, true);
    assert.ok(relationship.trust < 0.5, `threats lower trust (trust ${relationship.trust})`);

    const bought = await eventually("Mara remembers the trade", async () => {
      const reply = await client.queryMemories(mara, aria);
      return reply.count >= 1 && reply;
    });
    assert.match(bought.memories[0].content, /bought|sword|gold/i);

    // Still two after everything settled.
    await sleep(1000);
    assert.equal((await client.queryMemories(brom, aria, { limit: 50 })).count, memories.count);
  });

  it("answers context that mentions what happened", async () => {
    const reply = await client.context(brom, aria, {
      message: "Do you remember me?",
      maxTokens: 1024,
      npc: { name: "Brom", role: "the blacksmith", personality: "gruff but fair" },
    });
    assert.ok(reply.system_prompt, "a persona yields a system prompt");
    assert.match(reply.system_prompt, /Brom/);
    assert.match(reply.system_prompt, /threatened|kill you|burn your forge/i);
    assert.ok(reply.sections.some((s) => s.provider === "memory"), JSON.stringify(reply.sections.map((s) => s.provider)));
    assert.ok(reply.token_count > 0 && reply.token_count <= 1024);
    assert.ok(typeof reply.placeholders.reputation === "string");
  });

  it("recalls the player's words and answers knowledge queries", async () => {
    const recall = await client.queryRecall(brom, aria, { text: "forge", speaker: "player", limit: 3 });
    assert.ok(recall.count >= 1, JSON.stringify(recall));
    assert.match(recall.turns[0].text, /forge/);
    const knowledge = await client.queryKnowledge(brom, { limit: 5 });
    assert.equal(typeof knowledge.knows_fact, "boolean");
  });

  it("publishes world messages with stable ids", async () => {
    const profile = await client.npcProfile({ npc_id: brom, name: "Brom", role: "blacksmith", factions: ["smiths_guild"] });
    assert.equal(profile.stream, `${client.settings.streamPrefix}_WORLD`);
    assert.match(profile.msgId, /^npc_profile-[0-9a-f-]{36}$/);
    const at = "2026-12-05T12:30:00Z";
    const moved = await client.npcMoved({ npc_id: brom, room_id: "forge", at });
    assert.equal((await client.npcMoved({ npc_id: brom, room_id: "forge", at })).duplicate, true, `${moved.msgId} twice`);
    const factId = newId();
    const fact = await client.fact({ fact_id: factId, npc_ids: [brom], category: "location_info", content: "The old mine has silver", tags: ["mine"], importance: 0.6 });
    assert.equal(fact.msgId, `fact-${factId}`);
    const observationId = newId();
    const observation = await client.observation({
      observation_id: observationId,
      witness_ids: [mara],
      subject_id: aria,
      category: "world_event",
      content: "Aria drew a knife in the market",
      importance: 0.7,
      at,
    });
    assert.equal(observation.msgId, `observation-${observationId}`);
    const other = newId();
    const privacy = await client.playerPrivacy({ player_id: other, allow_memory: true, at });
    assert.match(privacy.msgId, /^player_privacy-/);
    await eventually("Brom learns the authored fact", async () => {
      const reply = await client.queryKnowledge(brom, { tag: "mine" });
      return reply.knows_fact && reply.facts.some((f) => f.content.includes("silver")) && reply;
    });
  });

  it("delivers story signals, deduplicated and acked", async () => {
    const seen = await eventually("a story signal for Brom or Mara", async () => signalsSeen.length > 0 && signalsSeen);
    for (const signal of seen) {
      assert.equal(typeof signal.signal_id, "string");
      assert.equal(typeof signal.signal_type, "string");
    }
    const ids = seen.map((s) => s.signal_id);
    assert.equal(new Set(ids).size, ids.length, "no signal_id twice");
    assert.ok(seen.some((s) => s.npc_id === brom && s.signal_type === "relationship_changed"), JSON.stringify(seen));
  });

  it("throws NpcmemError naming the field of an invalid enrich request", async () => {
    await assert.rejects(
      client.enrich({ npc_id: brom, player_id: aria, npc: "Brom" as never }),
      (e: unknown) => e instanceof NpcmemError && e.code === "invalid_field" && e.field === "npc" && /npc/.test(e.message),
    );
    await assert.rejects(
      client.enrich({ npc_id: "not-a-uuid", player_id: aria }),
      (e: unknown) => e instanceof NpcmemError && e.code === "invalid_uuid" && e.field === "npc_id",
    );
    await assert.rejects(
      client.context(brom, aria, { maxTokens: 10 }),
      (e: unknown) => e instanceof NpcmemError && e.field === "max_tokens",
    );
  });

  it("falls back to HTTP when NATS cannot be reached: front door publish and /v1/context", async () => {
    assert.ok(client.settings.ingestHttp && client.settings.enrichHttp, "the HTTP endpoints are known (NPCMEM_INGEST_HTTP, NPCMEM_ENRICH_HTTP)");
    const http = await Client.connect({ natsUrl: "nats://127.0.0.1:1", connectTimeoutMs: 1000 });
    try {
      assert.equal(http.transport, "http");
      const tobin = newId();
      const talk = conversation(tobin, aria, "Brom", "2026-12-05T13:00:00Z", [
        ["player", "Give me your gold or I will kill you."],
        ["npc", "Please, take it and go!"],
      ]);
      const ack = await http.publishConversation(talk);
      assert.deepEqual(ack, { stream: null, seq: null, duplicate: false, msgId: talk.conversation_id, transport: "http" });
      assert.equal((await http.publishConversation(talk)).duplicate, true);
      await assert.rejects(
        http.publishConversation({ ...talk, conversation_id: newId(), messages: [] }),
        (e: unknown) => e instanceof NpcmemError && e.code === "invalid_field" && e.status === 400,
      );
      const moved = await http.npcMoved({ npc_id: tobin, room_id: "stable", at: "2026-12-05T13:05:00Z" });
      // The front door and the SDK agree on the id, so NATS and HTTP deduplicate each other.
      assert.equal((await client.npcMoved({ npc_id: tobin, room_id: "stable", at: "2026-12-05T13:05:00Z" })).duplicate, true, moved.msgId);
      await eventually("the conversation sent over HTTP is remembered", async () => {
        const reply = await client.queryMemories(tobin, aria);
        return reply.count >= 1 && reply;
      });
      const reply = await http.context(tobin, aria, { message: "Remember me?", npc: { name: "Brom", role: "the blacksmith" } });
      assert.match(reply.system_prompt ?? "", /threatened|kill you/i);
      await assert.rejects(
        http.context(tobin, aria, { npc: "Brom" as never }),
        (e: unknown) => e instanceof NpcmemError && e.field === "npc" && e.status === 400,
      );
      const recall = await http.queryRecall(tobin, aria, { text: "gold" });
      assert.ok(recall.count >= 1);
      await assert.rejects(http.queryRelationship(tobin, aria), (e: unknown) => e instanceof NpcmemError && e.code === "not_supported");
    } finally {
      await http.close();
    }
  });
});
