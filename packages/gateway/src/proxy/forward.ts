/**
 * The client API's request path: authenticate, pick candidates for (group, model), admit through slotgate, forward
 * the body as-is, pass the answer through as it arrives, and give the slot back exactly once when the response has
 * fully ended, the client went away, or it failed. Retries on another channel before any byte reached the client.
 */
import { PassThrough, finished, type Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { CapacityError, NoChannelError, type Admission, type Ticket } from 'slotgate';
import type { GatewaySettings } from '../settings.js';
import type { ChannelRegistry, GatewayChannel } from '../channels.js';
import type { GatewayConfig } from '../config.js';
import { HttpError, errorBody, toHttpError, type ApiShape } from '../http-errors.js';
import { logsAt, newAccessRecord } from '../logging.js';
import type { RetryReason, UpstreamMetrics } from '../metrics.js';
import {
  UpstreamConnectError,
  UpstreamTimeoutError,
  type UpstreamClient,
  type UpstreamResponse,
} from '../upstream.js';
import { DEFAULT_MOCK, mockRespond } from './mock.js';
import { cooldownDecision } from './rate-limit.js';
import { parseBody, presentedToken, routeCandidates, shapeOf } from './request.js';

export interface ProxyContext {
  admission: Admission;
  registry: () => ChannelRegistry;
  config: () => GatewayConfig;
  upstream: UpstreamClient;
  settings: () => GatewaySettings;
  /** Per-channel upstream answers, latencies, retries and cooldowns. */
  metrics: UpstreamMetrics;
  onResult?: (result: ProxyResult) => void;
}

export interface ProxyResult {
  channel: string | undefined;
  status: number;
  attempts: number;
  waitedMs: number;
  /** 'upstream' when the status came from an upstream, 'gateway' when slotgate answered itself. */
  source: 'upstream' | 'gateway';
}

/** An upstream error answer, read whole so it can be inspected and passed on after the retries. */
interface BufferedAnswer {
  /** The channel that gave it. */
  channel: string;
  status: number;
  headers: UpstreamResponse['headers'];
  body: Buffer;
}

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length',
  'content-encoding',
]);
const ERROR_BODY_CAP = 1024 * 1024;

async function readCapped(stream: NodeJS.ReadableStream, cap: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of stream as AsyncIterable<Buffer | string>) {
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    if (size + buf.length > cap) {
      chunks.push(buf.subarray(0, cap - size));
      (stream as unknown as { destroy?: () => void }).destroy?.();
      break;
    }
    chunks.push(buf);
    size += buf.length;
  }
  return Buffer.concat(chunks);
}

