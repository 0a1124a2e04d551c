/**
 * The gateway's logs: the pino options (JSON lines, or pino-pretty's when stdout is a terminal) and the one access line
 * each request gets when its response has ended or the client left, instead of Fastify's two. docs/operations.md lists
 * the fields.
 */
import { writeSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Writable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { pino, type Logger } from 'pino';
import { CapacityError } from 'slotgate';
import type { GatewayConfig } from './config-schema.js';

/** What the proxy learnt about a client API request, filled in as it goes; written out by the access line. */
export interface AccessRecord {
  /** The client token's configured name (never its key). */
  token?: string;
  model?: string;
  /** The channel whose answer the client got (the last one tried when slotgate answered itself). */
  channel?: string;
  /** Time spent waiting for admission, summed over the attempts. */
  waitMs: number;
  /** The status of the upstream answer passed on, or of the last one seen. */
  upstreamStatus?: number;
  /** The channel's adaptive limit when the request waited while it was below the channel's max. */
  adaptiveLimit?: number;
  /** Upstream calls made (0 when the request was refused before any). */
  attempts: number;
  /** slotgate's own error code when it answered itself (e.g. `channel_capacity_exhausted`). */
  error?: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the proxy for client API requests, and by slotgate's own error answers; null otherwise. */
    access: AccessRecord | null;
  }
}

export const newAccessRecord = (): AccessRecord => ({ waitMs: 0, attempts: 0 });

export type LogFormat = GatewayConfig['server']['log_format'];

const REDACT = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'headers.authorization',
  'headers["x-api-key"]',
];

/** `auto`: pretty on a terminal, JSON otherwise (a pipe, a file, a container's log collector). */
export function prettyLogs(format: LogFormat, isTTY = process.stdout.isTTY === true): boolean {
  return format === 'pretty' || (format === 'auto' && isTTY);
}

type Prettifier = (line: string) => string;

/** An access line on a terminal, on one line: `POST /v1/chat/completions 200 2310 ms gpt-4o → openai-main ok …`. */
function accessSummary(log: Record<string, unknown>): string {
  const parts = [
    `${String(log.method)} ${String(log.path)} ${String(log.status)} ${String(log.duration_ms)} ms`,
  ];
  if ('model' in log) {
    parts.push(`${String(log.model ?? '-')} → ${String(log.channel ?? '-')}`);
    if (Number(log.wait_ms) > 0) parts.push(`wait ${String(log.wait_ms)} ms`);
    if (typeof log.adaptive_limit === 'number') parts.push(`adaptive limit ${log.adaptive_limit}`);
    if (Number(log.retries) > 0) parts.push(`retries ${String(log.retries)}`);
    if (typeof log.upstream_status === 'number' && log.upstream_status !== log.status)
      parts.push(`upstream ${String(log.upstream_status)}`);
  }
  parts.push(String(log.outcome));
  if (log.token) parts.push(`token=${String(log.token)}`);
  if (log.reqId !== undefined) parts.push(`[${String(log.reqId)}]`);
  // the model and path are the client's: no control character of theirs reaches the terminal
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  return parts.join(' ').replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
}

/**
 * pino-pretty's formatting, written synchronously to stdout so the lines written right before process.exit are not
 * lost. Loaded only when used: JSON output never needs it.
 */
export function prettyStream(out: (text: string) => void = (text) => writeSync(1, text)): Writable {
  const require = createRequire(import.meta.url);
  const { prettyFactory } = require('pino-pretty') as {
    prettyFactory: (options: Record<string, unknown>) => Prettifier;
  };
  const options = { translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' };
  const pretty = prettyFactory(options);
  const access = prettyFactory({ ...options, hideObject: true, messageFormat: accessSummary });
  return new Writable({
    write(chunk: Buffer | string, _encoding, callback) {
      const line = chunk.toString();
      out((line.includes('"msg":"access"') ? access : pretty)(line));
      callback();
    },
  });
}

/**
 * Fastify's `logger` option: false for none; otherwise the configured level, credential headers redacted, pino-pretty
 * when the format asks for it; the caller's own pino options (`given`) win.
 */
export function loggerOptions(
  server: Pick<GatewayConfig['server'], 'log_level' | 'log_format'>,
  given: boolean | Record<string, unknown> | undefined,
): false | Record<string, unknown> {
  if (given === false) return false;
  const options = typeof given === 'object' ? given : {};
  // JSON lines go to stdout synchronously too: pino's asynchronous default can lose the line before process.exit
  const stream =
    options.stream !== undefined
      ? undefined
      : prettyLogs(server.log_format)
        ? prettyStream()
        : pino.destination({ dest: 1, sync: true });
  return {
    level: server.log_level,
    redact: { paths: REDACT, censor: '[redacted]' },
    ...(stream ? { stream } : {}),
    ...options,
  };
}

/** Longest model name and path an access line carries (the client chooses them). */
const CLIENT_TEXT_MAX_CHARS = 200;

/** Client API routes and admin writes log at info; the dashboard's polling, /metrics and the probes at debug. */
function accessLevel(request: FastifyRequest): 'info' | 'debug' {
  if (request.url.startsWith('/v1/')) return 'info';
  return request.method === 'GET' || request.method === 'HEAD' ? 'debug' : 'info';
}

/** `client_closed`, slotgate's own error code, `upstream_error` (an upstream error passed on), `error` or `ok`. */
function outcomeOf(a: AccessRecord | null, reply: FastifyReply): string {
  if (!reply.raw.writableEnded) return 'client_closed';
  if (a?.error) return a.error;
  if (a?.upstreamStatus !== undefined && a.upstreamStatus >= 400) return 'upstream_error';
  return reply.statusCode >= 400 ? 'error' : 'ok';
}

/** Whether the request's logger writes `level`: a line it would drop need not be built. */
export function logsAt(request: FastifyRequest, level: 'info' | 'debug'): boolean {
  // Fastify's type leaves pino's isLevelEnabled out; its no-op logger (logging off) has none
  const log = request.log as unknown as Partial<Logger>;
  return typeof log.isLevelEnabled === 'function' && log.isLevelEnabled(level);
}

/** The request's access line; a client API request's carries every field, null where it does not apply. */
export function logAccess(request: FastifyRequest, reply: FastifyReply): void {
  const level = accessLevel(request);
  if (!logsAt(request, level)) return;
  const a = request.access;
  const line: Record<string, unknown> = {
    method: request.method,
    path: request.url.split('?', 1)[0]!.slice(0, CLIENT_TEXT_MAX_CHARS),
    status: reply.statusCode,
  };
  if (request.url.startsWith('/v1/')) {
    line.token = a?.token ?? null;
    line.model = a?.model === undefined ? null : a.model.slice(0, CLIENT_TEXT_MAX_CHARS);
    line.channel = a?.channel ?? null;
    line.wait_ms = Math.round(a?.waitMs ?? 0);
    line.upstream_status = a?.upstreamStatus ?? null;
    if (a?.adaptiveLimit !== undefined) line.adaptive_limit = a.adaptiveLimit;
    line.retries = Math.max(0, (a?.attempts ?? 0) - 1);
  }
  line.duration_ms = Math.round(reply.elapsedTime);
  line.outcome = outcomeOf(a, reply);
  request.log[level](line, 'access');
}

/** Records slotgate's own error answer for the access line: its code, or for a capacity 429 the outcome (`capacity_full`, …). */
export function noteError(request: FastifyRequest, code: string, cause?: unknown): void {
  (request.access ??= newAccessRecord()).error =
    cause instanceof CapacityError ? `capacity_${cause.reason}` : code;
}
