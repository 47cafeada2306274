// A minimal Node game server using the npcmem SDK: it publishes a finished conversation,
// waits until the NPC remembers it, asks for the NPC's prompt context and prints story
// signals until you press Ctrl-C.
//
//   cd clients/typescript && npm install && npm run build
//   source ../../.local/env        # or let the SDK find .local/env by itself
//   node examples/game-server.mjs
//
// In your own project, after `npm install <path to npcmem>/clients/typescript`, import
// from "npcmem" instead of "../dist/index.js".

import { Client, NpcmemError, newId } from "../dist/index.js";

const BROM = newId(); // your game's NPC id
const ARIA = newId(); // your game's player id

const client = await Client.connect(); // NATS, or the HTTP front doors when NATS is out of reach
console.log(`connected over ${client.transport}${client.fallbackReason ? ` (${client.fallbackReason})` : ""}`);

// 1. The player finished talking to Brom: tell npcmem.
const ack = await client.publishConversation({
  conversation_id: newId(),
  npc_id: BROM,
  player_id: ARIA,
  npc: { name: "Brom", role: "blacksmith", factions: ["smiths_guild"] },
  player: { name: "Aria" },
  location: "Market Square",
  started_at: new Date(Date.now() - 4 * 60_000).toISOString(),
  ended_at: new Date().toISOString(),
  messages: [
    { speaker: "player", text: "Give me your gold or I will kill you." },
    { speaker: "npc", text: "Get out of my forge!" },
  ],
});
console.log("published", ack);

// 2. Extraction takes a moment (queries need NATS; over HTTP, just wait a little).
if (client.transport === "nats") {
  for (let i = 0; i < 50 && (await client.queryMemories(BROM, ARIA)).count === 0; i++) {
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
} else {
  await new Promise((resolve) => setTimeout(resolve, 3000));
}

// 3. Before Brom's next line: ask for his prompt context.
try {
  const reply = await client.context(BROM, ARIA, {
    message: "Do you remember me?",
    npc: { name: "Brom", role: "the blacksmith", personality: "gruff but fair" },
  });
  console.log("--- system prompt for your LLM ---\n" + reply.system_prompt);
} catch (error) {
  if (error instanceof NpcmemError) console.error(`npcmem refused: ${error.code} ${error.field ?? ""} ${error.message}`);
  else throw error;
}

// 4. Story signals drive quests. A durable consumer resumes where it left off.
if (client.transport === "nats") {
  const signals = client.signals({ durable: "example-game-server" });
  process.once("SIGINT", () => signals.close());
  console.log("waiting for story signals (Ctrl-C to stop)");
  for await (const signal of signals) {
    // acked when the loop comes back for the next one
    console.log(signal.signal_type, signal.event_type, signal.stage, signal.npc_id, signal.version);
  }
}
await client.close();
