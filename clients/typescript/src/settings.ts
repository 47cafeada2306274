// Where the SDK finds npcmem: explicit options win, then NPCMEM_* environment variables,
// then the env file `deploy/local/up` writes (NPCMEM_ENV_FILE, else `.local/env` in the
// working directory or an ancestor), then the defaults.

import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

import { NpcmemError } from "./errors.js";

export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222";
export const DEFAULT_SUBJECT_PREFIX = "npcmem";
export const DEFAULT_STREAM_PREFIX = "NPCMEM";
const ENV_FILE = join(".local", "env");

/** Which transport a client uses: NATS when reachable, else the HTTP front doors. */
export type TransportChoice = "auto" | "nats" | "http";

/** Options of {@link Client.connect}; every one is optional. */
export interface ConnectOptions {
  /** NATS server URL(s), comma-separated or an array (NPCMEM_NATS_URL). */
  natsUrl?: string | string[];
  /** NATS user and password (NPCMEM_NATS_USER, NPCMEM_NATS_PASSWORD). */
  user?: string;
  password?: string;
  /** Subject prefix, `npcmem` by default (NPCMEM_SUBJECT_PREFIX). */
  subjectPrefix?: string;
  /** Stream prefix, `NPCMEM` by default (NPCMEM_STREAM_PREFIX). */
  streamPrefix?: string;
  /** Base URL of ingest's HTTP front door, e.g. `http://127.0.0.1:9301` (NPCMEM_INGEST_HTTP). */
  ingestHttp?: string;
  /** Base URL of enrich's HTTP listener (NPCMEM_ENRICH_HTTP). */
  enrichHttp?: string;
  /** The env file to read instead of looking for `.local/env` (NPCMEM_ENV_FILE). */
  envFile?: string;
  /** `auto` (default): NATS, falling back to HTTP when NATS cannot be reached and HTTP endpoints are known. */
  transport?: TransportChoice;
  /** How long to try to reach NATS, in ms (default 2000). */
  connectTimeoutMs?: number;
  /** Timeout of a request (enrich, query, HTTP call), in ms (default 5000). */
  requestTimeoutMs?: number;
  /** How long publishConversation and the world methods keep retrying transient failures, in ms (default 30000). */
  publishRetryMs?: number;
  /** Client name shown by the NATS server. */
  name?: string;
  /** The environment to read (default process.env); for tests. */
  env?: Record<string, string | undefined>;
  /** Where the search for `.local/env` starts (default process.cwd()); for tests. */
  cwd?: string;
}

/** The resolved settings a client runs with. */
export interface Settings {
  natsUrls: string[];
  user?: string;
  password?: string;
  subjectPrefix: string;
  streamPrefix: string;
  ingestHttp?: string;
  enrichHttp?: string;
  /** The env file that was read, if any. */
  envFile?: string;
  transport: TransportChoice;
  connectTimeoutMs: number;
  requestTimeoutMs: number;
  publishRetryMs: number;
  name: string;
}

/**
 * The `NPCMEM_*` assignments of an env file: `export NPCMEM_X=value` lines (the `export`
 * is optional), values as bash's `printf %q` writes them (backslash escapes, `'…'` and
 * `$'…'` quoting) or in double quotes. Other variables, comments and malformed lines are
 * ignored.
 */
export function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    let line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    if (line.startsWith("export ")) line = line.slice("export ".length).trim();
    const eq = line.indexOf("=");
    if (eq < 0) continue;
    const key = line.slice(0, eq).trim();
    if (!/^NPCMEM_[A-Za-z0-9_]*$/.test(key)) continue;
    out[key] = unquote(line.slice(eq + 1).trim());
  }
  return out;
}

const ANSI_C_ESCAPES: Record<string, string> = {
  a: "\x07",
  b: "\b",
  e: "\x1b",
  E: "\x1b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
  v: "\v",
  "\\": "\\",
  "'": "'",
  '"': '"',
  "?": "?",
};

/** A shell word as `printf %q` (or a person) writes it, unquoted. */
export function unquote(value: string): string {
  let out = "";
  let i = 0;
  while (i < value.length) {
    const c = value[i];
    if (c === "'") {
      // '…': everything literal up to the next quote
      const end = value.indexOf("'", i + 1);
      if (end < 0) return out + value.slice(i + 1);
      out += value.slice(i + 1, end);
      i = end + 1;
    } else if (c === "$" && value[i + 1] === "'") {
      // $'…': ANSI-C escapes, as printf %q writes control characters
      i += 2;
      while (i < value.length && value[i] !== "'") {
        if (value[i] === "\\" && i + 1 < value.length) {
          const next = value[i + 1];
          const octal = /^[0-7]{1,3}/.exec(value.slice(i + 1));
          const hex = /^x([0-9A-Fa-f]{1,2})/.exec(value.slice(i + 1));
          if (next in ANSI_C_ESCAPES) {
            out += ANSI_C_ESCAPES[next];
            i += 2;
          } else if (hex) {
            out += String.fromCharCode(parseInt(hex[1], 16));
            i += 1 + hex[0].length;
          } else if (octal) {
            out += String.fromCharCode(parseInt(octal[0], 8));
            i += 1 + octal[0].length;
          } else {
            out += "\\" + next;
            i += 2;
          }
        } else {
          out += value[i++];
        }
      }
      i += 1;
    } else if (c === '"') {
      // "…": backslash escapes only before $ ` " \ and newline
      i += 1;
      while (i < value.length && value[i] !== '"') {
        if (value[i] === "\\" && i + 1 < value.length && '$`"\\\n'.includes(value[i + 1])) {
          out += value[i + 1];
          i += 2;
        } else {
          out += value[i++];
        }
      }
      i += 1;
    } else if (c === "\\") {
      if (i + 1 < value.length) out += value[i + 1];
      i += 2;
    } else {
      out += c;
      i += 1;
    }
  }
  return out;
}

