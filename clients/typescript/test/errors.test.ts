import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";

import { Client, NpcmemError, decodeReply, errorFromReply, newId, uuidV5, worldMsgId, WORLD_NAMESPACE } from "../src/index.js";

describe("error replies", () => {
  it("become NpcmemError with code, message and field", () => {
    const reply = new TextEncoder().encode('{"error":{"code":"invalid_field","message":"npc: must be an object, got a string","field":"npc"}}');
    assert.throws(
      () => decodeReply(reply),
      (e: unknown) =>
        e instanceof NpcmemError &&
        e instanceof Error &&
        e.name === "NpcmemError" &&
        e.code === "invalid_field" &&
        e.message === "npc: must be an object, got a string" &&
        e.field === "npc" &&
        e.status === null,
    );
  });

  it("field is null when the reply names none; the HTTP status is kept", () => {
    const e = errorFromReply({ error: { code: "unavailable", message: "the store could not answer" } }, 503);
    assert.ok(e);
    assert.equal(e.code, "unavailable");
    assert.equal(e.field, null);
    assert.equal(e.status, 503);
  });

  it("a malformed error object is still an error, a normal reply is not", () => {
    assert.equal(errorFromReply({ error: "boom" })?.code, "invalid_reply");
    assert.equal(errorFromReply({ system_prompt: "hi" }), null);
    assert.deepEqual(decodeReply('{"count":0,"has_memory_matching":false,"memories":[]}'), { count: 0, has_memory_matching: false, memories: [] });
    assert.throws(() => decodeReply("not json"), (e: unknown) => e instanceof NpcmemError && e.code === "invalid_reply");
    assert.throws(() => decodeReply("[]"), (e: unknown) => e instanceof NpcmemError && e.code === "invalid_reply");
  });
});

describe("ids", () => {
  it("uuidV5 matches RFC 4122 (Python's uuid5(NAMESPACE_DNS, 'python.org'))", () => {
    assert.equal(uuidV5("6ba7b810-9dad-11d1-80b4-00c04fd430c8", "python.org"), "886313e1-3b8a-5372-9b90-0c9aee199e5d");
  });

  it("world msg ids are the front door's", () => {
    const body = new TextEncoder().encode('{"schema_version":1,"npc_id":"1c8f5b63-7a1f-4d8b-8e52-4a3b2d0f9c21","room_id":"tavern-1","at":"2025-06-01T12:05:00Z"}');
    assert.equal(worldMsgId("npc_moved", {}, body), `npc_moved-${uuidV5(WORLD_NAMESPACE, body)}`);
    assert.equal(worldMsgId("observation", { observation_id: "abc" }, body), "observation-abc");
    assert.equal(worldMsgId("fact", { fact_id: "def" }, body), "fact-def");
  });
});

// A stand-in for ingest's and enrich's HTTP listeners, to see the client fall back to
// HTTP when NATS cannot be reached and map the answers (no npcmem needed).
describe("HTTP fallback (against a stub)", () => {
  let server: Server;
  let base = "";
  const seen: { url: string; body: string }[] = [];
  let ingestStatus = 202;

  before(async () => {
    server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = "";
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        seen.push({ url: req.url ?? "", body });
        res.setHeader("content-type", "application/json");
        if (req.url === "/v1/conversations") {
          if (ingestStatus === 503) {
            ingestStatus = 202; // the next attempt succeeds
            res.writeHead(503).end('{"error":{"code":"unavailable","message":"the message could not be stored"}}');
            return;
          }
          const id = JSON.parse(body).conversation_id;
          res.writeHead(ingestStatus).end(JSON.stringify({ conversation_id: id, duplicate: false }));
        } else if (req.url?.startsWith("/v1/world/")) {
          res.writeHead(400).end('{"error":{"code":"invalid_field","message":"room_id: must not be blank","field":"room_id"}}');
        } else if (req.url === "/v1/context") {
          const request = JSON.parse(body);
          if (typeof request.npc !== "object") {
            res.writeHead(400).end('{"error":{"code":"invalid_field","message":"npc: must be an object, got a string","field":"npc"}}');
          } else {
            res.writeHead(200).end('{"system_prompt":"You are Brom.","sections":[],"token_count":4}');
          }
        } else {
          res.writeHead(404).end('{"error":{"code":"not_found","message":"no such path"}}');
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const connect = () =>
    Client.connect({ env: {}, envFile: "/dev/null", natsUrl: "nats://127.0.0.1:1", ingestHttp: base, enrichHttp: base, connectTimeoutMs: 500, publishRetryMs: 3000 });

  it("falls back, publishes through the front door (retrying a 503) and asks /v1/context", async () => {
    ingestStatus = 503;
    const client = await connect();
    try {
      assert.equal(client.transport, "http");
      assert.match(client.fallbackReason ?? "", /could not be reached/);
      const id = newId();
      const ack = await client.publishConversation({
        conversation_id: id,
        npc_id: newId(),
        player_id: newId(),
        npc: { name: "Brom" },
        player: { name: "Aria" },
        started_at: "2025-06-01T12:00:00Z",
        ended_at: "2025-06-01T12:05:00Z",
        messages: [{ speaker: "player", text: "Hello" }],
      });
      assert.deepEqual(ack, { stream: null, seq: null, duplicate: false, msgId: id, transport: "http" });
      const posted = seen.filter((s) => s.url === "/v1/conversations");
      assert.equal(posted.length, 2, "retried once after the 503");
      assert.equal(JSON.parse(posted[1].body).schema_version, 1);
      const reply = await client.context(newId(), newId(), { npc: { name: "Brom" } });
      assert.equal(reply.system_prompt, "You are Brom.");
      assert.deepEqual(reply.degraded, [], "absent fields get their defaults");
    } finally {
      await client.close();
    }
  });

  it("maps 400 answers to NpcmemError and refuses queries", async () => {
    const client = await connect();
    try {
      await assert.rejects(
        client.npcMoved({ npc_id: newId(), room_id: " ", at: "2025-06-01T12:00:00Z" }),
        (e: unknown) => e instanceof NpcmemError && e.code === "invalid_field" && e.field === "room_id" && e.status === 400,
      );
      await assert.rejects(
        client.enrich({ npc_id: newId(), player_id: newId(), npc: "Brom" as never }),
        (e: unknown) => e instanceof NpcmemError && e.field === "npc" && e.status === 400,
      );
      await assert.rejects(client.queryMemories(newId(), newId()), (e: unknown) => e instanceof NpcmemError && e.code === "not_supported");
      assert.throws(() => client.signals(), (e: unknown) => e instanceof NpcmemError && e.code === "not_supported");
    } finally {
      await client.close();
    }
  });

  it("without HTTP endpoints, an unreachable NATS is an error", async () => {
    await assert.rejects(
      Client.connect({ env: {}, envFile: "/dev/null", natsUrl: "nats://127.0.0.1:1", connectTimeoutMs: 500 }),
      (e: unknown) => e instanceof NpcmemError && e.code === "unavailable",
    );
  });
});
