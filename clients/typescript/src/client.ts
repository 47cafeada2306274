// The game-server client: publishes conversations and world messages through JetStream
// (or ingest's HTTP front door), asks enrich for prompt context and values, and reads
// story signals from its own consumer on <STREAM_PREFIX>_SIGNALS.

import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  type ConsumerConfig,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from "@nats-io/jetstream";
import {
  ClosedConnectionError,
  InvalidArgumentError,
  InvalidSubjectError,
  NoRespondersError,
  PermissionViolationError,
  RequestError,
  TimeoutError,
  connect as natsConnect,
  nanos,
  type NatsConnection,
} from "@nats-io/transport-node";

import { NpcmemError, decodeReply } from "./errors.js";
import { worldMsgId, type WorldKind } from "./ids.js";
import { resolveSettings, type ConnectOptions, type Settings } from "./settings.js";
import { SignalFilter, parseSignal, type SignalFilterOptions, type SignalVerdict } from "./signals.js";
import type {
  ConversationEnded,
  EnrichReply,
  EnrichRequest,
  Persona,
  QueryKnowledge,
  QueryKnowledgeReply,
  QueryMemories,
  QueryMemoriesReply,
  QueryRecall,
  QueryRecallReply,
  QueryRelationshipReply,
  Signal,
  WorldFact,
  WorldNpcMoved,
  WorldNpcProfile,
  WorldObservation,
  WorldPlayerPrivacy,
} from "./types.generated.js";

/** What a publish stored. Over HTTP the front door does not say the stream sequence. */
export interface PublishAck {
  /** The stream that stored it (`NPCMEM_CONVERSATIONS`, `NPCMEM_WORLD`); null over HTTP. */
  stream: string | null;
  /** Its sequence in that stream; null over HTTP. */
  seq: number | null;
  /** True when the same Nats-Msg-Id was already stored inside the duplicate window. */
  duplicate: boolean;
  /** The Nats-Msg-Id it was published with. */
  msgId: string;
  transport: "nats" | "http";
}

/** An enrich reply with the defaults of every absent field filled in. */
export type EnrichResult = Required<EnrichReply>;

/** Options of {@link Client.context}. */
export interface ContextOptions {
  /** What the player just said; ranks memories and recalled moments by relevance. */
  message?: string | null;
  /** Token budget, 64–32,768 (enrich's default, 1,024, when absent). */
  maxTokens?: number | null;
  /** The persona; with one, the reply carries a rendered `system_prompt`. */
  npc?: Persona | null;
  /** Your own prompt template, with `{reputation}`, `{memory_context}`, `{name}`, … */
  template?: string | null;
}

/** Options of {@link Client.signals}. */
export interface SignalsOptions {
  /**
   * A durable consumer name: it resumes where it left off after a restart and misses
   * nothing. It must not start with the stream prefix. Without one, an ephemeral consumer
   * is created (and deleted on close).
   */
  durable?: string;
  /** `all` (default for a durable) or `new` (default without one). */
  deliverPolicy?: "all" | "new";
  /** Read one signal type only, e.g. `relationship_changed`. */
  signalType?: string;
  /** How many messages to pull at a time (default 64). */
  batch?: number;
  /** A filter to share between streams (default: the client's, shared by all its streams). */
  filter?: SignalFilter;
}