/** NPCMEM_ENV_FILE if set, else `.local/env` in `cwd` or its nearest ancestor that has one. */
export function locateEnvFile(env: Record<string, string | undefined>, cwd: string): string | undefined {
  const explicit = env.NPCMEM_ENV_FILE;
  if (explicit) return resolve(cwd, explicit);
  let dir = resolve(cwd);
  for (;;) {
    const candidate = join(dir, ENV_FILE);
    try {
      if (existsSync(candidate) && statSync(candidate).isFile()) return candidate;
    } catch {
      // unreadable: keep looking
    }
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

function splitUrls(value: string | string[]): string[] {
  const list = Array.isArray(value) ? value : value.split(",");
  return list.map((url) => url.trim()).filter(Boolean);
}

function checkPrefix(what: string, value: string): string {
  if (!/^[A-Za-z0-9_-]+$/.test(value)) {
    throw new NpcmemError("invalid_field", `${what} may contain only letters, digits, _ and -, got ${JSON.stringify(value)}`, what);
  }
  return value;
}

function positive(what: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) {
    throw new NpcmemError("invalid_field", `${what} must be a positive number of milliseconds`, what);
  }
  return value;
}

/**
 * The settings a client uses: each one from the options, else the environment, else the
 * env file, else the default. The env file is read only when it exists; an explicitly
 * named one (option or NPCMEM_ENV_FILE) that cannot be read is an error.
 */
export function resolveSettings(opts: ConnectOptions = {}): Settings {
  const env = opts.env ?? process.env;
  const cwd = opts.cwd ?? process.cwd();
  const envFile = opts.envFile ? resolve(cwd, opts.envFile) : locateEnvFile(env, cwd);
  let fromFile: Record<string, string> = {};
  if (envFile) {
    try {
      fromFile = parseEnvFile(readFileSync(envFile, "utf8"));
    } catch (error) {
      if (opts.envFile || env.NPCMEM_ENV_FILE) {
        throw new NpcmemError("invalid_field", `cannot read the env file ${envFile}: ${(error as Error).message}`, "envFile");
      }
    }
  }
  const pick = (option: string | undefined, variable: string): string | undefined => {
    if (option !== undefined && option !== "") return option;
    const fromEnv = env[variable];
    if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
    const value = fromFile[variable];
    return value !== undefined && value !== "" ? value : undefined;
  };
  const natsOption = opts.natsUrl === undefined ? undefined : splitUrls(opts.natsUrl).join(",");
  const transport = opts.transport ?? "auto";
  if (!["auto", "nats", "http"].includes(transport)) {
    throw new NpcmemError("invalid_field", `transport must be auto, nats or http, got ${JSON.stringify(transport)}`, "transport");
  }
  const trimSlash = (url: string | undefined) => url?.replace(/\/+$/, "");
  return {
    natsUrls: splitUrls(pick(natsOption, "NPCMEM_NATS_URL") ?? DEFAULT_NATS_URL),
    user: pick(opts.user, "NPCMEM_NATS_USER"),
    password: pick(opts.password, "NPCMEM_NATS_PASSWORD"),
    subjectPrefix: checkPrefix("subjectPrefix", pick(opts.subjectPrefix, "NPCMEM_SUBJECT_PREFIX") ?? DEFAULT_SUBJECT_PREFIX),
    streamPrefix: checkPrefix("streamPrefix", pick(opts.streamPrefix, "NPCMEM_STREAM_PREFIX") ?? DEFAULT_STREAM_PREFIX),
    ingestHttp: trimSlash(pick(opts.ingestHttp, "NPCMEM_INGEST_HTTP")),
    enrichHttp: trimSlash(pick(opts.enrichHttp, "NPCMEM_ENRICH_HTTP")),
    envFile: Object.keys(fromFile).length > 0 || opts.envFile || env.NPCMEM_ENV_FILE ? envFile : undefined,
    transport,
    connectTimeoutMs: positive("connectTimeoutMs", opts.connectTimeoutMs, 2000),
    requestTimeoutMs: positive("requestTimeoutMs", opts.requestTimeoutMs, 5000),
    publishRetryMs: positive("publishRetryMs", opts.publishRetryMs, 30000),
    name: opts.name ?? "npcmem-ts",
  };
}
