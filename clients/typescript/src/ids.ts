// Ids: random v4 UUIDs for new conversations and facts, and the name-based v5 UUIDs
// ingest's HTTP front door gives world messages that carry no id of their own.

import { createHash, randomUUID } from "node:crypto";

/** The namespace of `<kind>-<UUID v5 of the body>` world message ids (wire-protocol.md §11). */
export const WORLD_NAMESPACE = "6a2e51c4-8f0b-4c7e-a0d3-2b9f7e41c5d8";

/** A new random (v4) UUID in the hyphenated form npcmem expects. */
export function newId(): string {
  return randomUUID();
}

/** The RFC 3339 form of a time (now by default), e.g. `2025-06-01T12:05:00.000Z`. */
export function timestamp(at: Date = new Date()): string {
  return at.toISOString();
}

/** A name-based (SHA-1, version 5) UUID, as RFC 4122 and Rust's `Uuid::new_v5` make it. */
export function uuidV5(namespace: string, name: Uint8Array | string): string {
  const ns = Buffer.from(namespace.replace(/-/g, ""), "hex");
  if (ns.length !== 16) throw new TypeError(`not a UUID: ${namespace}`);
  const digest = createHash("sha1")
    .update(ns)
    .update(typeof name === "string" ? Buffer.from(name, "utf8") : name)
    .digest();
  const bytes = digest.subarray(0, 16);
  bytes[6] = (bytes[6] & 0x0f) | 0x50;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The world message kinds and the subjects they go to (after the prefix). */
export type WorldKind = "npc_moved" | "npc_profile" | "observation" | "fact" | "player_privacy";

/**
 * The Nats-Msg-Id of a world message, exactly as ingest's front door chooses it, so that a
 * message published over NATS and over HTTP deduplicates: `observation-<observation_id>`,
 * `fact-<fact_id>`, else `<kind>-<UUID v5 of the body bytes>`.
 */
export function worldMsgId(kind: WorldKind, message: Record<string, unknown>, body: Uint8Array): string {
  if (kind === "observation" && typeof message.observation_id === "string") return `observation-${message.observation_id}`;
  if (kind === "fact" && typeof message.fact_id === "string") return `fact-${message.fact_id}`;
  return `${kind}-${uuidV5(WORLD_NAMESPACE, body)}`;
}
