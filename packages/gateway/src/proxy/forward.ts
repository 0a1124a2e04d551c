/**
 * The client API's request path: admit through slotgate, send the body as-is to the admitted channel, and stream the
 * answer back, or retry on another channel while no byte has reached the client.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { HttpError, toHttpError } from '../http-errors.js';
import type { GatewaySettings } from '../settings.js';
import { UpstreamConnectError, UpstreamTimeoutError, type UpstreamResponse } from '../upstream.js';
import { admit, type Slot } from './admit.js';
import type { ProxyContext } from './context.js';
import { DEFAULT_MOCK, mockRespond } from './mock.js';
import { capacitySignal } from './rate-limit.js';
import { openRequest, type ProxiedRequest } from './request.js';
import { sendLast, streamBack } from './respond.js';

const ERROR_BODY_CAP = 1024 * 1024;

export async function proxyRequest(
  ctx: ProxyContext,
  request: FastifyRequest,
  reply: FastifyReply,
  path: string,
): Promise<void> {
  const req = openRequest(ctx, request, reply, path);
  for (;;) {
    const settings = ctx.settings();
    const slot = await admit(req);
    if (slot === 'give up') return sendLast(req);
    const outcome = await attempt(req, slot, settings);
    if (outcome === 'gone') return;
    if (outcome === 'give up') return sendLast(req);
    if (outcome !== 'retry') return streamBack(req, slot, outcome.res, outcome.elapsed);
  }
}

type Outcome = 'retry' | 'give up' | 'gone' | { res: UpstreamResponse; elapsed: () => number };

/** One upstream call on an admitted slot: a success to stream back, or what the chain does next. */
async function attempt(req: ProxiedRequest, slot: Slot, settings: GatewaySettings): Promise<Outcome> {
  const { ctx, chain } = req;
  const { channel } = slot;
  const started = performance.now();
  const elapsed = () => (performance.now() - started) / 1000;
  let res: UpstreamResponse;
  try {
    res = await callChannel(req, slot);
  } catch (err) {
    // no answer in time, or none at all: the channel may be past what its upstream takes
    if (err instanceof UpstreamConnectError || err instanceof UpstreamTimeoutError)
      slot.upstream = { kind: 'overloaded' };
    if (failed(req, slot)) return 'gone';
    const message = unreachable(req, channel.id, err);
    return chain.unreachable(channel.id, message, settings) ? 'retry' : 'give up';
  }
  ctx.metrics.upstreamAnswered(channel.id, res.status, elapsed());
  req.access.upstreamStatus = res.status;
  const firstByteMs = elapsed() * 1000;
  if (res.status < 400) {
    slot.upstream = capacitySignal(res, firstByteMs, ctx.config().retry);
    return { res, elapsed };
  }

  let body: Buffer;
  try {
    body = await readCapped(res.body, ERROR_BODY_CAP);
  } catch (err) {
    if (failed(req, slot)) return 'gone';
    throw err;
  }
  slot.upstream = capacitySignal({ ...res, text: body.toString('utf8') }, firstByteMs, ctx.config().retry);
  slot.release();
  ctx.metrics.upstreamEnded(channel.id, elapsed());
  const answer = { channel: channel.id, status: res.status, headers: res.headers, body };
  if (!(await chain.answered(channel, answer, settings, req.stop.signal))) return 'give up';
  const retrying = { channel: channel.id, status: res.status, attempt: chain.attempts };
  req.request.log.info(retrying, 'retrying on another channel');
  return 'retry';
}

/** A failed attempt's slot goes back; true when the client left (nothing to answer). A lost slot is the error. */
function failed(req: ProxiedRequest, slot: Slot): boolean {
  slot.release();
  if (req.clientGone) return true;
  if (!slot.ticket.lost.aborted) return false;
  req.request.log.warn(
    { channel: slot.channel.id },
    'slot lost before the answer: the upstream call was ended',
  );
  throw toHttpError(slot.ticket.lost.reason);
}

/** A call that got no answer: an unreachable upstream's message (another channel may be tried); else it throws. */
export function unreachable(req: ProxiedRequest, channelId: string, err: unknown): string {
  req.ctx.metrics.upstreamAnswered(channelId, 'error');
  if (err instanceof UpstreamTimeoutError) throw new HttpError('upstream_timeout', err.message);
  if (!(err instanceof UpstreamConnectError)) throw err;
  req.request.log.warn({ channel: channelId, err: err.message }, 'upstream unreachable');
  return err.message;
}

export function callChannel(
  req: ProxiedRequest,
  { channel }: Pick<Slot, 'channel'>,
): Promise<UpstreamResponse> {
  const { path, shape, stop } = req;
  if (channel.config.type === 'mock') {
    const mock = channel.config.mock ?? DEFAULT_MOCK;
    return mockRespond(mock, { channelId: channel.id, path, shape, body: req.json, signal: stop.signal });
  }
  const clientHeaders = req.request.headers;
  return req.ctx.upstream.call({ channel, path, body: req.body, clientHeaders, signal: stop.signal });
}

/** At most `cap` bytes of a body; the rest is not read (the stream is destroyed). */
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