export async function proxyRequest(
  ctx: ProxyContext,
  request: FastifyRequest,
  reply: FastifyReply,
  path: string,
): Promise<void> {
  const shape = shapeOf(path);
  const access = (request.access = newAccessRecord());
  const registry = ctx.registry();
  const key = presentedToken(request, shape);
  const token = registry.authenticate(key);
  if (!token) throw new HttpError('invalid_api_key', 'missing or invalid API key');
  access.token = token.name;
  const { body, json } = parseBody(request.body);
  const model = json.model as string;
  access.model = model;
  const candidates = routeCandidates(registry, token.group, model, shape, path);

  // One signal per request ends waiting and the upstream call: the client going away, or the slot of the attempt in
  // flight being lost (fencing: past that point another request may hold the slot, and the channel's max holds only
  // if this call stops). A lost slot ends the request, so no later attempt needs a fresh signal. (One controller:
  // each AbortSignal costs microseconds to create, measurable per request in bench:proxy.)
  const stop = new AbortController();
  let clientGone = false;
  const onClose = () => {
    if (reply.raw.writableFinished) return;
    clientGone = true;
    stop.abort();
  };
  reply.raw.on('close', onClose);
  const onLost = () => stop.abort();

  const config = ctx.config();
  // The channels serving the request under the configuration in force: a retry, and a wait, follow a reload.
  const inForce = () => ctx.registry().candidates(token.group, model, shape);
  const tried = new Set<string>();
  let attempts = 0;
  let lastUpstream: BufferedAnswer | HttpError | undefined;
  let waitedMs = 0;
  // counted once the retry's upstream call starts, so the metric agrees with the access line's `retries`
  let retry: { channel: string; reason: RetryReason } | undefined;
  for (;;) {
    const settings = ctx.settings();
    let ticket: Ticket<GatewayChannel>;
    try {
      ticket = await ctx.admission.acquire({
        candidates: attempts === 0 ? candidates : inForce(),
        resolve: inForce,
        signal: stop.signal,
        exclude: tried,
        client: token.client,
        // a reload may change the client's limit while the request waits for one of its slots
        resolveClient: () => ctx.registry().authenticate(key)?.client,
        // a first attempt stands in the queues as of when the request reached this gateway; a retry, as of now
        ...(attempts === 0 ? { arrivedMsAgo: reply.elapsedTime } : {}),
      });
    } catch (err) {
      request.log.debug({ err: (err as Error).message, attempt: attempts + 1 }, 'admission refused');
      // The client learns more from the upstream's own error than from "no capacity left to retry on".
      if (lastUpstream && (err instanceof CapacityError || err instanceof NoChannelError)) {
        return sendLast(reply, lastUpstream, shape, ctx, tried, attempts, waitedMs);
      }
      throw err;
    }
    waitedMs += ticket.waitedMs;
    const channel = ticket.channel;
    tried.add(channel.id);
    attempts++;
    access.waitMs = waitedMs;
    access.channel = channel.id;
    access.attempts = attempts;
    // (every way back to the top of the loop sets `retry`)
    if (retry) ctx.metrics.retried(retry.channel, retry.reason);
    if (logsAt(request, 'debug')) {
      request.log.debug(
        { channel: channel.id, wait_ms: Math.round(ticket.waitedMs), attempt: attempts },
        ticket.waitedMs > 0 ? 'admitted after waiting' : 'admitted',
      );
    }
    let released = false;
    // A ticket can be lost when it holds a lease: a bounded channel's, or a limited client's. (Linked by hand:
    // AbortSignal.any costs a weak reference and a finalizer per request, and a ticket's `lost` can outlive the
    // request through a handoff, so its listener goes at the release.)
    const fencedTicket = ticket.token !== undefined || (token.client.maxConcurrency ?? 0) > 0;
    if (fencedTicket) ticket.lost.addEventListener('abort', onLost, { once: true });
    const release = () => {
      if (released) return;
      released = true;
      if (fencedTicket) ticket.lost.removeEventListener('abort', onLost);
      // An upstream call aborted mid-flight may still be running at the upstream for a moment: its slot goes back
      // through Redis instead of straight to the next request of this gateway.
      void ticket.release({ handoff: !stop.signal.aborted });
    };

    let res: UpstreamResponse;
    const callStarted = performance.now();
    const elapsedSeconds = () => (performance.now() - callStarted) / 1000;
    try {
      res = await callChannel(ctx, channel, path, shape, body, json, request, stop.signal);
    } catch (err) {
      release();
      if (clientGone) return; // nothing to answer
      if (ticket.lost.aborted) throw lostSlot(request, channel, ticket.lost);
      ctx.metrics.upstreamAnswered(channel.id, 'error');
      if (err instanceof UpstreamTimeoutError) throw new HttpError('upstream_timeout', err.message);
      if (err instanceof UpstreamConnectError) {
        // A real upstream answer seen earlier in the chain beats slotgate's own 502 (its status is passed on).
        if (!lastUpstream || lastUpstream instanceof HttpError) {
          lastUpstream = new HttpError('upstream_unreachable', `slotgate: ${err.message}`);
        }
        request.log.warn({ channel: channel.id, err: err.message }, 'upstream unreachable');
        if (attempts <= settings.retry_times) {
          retry = { channel: channel.id, reason: 'unreachable' };
          continue;
        }
        return sendLast(reply, lastUpstream, shape, ctx, tried, attempts, waitedMs);
      }
      throw err;
    }
    ctx.metrics.upstreamAnswered(channel.id, res.status, elapsedSeconds());
    access.upstreamStatus = res.status;

    if (res.status >= 400) {
      let answer: BufferedAnswer;
      try {
        answer = {
          channel: channel.id,
          status: res.status,
          headers: res.headers,
          body: await readCapped(res.body, ERROR_BODY_CAP),
        };
      } catch (err) {
        release();
        if (clientGone) return;
        if (ticket.lost.aborted) throw lostSlot(request, channel, ticket.lost);
        throw err;
      }
      release();
      ctx.metrics.upstreamEnded(channel.id, elapsedSeconds());
      await noteRateLimit(ctx, channel, answer, settings, config, request);
      const retryable = res.status === 429 || (res.status >= 500 && res.status !== 504);
      lastUpstream = answer;
      // (not once the request's signal has fired: the client left, or the slot was lost before it was released)
      if (retryable && attempts <= settings.retry_times && !stop.signal.aborted) {
        retry = { channel: channel.id, reason: res.status === 429 ? 'upstream_429' : 'upstream_5xx' };
        request.log.info(
          { channel: channel.id, status: res.status, attempt: attempts },
          'retrying on another channel',
        );
        continue;
      }
      return sendLast(reply, answer, shape, ctx, tried, attempts, waitedMs);
    }

    // Success: stream it through; the slot is held until the body has fully ended or the client left. A slot lost
    // mid-stream ends the stream with an error event (SSE) or cuts it (any other body).
    // Any other body is cut by the upstream call's own signal; an event stream ends with an error event.
    const eventStream = String(res.headers['content-type'] ?? '').startsWith('text/event-stream');
    const streamed =
      !fencedTicket || !eventStream
        ? res.body
        : fenced(res.body, ticket.lost, shape, () =>
            request.log.warn({ channel: channel.id }, 'slot lost mid-stream: the upstream call was ended'),
          );
    // the upstream call ends with its body: a body cut short (the client left, the upstream broke) is not timed
    const ended = (err?: Error | null) => {
      if (!err) ctx.metrics.upstreamEnded(channel.id, elapsedSeconds());
    };
    finished(streamed, (err) => {
      release();
      if (streamed === res.body) ended(err);
    });
    if (streamed !== res.body) finished(res.body, ended);
    reply.raw.once('close', release);
    reply.code(res.status);
    copyHeaders(reply, res.headers);
    reply.header('x-slotgate-channel', channel.id);
    if (waitedMs > 0) reply.header('x-slotgate-waited-ms', String(Math.round(waitedMs)));
    ctx.onResult?.({ channel: channel.id, status: res.status, attempts, waitedMs, source: 'upstream' });
    return reply.send(streamed);
  }
}

