/**
 * The gateway's one error → HTTP status table (docs/errors.md follows it, checked by a test), and the two body shapes:
 * OpenAI `{"error":{"message","type","code"}}` and Anthropic `{"type":"error","error":{"type","message"}}`.
 */
import {
  CapacityError,
  ClientLimitError,
  LeaseLostError,
  NoChannelError,
  SettingsError,
  StoreUnavailableError,
} from 'slotgate';

export type ApiShape = 'openai' | 'anthropic';

export interface ErrorSpec {
  status: number;
  /** OpenAI `error.type`. */
  type: string;
  /** Anthropic `error.type`. */
  anthropicType: string;
  meaning: string;
}

/** A code's two body types follow from its status, as in OpenAI's and Anthropic's own APIs. */
function typesOf(status: number): Pick<ErrorSpec, 'type' | 'anthropicType'> {
  if (status === 429) return { type: 'rate_limit_error', anthropicType: 'rate_limit_error' };
  if (status >= 500)
    return { type: 'server_error', anthropicType: status === 503 ? 'overloaded_error' : 'api_error' };
  const anthropic: Record<number, string> = {
    401: 'authentication_error',
    404: 'not_found_error',
    413: 'request_too_large',
  };
  return { type: 'invalid_request_error', anthropicType: anthropic[status] ?? 'invalid_request_error' };
}

const ERRORS = {
  channel_capacity_exhausted: {
    status: 429,
    meaning:
      'every candidate channel is at its max concurrency: none free and waiting off, the wait queue full, or the wait timed out. retry-after-ms and Retry-After say when a slot is likely (jittered).',
  },
  client_concurrency_exceeded: {
    status: 429,
    meaning:
      "the caller's client (its token's max_concurrency, shared by the tokens of one client) has that many requests in flight across the fleet and none of its slots came free: waiting off, its queue full, or the wait timed out. retry-after-ms and Retry-After say when a slot is likely (jittered).",
  },
  admission_store_unavailable: {
    status: 503,
    meaning: 'the admission store (Redis) failed or timed out; bounded channels fail closed. Retry-After: 1.',
  },
  lease_lost: {
    status: 503,
    meaning:
      "the request's slot was lost (Redis lost it and the channel was full, or no renewal was confirmed before it expired): the upstream call was ended to keep the channel's max. Retry-After: 1.",
  },
  model_not_found: { status: 404, meaning: "no enabled channel serves this model for the token's group" },
  wrong_api_type: {
    status: 400,
    meaning:
      "the model is served for the token's group only by channels of the other API: OpenAI routes need openai channels, /v1/messages anthropic ones (mock serves both)",
  },
  invalid_api_key: {
    status: 401,
    meaning: 'the Authorization bearer token (or x-api-key) is missing or unknown',
  },
  invalid_request_error: {
    status: 400,
    meaning: 'the body is not valid JSON, is not an object, or has no string `model`',
  },
  request_too_large: {
    status: 413,
    meaning: 'the body is larger than server.body_limit_bytes, or the headers are larger than 16 KiB',
  },
  request_timeout: {
    status: 408,
    meaning:
      'the request headers did not arrive within server.headers_timeout_ms, or the whole request within server.request_timeout_ms; the connection is closed',
  },
  invalid_settings: {
    status: 400,
    meaning:
      'an admin settings update was rejected whole (unknown key, wrong type or out of range); nothing changed',
  },
  not_found: { status: 404, meaning: 'no such route, or no such channel on an admin route' },
  unauthorized_admin: {
    status: 401,
    meaning: 'an admin route was called without the admin token (or no admin token is configured)',
  },
  upstream_unreachable: {
    status: 502,
    meaning:
      'every channel tried failed before answering (connection error or time-out); no upstream status to pass on',
  },
  upstream_timeout: {
    status: 504,
    meaning: 'the upstream did not send its response headers within timeouts.first_byte_ms',
  },
  shutting_down: {
    status: 503,
    meaning:
      'this instance is shutting down: a request still waiting for a slot when its drain delay ended, or one that arrived after, is answered so that its client retries on another instance. Retry-After: 1, x-should-retry: true.',
  },
  not_ready: {
    status: 503,
    meaning:
      'GET /readyz: this instance should get no traffic now (its admission store does not answer); the message says why',
  },
  internal_error: { status: 500, meaning: 'an unexpected error in the gateway (logged with the request id)' },
} as const satisfies Record<string, Pick<ErrorSpec, 'status' | 'meaning'>>;