const PERMANENT_JS_CODES = new Set([
  10054, // message size exceeds maximum allowed
]);

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function jitter(ms: number): number {
  return ms * (0.8 + Math.random() * 0.4);
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** JSON of a message, with `schema_version: 1` (first) when the caller left it out. */
function encodeMessage(message: object): Uint8Array {
  const { schema_version, ...rest } = message as Record<string, unknown>;
  return new TextEncoder().encode(JSON.stringify({ schema_version: schema_version ?? 1, ...rest }));
}

function requireId(what: string, value: unknown): string {
  if (typeof value !== "string" || value === "") {
    throw new NpcmemError("missing_field", `${what} is required`, what);
  }
  return value;
}

/** Drops undefined values so that a request carries only what the caller set. */
function defined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

function fillEnrichDefaults(reply: EnrichReply): EnrichResult {
  return {
    degraded: reply.degraded ?? [],
    elapsed_us: reply.elapsed_us ?? 0,
    placeholders: reply.placeholders ?? {},
    sections: reply.sections ?? [],
    system_prompt: reply.system_prompt ?? null,
    token_count: reply.token_count ?? 0,
  };
}

/**
 * A connection to npcmem. Create one with {@link Client.connect}, share it across your
 * game server, and {@link Client.close} it on shutdown.
 */
export class Client {
  /** The settings in use (where they came from is in the README). */
  readonly settings: Settings;
  /** `nats`, or `http` when NATS could not be reached and the HTTP front doors are used. */
  readonly transport: "nats" | "http";
  /** Why the client fell back to HTTP, when it did. */
  readonly fallbackReason: string | null;
  /** The filter every signal stream of this client shares (dedup by id, per-pair version). */
  readonly signalFilter: SignalFilter;

  private readonly nc: NatsConnection | null;
  private readonly js: JetStreamClient | null;
  private jsm: JetStreamManager | null = null;
  private closed = false;
  private readonly streams = new Set<SignalStream>();

  private constructor(
    settings: Settings,
    nc: NatsConnection | null,
    fallbackReason: string | null,
    filterOptions?: SignalFilterOptions,
  ) {
    this.settings = settings;
    this.nc = nc;
    this.js = nc ? jetstream(nc, { timeout: settings.requestTimeoutMs }) : null;
    this.transport = nc ? "nats" : "http";
    this.fallbackReason = fallbackReason;
    this.signalFilter = new SignalFilter(filterOptions);
  }

  /**
   * Connects to npcmem. Settings come from `opts`, then `NPCMEM_*` environment
   * variables, then the env file (`NPCMEM_ENV_FILE`, else `.local/env` in the working
   * directory or an ancestor), then the defaults. With `transport: "auto"` (the default),
   * when NATS cannot be reached and `ingestHttp` or `enrichHttp` is known, the client uses
   * the HTTP front doors instead.
   */
  static async connect(opts: ConnectOptions & { signalFilter?: SignalFilterOptions } = {}): Promise<Client> {
    const settings = resolveSettings(opts);
    if (settings.transport === "http") {
      if (!settings.ingestHttp && !settings.enrichHttp) {
        throw new NpcmemError("unavailable", "transport http needs ingestHttp or enrichHttp (NPCMEM_INGEST_HTTP / NPCMEM_ENRICH_HTTP)", "transport");
      }
      return new Client(settings, null, "transport: http was asked for", opts.signalFilter);
    }
    try {
      const nc = await natsConnect({
        servers: settings.natsUrls,
        user: settings.user,
        pass: settings.password,
        name: settings.name,
        timeout: settings.connectTimeoutMs,
        maxReconnectAttempts: -1,
      });
      return new Client(settings, nc, null, opts.signalFilter);
    } catch (error) {
      const reason = `NATS at ${settings.natsUrls.join(",")} could not be reached: ${describe(error)}`;
      if (settings.transport === "auto" && (settings.ingestHttp || settings.enrichHttp)) {
        return new Client(settings, null, reason, opts.signalFilter);
      }
      throw new NpcmemError("unavailable", reason, null, { cause: error });
    }
  }

  /** `<subjectPrefix>.<name>`. */
  subject(name: string): string {
    return `${this.settings.subjectPrefix}.${name}`;
  }

  /** `<streamPrefix>_<NAME>`. */
  streamName(name: string): string {
    return `${this.settings.streamPrefix}_${name}`;
  }

  // ---- publishing ---------------------------------------------------------------------

  /**
   * Publishes a finished conversation to `<prefix>.conversation.ended` with Nats-Msg-Id =
   * `conversation_id` (over HTTP: `POST /v1/conversations`), retrying transient failures
   * with backoff and the same id. Publishing the same conversation again is harmless: it
   * is applied once.
   */
  async publishConversation(conversation: ConversationEnded): Promise<PublishAck> {
    const id = requireId("conversation_id", conversation.conversation_id);
    const body = encodeMessage(conversation);
    if (this.transport === "http") {
      return this.httpPublish("/v1/conversations", body, id);
    }
    return this.jsPublish(this.subject("conversation.ended"), body, id);
  }

  /** `world.npc_moved`: where an NPC is now (gossip passes facts between co-located NPCs). */
  async npcMoved(message: WorldNpcMoved): Promise<PublishAck> {
    return this.publishWorld("npc_moved", message);
  }

  /** `world.npc_profile`: an NPC's name, role, factions, drives and mood. */
  async npcProfile(message: WorldNpcProfile): Promise<PublishAck> {
    return this.publishWorld("npc_profile", message);
  }

  /** `world.observation`: something NPCs witnessed. Msg id `observation-<observation_id>`. */
  async observation(message: WorldObservation): Promise<PublishAck> {
    requireId("observation_id", message.observation_id);
    return this.publishWorld("observation", message);
  }

  /** `world.fact`: an authored fact some NPCs know. Msg id `fact-<fact_id>`. */
  async fact(message: WorldFact): Promise<PublishAck> {
    requireId("fact_id", message.fact_id);
    return this.publishWorld("fact", message);
  }

  /** `world.player_privacy`: the player opted in or out of NPC memory. */
  async playerPrivacy(message: WorldPlayerPrivacy): Promise<PublishAck> {
    return this.publishWorld("player_privacy", message);
  }

  /**
   * Publishes a world message with the Nats-Msg-Id ingest's front door would give it
   * (`observation-<id>`, `fact-<id>`, else `<kind>-<UUID v5 of the body>`), so a message
   * sent over NATS and over HTTP is stored once.
   */
  async publishWorld(kind: WorldKind, message: object): Promise<PublishAck> {
    const body = encodeMessage(message);
    const msgId = worldMsgId(kind, message as Record<string, unknown>, body);
    if (this.transport === "http") {
      return this.httpPublish(`/v1/world/${kind}`, body, msgId);
    }
    return this.jsPublish(this.subject(`world.${kind}`), body, msgId);
  }

  private async jsPublish(subject: string, body: Uint8Array, msgId: string): Promise<PublishAck> {
    const js = this.natsOnly().js;
    const deadline = Date.now() + this.settings.publishRetryMs;
    let delay = 100;
    for (;;) {
      this.checkOpen();
      try {
        const ack = await js.publish(subject, body, { msgID: msgId, timeout: this.settings.requestTimeoutMs, retries: 0 });
        return { stream: ack.stream, seq: ack.seq, duplicate: ack.duplicate, msgId, transport: "nats" };
      } catch (error) {
        const permanent =
          error instanceof InvalidArgumentError ||
          error instanceof InvalidSubjectError ||
          error instanceof PermissionViolationError ||
          error instanceof ClosedConnectionError ||
          (error instanceof JetStreamApiError && PERMANENT_JS_CODES.has(error.code));
        if (permanent || this.closed || Date.now() + delay > deadline) {
          const code = permanent ? "refused" : "unavailable";
          throw new NpcmemError(code, `publishing ${msgId} to ${subject} failed: ${describe(error)}`, null, { cause: error });
        }
        await sleep(jitter(delay));
        delay = Math.min(delay * 2, 5000);
      }
    }
  }

  private async httpPublish(path: string, body: Uint8Array, msgId: string): Promise<PublishAck> {
    const base = this.settings.ingestHttp;
    if (!base) {
      throw new NpcmemError("unavailable", `no NATS connection and no ingest HTTP address (NPCMEM_INGEST_HTTP) to publish ${msgId}`);
    }
    const deadline = Date.now() + this.settings.publishRetryMs;
    let delay = 100;
    for (;;) {
      this.checkOpen();
      let failure: unknown;
      try {
        const { status, text } = await this.httpPost(base + path, body);
        // 202 accepted; 4xx bad input (never retried); 503 could not be stored (retry)
        if (status !== 503 && status < 500) {
          const reply = decodeReply<{ duplicate?: boolean; msg_id?: string; conversation_id?: string }>(text, status);
          return { stream: null, seq: null, duplicate: reply.duplicate === true, msgId, transport: "http" };
        }
        failure = decodeReplyError(text, status);
      } catch (error) {
        if (error instanceof NpcmemError && error.code !== "unavailable" && error.code !== "timeout") throw error;
        failure = error;
      }
      if (this.closed || Date.now() + delay > deadline) {
        if (failure instanceof NpcmemError) throw failure;
        throw new NpcmemError("unavailable", `POST ${base}${path} failed: ${describe(failure)}`, null, { cause: failure });
      }
      await sleep(jitter(delay));
      delay = Math.min(delay * 2, 5000);
    }
  }

  private async httpPost(url: string, body: Uint8Array | string): Promise<{ status: number; text: string }> {
    let response: Response;
    try {
      response = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: body as unknown as string, // a Uint8Array is a valid fetch body; the types lag
        signal: AbortSignal.timeout(this.settings.requestTimeoutMs),
      });
    } catch (error) {
      const timedOut = error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError");
      throw new NpcmemError(timedOut ? "timeout" : "unavailable", `POST ${url}: ${describe(error)}${error instanceof Error && error.cause ? ` (${describe(error.cause)})` : ""}`, null, { cause: error });
    }
    return { status: response.status, text: await response.text() };
  }

  // ---- enrich and queries -------------------------------------------------------------

  /**
   * Prompt context for the NPC's next reply: `enrich.request` over NATS, or
   * `POST /v1/context` over HTTP. Error replies throw {@link NpcmemError}.
   */
  context(npcId: string, playerId: string, options: ContextOptions = {}): Promise<EnrichResult> {
    return this.enrich(
      defined({
        npc_id: npcId,
        player_id: playerId,
        message: options.message ?? undefined,
        max_tokens: options.maxTokens ?? undefined,
        npc: options.npc ?? undefined,
        template: options.template ?? undefined,
      }),
    );
  }

  /** Sends an `enrich.request` as given (adding `schema_version: 1`). */
  async enrich(request: EnrichRequest): Promise<EnrichResult> {
    const body = encodeMessage(request);
    if (this.transport === "http") {
      const base = this.settings.enrichHttp;
      if (!base) throw new NpcmemError("unavailable", "no NATS connection and no enrich HTTP address (NPCMEM_ENRICH_HTTP)");
      const { status, text } = await this.httpPost(`${base}/v1/context`, body);
      return fillEnrichDefaults(decodeReply<EnrichReply>(text, status));
    }
    return fillEnrichDefaults(await this.request<EnrichReply>(this.subject("enrich.request"), body));
  }

  /** `query.relationship`: the pair's relationship values (a stranger gets the initial ones). */
  queryRelationship(npcId: string, playerId: string): Promise<QueryRelationshipReply> {
    return this.query("relationship", { npc_id: npcId, player_id: playerId });
  }

  /** `query.memories`: the NPC's memories of the player, filtered (tags must all match). */
  queryMemories(npcId: string, playerId: string, filters: Omit<QueryMemories, "npc_id" | "player_id"> = {}): Promise<QueryMemoriesReply> {
    return this.query("memories", defined({ ...filters, npc_id: npcId, player_id: playerId }));
  }

  /** `query.knowledge`: the facts the NPC knows (by tag or subject). */
  queryKnowledge(npcId: string, filters: Omit<QueryKnowledge, "npc_id"> = {}): Promise<QueryKnowledgeReply> {
    return this.query("knowledge", defined({ ...filters, npc_id: npcId }));
  }

  /**
   * `query.recall`: the pair's own earlier turns, best match for `text` first. Also works
   * in HTTP mode (`POST /v1/recall` on enrich), unlike the other queries.
   */
  async queryRecall(npcId: string, playerId: string, filters: Omit<QueryRecall, "npc_id" | "player_id"> = {}): Promise<QueryRecallReply> {
    const request = defined({ ...filters, npc_id: npcId, player_id: playerId });
    if (this.transport === "http" && this.settings.enrichHttp) {
      const { status, text } = await this.httpPost(`${this.settings.enrichHttp}/v1/recall`, encodeMessage(request));
      return decodeReply<QueryRecallReply>(text, status);
    }
    return this.query("recall", request);
  }

  private async query<T>(name: string, request: object): Promise<T> {
    if (this.transport === "http") {
      throw new NpcmemError(
        "not_supported",
        `query.${name} needs NATS: the client is in HTTP mode (${this.fallbackReason ?? "no NATS"}); only publishing, context and recall have an HTTP path`,
      );
    }
    return this.request<T>(this.subject(`query.${name}`), encodeMessage(request));
  }

  private async request<T>(subject: string, body: Uint8Array): Promise<T> {
    const { nc } = this.natsOnly();
    let data: Uint8Array;
    try {
      data = (await nc.request(subject, body, { timeout: this.settings.requestTimeoutMs })).data;
    } catch (error) {
      const noResponders =
        error instanceof NoRespondersError ||
        (error instanceof RequestError && error.isNoResponders()) ||
        (error instanceof Error && error.cause instanceof NoRespondersError);
      if (noResponders) {
        throw new NpcmemError("unavailable", `no npcmem enrich service answers on ${subject}`, null, { cause: error });
      }
      const timedOut = error instanceof TimeoutError || (error instanceof Error && error.cause instanceof TimeoutError);
      if (timedOut) {
        throw new NpcmemError("timeout", `no answer on ${subject} within ${this.settings.requestTimeoutMs} ms`, null, { cause: error });
      }
      if (error instanceof ClosedConnectionError) throw new NpcmemError("closed", "the client is closed", null, { cause: error });
      throw new NpcmemError("unavailable", `request on ${subject} failed: ${describe(error)}`, null, { cause: error });
    }
    return decodeReply<T>(data);
  }

  // ---- signals ------------------------------------------------------------------------

  /**
   * Story signals from `<STREAM_PREFIX>_SIGNALS` (filter `<prefix>.signal.>`), through
   * your own JetStream consumer: duplicates (same `signal_id`) and stale signals (a
   * `version` lower than the highest applied for the NPC-player pair) are acked and
   * skipped. Each signal is acked when your loop asks for the next one; leaving the loop
   * (break, return or an exception) naks the signal being handled, so it is delivered
   * again. NATS only.
   */
  signals(options: SignalsOptions = {}): SignalStream {
    const { nc } = this.natsOnly("signals");
    const prefix = this.settings.streamPrefix;
    if (options.durable !== undefined) {
      if (!/^[A-Za-z0-9_-]+$/.test(options.durable)) {
        throw new NpcmemError("invalid_field", `durable may contain only letters, digits, _ and -, got ${JSON.stringify(options.durable)}`, "durable");
      }
      if (options.durable.startsWith(prefix)) {
        throw new NpcmemError("invalid_field", `durable ${options.durable} starts with the stream prefix ${prefix}, which npcmem's own durables use`, "durable");
      }
    }
    if (options.signalType !== undefined && !/^[A-Za-z0-9_-]+$/.test(options.signalType)) {
      throw new NpcmemError("invalid_field", `signalType must be a single subject token, got ${JSON.stringify(options.signalType)}`, "signalType");
    }
    const stream = new SignalStream({
      nc,
      manager: () => this.manager(),
      stream: this.streamName("SIGNALS"),
      filterSubject: this.subject(`signal.${options.signalType ?? ">"}`),
      durable: options.durable,
      deliverPolicy: options.deliverPolicy ?? (options.durable ? "all" : "new"),
      batch: options.batch ?? 64,
      filter: options.filter ?? this.signalFilter,
      onClose: (s) => this.streams.delete(s),
    });
    this.streams.add(stream);
    return stream;
  }

  private async manager(): Promise<JetStreamManager> {
    if (!this.jsm) this.jsm = await jetstreamManager(this.natsOnly().nc, { timeout: this.settings.requestTimeoutMs });
    return this.jsm;
  }

  // ---- lifecycle ----------------------------------------------------------------------

  /** Closes the signal streams and drains the NATS connection (pending acks are sent). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([...this.streams].map((stream) => stream.close()));
    if (this.nc && !this.nc.isClosed()) {
      try {
        await this.nc.drain();
      } catch {
        await this.nc.close().catch(() => undefined);
      }
    }
  }

  private checkOpen(): void {
    if (this.closed) throw new NpcmemError("closed", "the client is closed");
  }

  private natsOnly(what?: string): { nc: NatsConnection; js: JetStreamClient } {
    this.checkOpen();
    if (!this.nc || !this.js) {
      throw new NpcmemError(
        "not_supported",
        `${what ?? "this call"} needs NATS: the client is in HTTP mode (${this.fallbackReason ?? "no NATS"})`,
      );
    }
    return { nc: this.nc, js: this.js };
  }
}

function decodeReplyError(text: string, status: number): NpcmemError {
  try {
    decodeReply(text, status);
  } catch (error) {
    if (error instanceof NpcmemError) return error;
  }
  return new NpcmemError("unavailable", `HTTP ${status}: ${text.slice(0, 200)}`, null, { status });
}

interface SignalStreamConfig {
  nc: NatsConnection;
  manager: () => Promise<JetStreamManager>;
  stream: string;
  filterSubject: string;
  durable?: string;
  deliverPolicy: "all" | "new";
  batch: number;
  filter: SignalFilter;
  onClose: (stream: SignalStream) => void;
}

/**
 * An async iterable of story signals (see {@link Client.signals}). Iterate it once; close
 * it (or the client) to stop. `skipped` counts the duplicates, stale and unreadable
 * signals it acked without handing them out.
 */
