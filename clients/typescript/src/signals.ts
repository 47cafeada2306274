// What wire-protocol.md §6 asks of every signal subscriber: deduplicate by `signal_id`
// (JetStream drops duplicates only inside its 2-minute window; redeliveries after an ack
// timeout or a crash, and replays, come again with the same id) and, where `version` is
// set, keep the highest version applied per NPC-player pair and treat a lower one as stale.
//
// The signals of one applied conversation share its relationship version (a threshold
// crossing, the stage change and a memory milestone all carry the same `version`), so a
// signal whose version EQUALS the highest applied one is not stale: it is a sibling, and
// only its `signal_id` decides whether it was seen. Memory is bounded: the least recently
// used ids and pairs are forgotten first.

import type { Signal } from "./types.generated.js";

/** What the filter decides about a signal. */
export type SignalVerdict = "accept" | "duplicate" | "stale";

export interface SignalFilterOptions {
  /** How many signal ids to remember (default 10,000). */
  maxIds?: number;
  /** How many NPC-player pairs' versions to remember (default 10,000). */
  maxPairs?: number;
}

/** A Map used as a least-recently-used set/dictionary with a size bound. */
class Lru<V> {
  private readonly map = new Map<string, V>();
  constructor(private readonly max: number) {}
  get(key: string): V | undefined {
    const value = this.map.get(key);
    if (value !== undefined) {
      this.map.delete(key);
      this.map.set(key, value);
    }
    return value;
  }
  has(key: string): boolean {
    return this.map.has(key);
  }
  set(key: string, value: V): void {
    this.map.delete(key);
    this.map.set(key, value);
    while (this.map.size > this.max) {
      const oldest = this.map.keys().next().value as string;
      this.map.delete(oldest);
    }
  }
  get size(): number {
    return this.map.size;
  }
}

function versionOf(signal: Pick<Signal, "version">): number | null {
  const version = signal.version;
  return typeof version === "number" && Number.isFinite(version) ? version : null;
}

/**
 * Deduplication and per-pair ordering of story signals. `check` decides without
 * remembering; `record` remembers a signal as applied (call it once the game has handled
 * it, so a signal whose handling failed is accepted again when it is redelivered);
 * `offer` does both.
 */
export class SignalFilter {
  private readonly ids: Lru<true>;
  private readonly versions: Lru<number>;

  constructor(options: SignalFilterOptions = {}) {
    this.ids = new Lru(Math.max(1, options.maxIds ?? 10_000));
    this.versions = new Lru(Math.max(1, options.maxPairs ?? 10_000));
  }

  /** The key of the pair whose version orders this signal, or null when it carries none. */
  static pairKey(signal: Pick<Signal, "npc_id" | "player_id" | "version">): string | null {
    if (versionOf(signal) === null || !signal.player_id) return null;
    return `${String(signal.npc_id).toLowerCase()}/${String(signal.player_id).toLowerCase()}`;
  }

  check(signal: Pick<Signal, "signal_id" | "npc_id" | "player_id" | "version">): SignalVerdict {
    if (this.ids.has(String(signal.signal_id).toLowerCase())) return "duplicate";
    const pair = SignalFilter.pairKey(signal);
    if (pair !== null) {
      const highest = this.versions.get(pair);
      if (highest !== undefined && (versionOf(signal) as number) < highest) return "stale";
    }
    return "accept";
  }

  record(signal: Pick<Signal, "signal_id" | "npc_id" | "player_id" | "version">): void {
    this.ids.set(String(signal.signal_id).toLowerCase(), true);
    const pair = SignalFilter.pairKey(signal);
    if (pair !== null) {
      const version = versionOf(signal) as number;
      const highest = this.versions.get(pair);
      this.versions.set(pair, highest === undefined ? version : Math.max(highest, version));
    }
  }

  /** check, and record the signal when it is accepted. */
  offer(signal: Pick<Signal, "signal_id" | "npc_id" | "player_id" | "version">): SignalVerdict {
    const verdict = this.check(signal);
    if (verdict === "accept") this.record(signal);
    return verdict;
  }

  /** The highest version applied for a pair, if remembered. */
  highestVersion(npcId: string, playerId: string): number | undefined {
    return this.versions.get(`${npcId.toLowerCase()}/${playerId.toLowerCase()}`);
  }

  /** How many signal ids and pairs are remembered. */
  get size(): { ids: number; pairs: number } {
    return { ids: this.ids.size, pairs: this.versions.size };
  }
}

/** Reads a signal payload; null when it is not a signal (no signal_id, signal_type, npc_id). */
export function parseSignal(data: Uint8Array | string): Signal | null {
  let value: unknown;
  try {
    value = JSON.parse(typeof data === "string" ? data : new TextDecoder().decode(data));
  } catch {
    return null;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return null;
  const signal = value as Record<string, unknown>;
  if (typeof signal.signal_id !== "string" || typeof signal.signal_type !== "string" || typeof signal.npc_id !== "string") {
    return null;
  }
  return signal as Signal;
}
