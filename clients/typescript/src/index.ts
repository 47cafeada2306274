// npcmem: the game-server SDK. See README.md.

export { Client, SignalStream } from "./client.js";
export type { ContextOptions, EnrichResult, PublishAck, SignalsOptions } from "./client.js";
export { NpcmemError, decodeReply, errorFromReply } from "./errors.js";
export { WORLD_NAMESPACE, newId, timestamp, uuidV5, worldMsgId } from "./ids.js";
export type { WorldKind } from "./ids.js";
export {
  DEFAULT_NATS_URL,
  DEFAULT_STREAM_PREFIX,
  DEFAULT_SUBJECT_PREFIX,
  locateEnvFile,
  parseEnvFile,
  resolveSettings,
} from "./settings.js";
export type { ConnectOptions, Settings, TransportChoice } from "./settings.js";
export { SignalFilter, parseSignal } from "./signals.js";
export type { SignalFilterOptions, SignalVerdict } from "./signals.js";
export * from "./types.generated.js";
