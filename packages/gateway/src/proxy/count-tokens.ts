/**
 * POST /v1/messages/count_tokens (Anthropic `messages.countTokens`): authenticated and routed like /v1/messages, but
 * it generates nothing, so it takes no slot and never waits. The body goes as-is, with the channel's credentials, to
 * the anthropic channels serving the model, highest priority first, the next one only when a channel cannot be
 * reached; the answer (success or error) is passed on. A mock channel answers `{ "input_tokens": N }` itself.
 */
import { finished } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from '../http-errors.js';
import type { UpstreamResponse } from '../upstream.js';
import type { ProxyContext } from './context.js';
import { callChannel, unreachable } from './forward.js';
import { COUNT_TOKENS_PATH } from './mock.js';
import { openRequest } from './request.js';
import { sendUpstream } from './respond.js';

export { COUNT_TOKENS_PATH };

export async function countTokens(
  ctx: ProxyContext,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply | undefined> {
  const req = openRequest(ctx, request, reply, COUNT_TOKENS_PATH);
  const channels = req.candidates
    .map((channel, order) => ({ channel, order }))
    .sort((a, b) => b.channel.priority - a.channel.priority || a.order - b.order)
    .map(({ channel }) => channel);
  let lastError: HttpError | undefined;
  for (const channel of channels) {
    req.chain.admitted(channel.id, 0);
    Object.assign(req.access, { channel: channel.id, attempts: req.chain.attempts });
    const started = performance.now();
    const elapsed = () => (performance.now() - started) / 1000;
    let res: UpstreamResponse;
    try {
      res = await callChannel(req, { channel });
    } catch (err) {
      if (req.clientGone) return undefined; // nothing to answer
      lastError = new HttpError('upstream_unreachable', `slotgate: ${unreachable(req, channel.id, err)}`);
      continue;
    }
    ctx.metrics.upstreamAnswered(channel.id, res.status, elapsed());
    req.access.upstreamStatus = res.status;
    finished(res.body, (err) => {
      if (!err) ctx.metrics.upstreamEnded(channel.id, elapsed());
    });
    return sendUpstream(req, channel.id, res);
  }
  throw lastError!;
}