export type GatewayErrorCode = keyof typeof ERRORS;

export const GATEWAY_ERRORS = Object.fromEntries(
  Object.entries(ERRORS).map(([code, { status, meaning }]) => [
    code,
    { status, ...typesOf(status), meaning },
  ]),
) as Record<GatewayErrorCode, ErrorSpec>;

/** Longest piece of client input an error message echoes. */
export const ECHO_MAX_CHARS = 200;
/** Longest error message an answer carries; a longer one keeps its beginning and its end. */
export const MESSAGE_MAX_CHARS = 1000;

/** Client input as an error message shows it: as JSON (quoted, control characters escaped), cut to ECHO_MAX_CHARS. */
export function echo(input: unknown): string {
  const text = JSON.stringify(input) ?? String(input);
  if (text.length <= ECHO_MAX_CHARS) return text;
  return `${text.slice(0, ECHO_MAX_CHARS)}… (${text.length} characters)`;
}

/** Cuts the middle out of a message longer than MESSAGE_MAX_CHARS, saying how much went. */
function bounded(message: string): string {
  if (message.length <= MESSAGE_MAX_CHARS) return message;
  const head = Math.floor(MESSAGE_MAX_CHARS * 0.7);
  const tail = MESSAGE_MAX_CHARS - head;
  return `${message.slice(0, head)} …(${message.length - head - tail} characters cut)… ${message.slice(-tail)}`;
}

export class HttpError extends Error {
  /** `message` may quote client input: it is bounded to MESSAGE_MAX_CHARS here, whoever built it. */
  constructor(
    readonly code: GatewayErrorCode,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(bounded(message));
    this.name = 'HttpError';
  }

  get status(): number {
    return GATEWAY_ERRORS[this.code].status;
  }
}

/**
 * A capacity 429's retry hint: `retry-after-ms` (whole ms, which the openai and Anthropic SDKs honour before
 * Retry-After) and `Retry-After` in whole seconds, rounded up, at least 1.
 */
export function retryHeaders(retryAfterMs: number): Record<string, string> {
  const ms = Number.isFinite(retryAfterMs) && retryAfterMs > 0 ? Math.ceil(retryAfterMs) : 1000;
  return { 'retry-after-ms': String(ms), 'retry-after': String(Math.max(1, Math.ceil(ms / 1000))) };
}

/** Maps any error to the HTTP error the client sees. Messages of unknown errors are not echoed. */
export function toHttpError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  if (err instanceof CapacityError || err instanceof ClientLimitError) {
    const code = err instanceof CapacityError ? 'channel_capacity_exhausted' : 'client_concurrency_exceeded';
    return new HttpError(
      code,
      `slotgate: ${err.message} [reason: ${err.reason}]`,
      retryHeaders(err.retryAfterMs),
    );
  }
  if (err instanceof StoreUnavailableError) {
    return new HttpError(
      'admission_store_unavailable',
      'slotgate: the admission store is unavailable, so bounded channels cannot be admitted; retry shortly',
      { 'retry-after': '1' },
    );
  }
  if (err instanceof LeaseLostError) {
    return new HttpError('lease_lost', `slotgate: ${err.message}; the upstream call was ended, retry`, {
      'retry-after': '1',
    });
  }
  if (err instanceof NoChannelError) return new HttpError('model_not_found', err.message);
  if (err instanceof SettingsError) return new HttpError('invalid_settings', err.message);
  return new HttpError('internal_error', 'slotgate: internal error');
}

export function errorBody(err: HttpError, shape: ApiShape): unknown {
  const spec = GATEWAY_ERRORS[err.code];
  if (shape === 'anthropic')
    return { type: 'error', error: { type: spec.anthropicType, message: err.message } };
  return { error: { message: err.message, type: spec.type, code: err.code } };
}
