// npcmem's error replies ({"error":{"code","message","field"?}}) and the SDK's own
// failures, as one error class.

/**
 * An error npcmem answered with, or one the SDK reports in the same terms.
 *
 * `code` is npcmem's reason code (`invalid_field`, `missing_field`, `invalid_uuid`,
 * `max_tokens_too_small`, `unavailable`, …) or one of the SDK's: `timeout` (no answer in
 * time), `unavailable` (no service answers / NATS or HTTP unreachable), `not_supported`
 * (a query in HTTP mode), `closed` (the client was closed), `invalid_reply` (an answer that
 * is not what the protocol describes). `field` is the path of the offending field when
 * npcmem names one (`npc.name`, `messages[2].text`). `status` is the HTTP status when the
 * error came over HTTP.
 */
export class NpcmemError extends Error {
  readonly code: string;
  readonly field: string | null;
  readonly status: number | null;

  constructor(code: string, message: string, field?: string | null, options?: { status?: number; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "NpcmemError";
    this.code = code;
    this.field = field ?? null;
    this.status = options?.status ?? null;
  }
}

/**
 * The NpcmemError an error reply describes, or null when `value` is not an error reply.
 * Anything with an `error` key counts: a malformed error object still becomes an error
 * (code `invalid_reply`) rather than passing for a successful answer.
 */
export function errorFromReply(value: unknown, status?: number): NpcmemError | null {
  if (value === null || typeof value !== "object" || Array.isArray(value) || !("error" in value)) return null;
  const body = (value as { error: unknown }).error;
  if (body && typeof body === "object" && !Array.isArray(body)) {
    const { code, message, field } = body as Record<string, unknown>;
    if (typeof code === "string") {
      return new NpcmemError(
        code,
        typeof message === "string" ? message : code,
        typeof field === "string" ? field : null,
        status === undefined ? undefined : { status },
      );
    }
  }
  return new NpcmemError("invalid_reply", `malformed error reply: ${JSON.stringify(body)}`, null, status === undefined ? undefined : { status });
}

/** Parses a reply body: the JSON object, or the NpcmemError it carries is thrown. */
export function decodeReply<T>(bytes: Uint8Array | string, status?: number): T {
  const text = typeof bytes === "string" ? bytes : new TextDecoder().decode(bytes);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new NpcmemError("invalid_reply", `the reply is not JSON: ${text.slice(0, 200)}`, null, status === undefined ? undefined : { status });
  }
  const error = errorFromReply(value, status);
  if (error) throw error;
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new NpcmemError("invalid_reply", `the reply is not a JSON object: ${text.slice(0, 200)}`, null, status === undefined ? undefined : { status });
  }
  return value as T;
}