export class SignalStream implements AsyncIterable<Signal> {
  readonly skipped = { duplicate: 0, stale: 0, invalid: 0 };
  /** The consumer's name once it is open. */
  consumerName: string | null = null;

  private messages: ConsumerMessages | null = null;
  private started = false;
  private closed = false;

  constructor(private readonly config: SignalStreamConfig) {}

  /** Creates (or binds to) the consumer; iteration does it by itself. */
  async open(): Promise<void> {
    if (this.messages || this.closed) return;
    const { config } = this;
    const jsm = await config.manager();
    const consumerConfig: Partial<ConsumerConfig> = {
      filter_subject: config.filterSubject,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: config.deliverPolicy === "all" ? DeliverPolicy.All : DeliverPolicy.New,
      ack_wait: nanos(30_000),
      max_ack_pending: 1000,
    };
    if (config.durable) {
      consumerConfig.durable_name = config.durable;
    } else {
      consumerConfig.inactive_threshold = nanos(5 * 60_000);
    }
    let name: string;
    try {
      name = (await jsm.consumers.add(config.stream, consumerConfig)).name;
    } catch (error) {
      if (config.durable && error instanceof JetStreamApiError && error.code === 10148) {
        // exists with another configuration: use it as it is
        name = (await jsm.consumers.info(config.stream, config.durable)).name;
      } else {
        throw new NpcmemError("unavailable", `cannot create a consumer on ${config.stream}: ${describe(error)}`, null, { cause: error });
      }
    }
    this.consumerName = name;
    const consumer = await jsm.jetstream().consumers.get(config.stream, name);
    this.messages = await consumer.consume({ max_messages: config.batch });
    if (this.closed) await this.messages.close();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Signal> {
    if (this.started) throw new NpcmemError("invalid_operation", "a signal stream can be iterated once; open another with client.signals()");
    this.started = true;
    await this.open();
    const { filter } = this.config;
    let outstanding: { msg: JsMsg; signal: Signal } | null = null;
    try {
      if (!this.messages || this.closed) return;
      for await (const msg of this.messages) {
        const signal = parseSignal(msg.data);
        if (!signal) {
          this.skipped.invalid++;
          msg.term("not a signal");
          continue;
        }
        const verdict: SignalVerdict = filter.check(signal);
        if (verdict !== "accept") {
          this.skipped[verdict]++;
          msg.ack();
          continue;
        }
        outstanding = { msg, signal };
        yield signal;
        // The loop asked for the next one: this one was handled.
        filter.record(signal);
        msg.ack();
        outstanding = null;
        if (this.closed) break;
      }
    } finally {
      if (outstanding) outstanding.msg.nak();
      await this.close();
    }
  }

  /** Stops the stream; an ephemeral consumer is deleted. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.config.onClose(this);
    const messages = this.messages;
    if (messages) {
      await messages.close().catch(() => undefined);
    }
    if (!this.config.durable && this.consumerName && !this.config.nc.isClosed()) {
      try {
        const jsm = await this.config.manager();
        await jsm.consumers.delete(this.config.stream, this.consumerName);
      } catch {
        // it goes away by itself after its inactive threshold
      }
    }
  }
}