/** The error a request gets when its slot was lost before the first byte reached the client (logged). */
function lostSlot(request: FastifyRequest, channel: GatewayChannel, lost: AbortSignal): HttpError {
  request.log.warn({ channel: channel.id }, 'slot lost before the answer: the upstream call was ended');
  return toHttpError(lost.reason);
}

/**
 * An event stream as the client gets it: when the ticket's slot is lost mid-stream, the upstream call is already
 * aborted (its signal), and the stream ends with one error event in the API's own shape.
 */
function fenced(body: Readable, lost: AbortSignal, shape: ApiShape, onLost: () => void): Readable {
  const out = new PassThrough();
  body.on('error', (err) => {
    if (!lost.aborted) out.destroy(err);
  });
  body.pipe(out);
  // A client that leaves destroys `out`: the upstream body goes with it, as when it was sent as it is.
  out.once('close', () => body.destroy());
  const end = () => {
    onLost();
    body.unpipe(out);
    body.destroy();
    const error = errorBody(toHttpError(lost.reason), shape);
    const event = shape === 'anthropic' ? 'event: error\n' : '';
    out.end(`${event}data: ${JSON.stringify(error)}\n\n`);
  };
  if (lost.aborted) end();
  else lost.addEventListener('abort', end, { once: true });
  finished(out, () => lost.removeEventListener('abort', end));
  return out;
}

async function callChannel(
  ctx: ProxyContext,
  channel: GatewayChannel,
  path: string,
  shape: ApiShape,
  body: Buffer,
  json: Record<string, unknown>,
  request: FastifyRequest,
  signal: AbortSignal,
): Promise<UpstreamResponse> {
  if (channel.config.type === 'mock') {
    return mockRespond(channel.config.mock ?? DEFAULT_MOCK, {
      channelId: channel.id,
      path,
      shape,
      body: json,
      signal,
    });
  }
  return ctx.upstream.call({ channel, path, body, shape, clientHeaders: request.headers, signal });
}

async function noteRateLimit(
  ctx: ProxyContext,
  channel: GatewayChannel,
  answer: BufferedAnswer,
  settings: GatewaySettings,
  config: GatewayConfig,
  request: FastifyRequest,
): Promise<void> {
  const decision = cooldownDecision(
    { status: answer.status, headers: answer.headers, text: answer.body.toString('utf8') },
    settings,
    config.retry,
  );
  if (decision.kind === 'quota') {
    request.log.warn({ channel: channel.id }, 'upstream 429 says quota/balance is exhausted: no cooldown');
  }
  if (decision.kind !== 'cooldown') return;
  const { seconds, reason } = decision;
  try {
    await ctx.admission.cooldown(channel, { ms: seconds * 1000, reason });
    ctx.metrics.cooldownStarted(channel.id, decision.cause);
    request.log.warn({ channel: channel.id, seconds, reason }, 'channel cooling down');
  } catch (err) {
    request.log.error({ channel: channel.id, err: (err as Error).message }, 'could not store the cooldown');
  }
}

function copyHeaders(reply: FastifyReply, headers: UpstreamResponse['headers']): void {
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name.toLowerCase()) || name.toLowerCase() === 'set-cookie')
      continue;
    reply.header(name, value);
  }
}

function sendLast(
  reply: FastifyReply,
  last: BufferedAnswer | HttpError,
  shape: ApiShape,
  ctx: ProxyContext,
  tried: ReadonlySet<string>,
  attempts: number,
  waitedMs: number,
): FastifyReply {
  const channel = last instanceof HttpError ? [...tried].at(-1) : last.channel;
  const access = reply.request.access;
  if (access) {
    access.channel = channel;
    if (last instanceof HttpError) access.error = last.code;
    else access.upstreamStatus = last.status;
  }
  if (last instanceof HttpError) {
    ctx.onResult?.({ channel, status: last.status, attempts, waitedMs, source: 'gateway' });
    return reply.code(last.status).headers(last.headers).send(errorBody(last, shape));
  }
  ctx.onResult?.({ channel, status: last.status, attempts, waitedMs, source: 'upstream' });
  reply.code(last.status);
  copyHeaders(reply, last.headers);
  if (channel) reply.header('x-slotgate-channel', channel);
  return reply.send(last.body);
}
