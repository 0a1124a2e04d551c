/**
 * The answer the client gets: a success streamed through as it arrives, its slot held until the body has ended or the
 * client left; or, when the chain gave up, its last upstream error answer (or slotgate's own error).
 */
import { PassThrough, finished, type Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';
import { HttpError, errorBody, toHttpError, type ApiShape } from '../http-errors.js';
import type { UpstreamResponse } from '../upstream.js';
import type { Slot } from './admit.js';
import type { ProxiedRequest } from './request.js';

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
  'set-cookie',
]);

export function copyHeaders(reply: FastifyReply, headers: UpstreamResponse['headers']): void {
  for (const [name, value] of Object.entries(headers))
    if (value !== undefined && !HOP_BY_HOP.has(name.toLowerCase())) reply.header(name, value);
}

/** Streams a success through; `elapsed` times the upstream call, which ends with its body. */
export function streamBack(
  req: ProxiedRequest,
  slot: Slot,
  res: UpstreamResponse,
  elapsed: () => number,
): FastifyReply {
  const { ctx } = req;
  const channel = slot.channel.id;
  // A slot lost mid-stream cuts the body (the upstream call's signal ends it); an event stream ends with an error event.
  const eventStream = String(res.headers['content-type'] ?? '').startsWith('text/event-stream');
  const streamed =
    !slot.fenced || !eventStream
      ? res.body
      : fenced(res.body, slot.ticket.lost, req.shape, () =>
          req.request.log.warn({ channel }, 'slot lost mid-stream: the upstream call was ended'),
        );
  // a body cut short (the client left, the upstream broke) is not timed
  const ended = (err?: Error | null) => {
    if (!err) ctx.metrics.upstreamEnded(channel, elapsed());
  };
  finished(streamed, (err) => {
    slot.release();
    if (streamed === res.body) ended(err);
  });
  if (streamed !== res.body) finished(res.body, ended);
  req.reply.raw.once('close', slot.release);
  return sendUpstream(req, channel, res, streamed);
}

/** An upstream answer as the client gets it: its status and headers, and `body` (the answer's, or a fenced copy). */
export function sendUpstream(
  req: ProxiedRequest,
  channel: string,
  res: UpstreamResponse,
  body: Readable = res.body,
): FastifyReply {
  const { ctx, chain, reply } = req;
  reply.code(res.status);
  copyHeaders(reply, res.headers);
  reply.header('x-slotgate-channel', channel);
  const { attempts, waitedMs } = chain;
  if (waitedMs > 0) reply.header('x-slotgate-waited-ms', String(Math.round(waitedMs)));
  ctx.onResult?.({ channel, status: res.status, attempts, waitedMs, source: 'upstream' });
  return reply.send(body);
}

/** The event stream as the client gets it: once the slot is lost, one error event in the API's own shape ends it. */
function fenced(body: Readable, lost: AbortSignal, shape: ApiShape, onLost: () => void): Readable {
  const out = new PassThrough();
  body.on('error', (err) => {
    if (!lost.aborted) out.destroy(err);
  });
  body.pipe(out);
  // a client that leaves destroys `out`: the upstream body goes with it
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

/** The chain's last answer, as the client gets it. */
export function sendLast(req: ProxiedRequest): FastifyReply {
  const { ctx, chain, reply, access } = req;
  const last = chain.last!;
  const channel = last instanceof HttpError ? [...chain.tried].at(-1) : last.channel;
  const result = { channel, status: last.status, attempts: chain.attempts, waitedMs: chain.waitedMs };
  access.channel = channel;
  if (last instanceof HttpError) {
    access.error = last.code;
    ctx.onResult?.({ ...result, source: 'gateway' });
    return reply.code(last.status).headers(last.headers).send(errorBody(last, req.shape));
  }
  access.upstreamStatus = last.status;
  ctx.onResult?.({ ...result, source: 'upstream' });
  reply.code(last.status);
  copyHeaders(reply, last.headers);
  if (channel) reply.header('x-slotgate-channel', channel);
  return reply.send(last.body);
}
