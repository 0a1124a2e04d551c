/**
 * POST /v1/messages/count_tokens (Anthropic `messages.countTokens`): authenticated and routed like /v1/messages, but
 * it generates nothing, so it takes no slot and never waits. The body goes as-is, with the channel's credentials, to
 * the anthropic channels serving the model, highest priority first, the next one only when a channel cannot be
 * reached; the answer (success or error) is passed on. A mock channel answers `{ "input_tokens": N }` itself.
 */
import { finished } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { HttpError } from '../http-errors.js';
import { newAccessRecord } from '../logging.js';
import { UpstreamConnectError, UpstreamTimeoutError, type UpstreamResponse } from '../upstream.js';
import type { GatewayChannel } from '../channels.js';
import type { ProxyContext } from './context.js';
import { COUNT_TOKENS_PATH, DEFAULT_MOCK, mockRespond } from './mock.js';
import { parseBody, presentedToken, routeCandidates } from './request.js';
import { copyHeaders } from './respond.js';

export { COUNT_TOKENS_PATH };

export async function countTokens(
  ctx: ProxyContext,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply | undefined> {
  const path = COUNT_TOKENS_PATH;
  const access = (request.access = newAccessRecord());
  const registry = ctx.registry();
  const caller = registry.authenticate(presentedToken(request, 'anthropic'));
  if (!caller) throw new HttpError('invalid_api_key', 'missing or invalid API key');
  access.token = caller.name;
  const { body, json } = parseBody(request.body);
  const model = (access.model = json.model as string);
  const channels = routeCandidates(registry, caller.group, model, 'anthropic', path)
    .map((channel, order) => ({ channel, order }))
    .sort((a, b) => b.channel.priority - a.channel.priority || a.order - b.order)
    .map(({ channel }) => channel);
  const stop = new AbortController();
  reply.raw.on('close', () => {
    if (!reply.raw.writableFinished) stop.abort();
  });

  const call = (channel: GatewayChannel): Promise<UpstreamResponse> => {
    const { signal } = stop;
    if (channel.config.type !== 'mock') {
      return ctx.upstream.call({ channel, path, body, clientHeaders: request.headers, signal });
    }
    const mock = channel.config.mock ?? DEFAULT_MOCK;
    return mockRespond(mock, { channelId: channel.id, path, shape: 'anthropic', body: json, signal });
  };

  let unreachable: HttpError | undefined;
  for (const channel of channels) {
    access.channel = channel.id;
    access.attempts++;
    const started = performance.now();
    const elapsed = () => (performance.now() - started) / 1000;
    let res: UpstreamResponse;
    try {
      res = await call(channel);
    } catch (err) {
      if (stop.signal.aborted) return undefined; // the client left: nothing to answer
      ctx.metrics.upstreamAnswered(channel.id, 'error');
      if (err instanceof UpstreamTimeoutError) throw new HttpError('upstream_timeout', err.message);
      if (!(err instanceof UpstreamConnectError)) throw err;
      request.log.warn({ channel: channel.id, err: err.message }, 'upstream unreachable');
      unreachable = new HttpError('upstream_unreachable', `slotgate: ${err.message}`);
      continue;
    }
    ctx.metrics.upstreamAnswered(channel.id, res.status, elapsed());
    access.upstreamStatus = res.status;
    finished(res.body, (err) => {
      if (!err) ctx.metrics.upstreamEnded(channel.id, elapsed());
    });
    ctx.onResult?.({
      channel: channel.id,
      status: res.status,
      attempts: access.attempts,
      waitedMs: 0,
      source: 'upstream',
    });
    reply.code(res.status);
    copyHeaders(reply, res.headers);
    reply.header('x-slotgate-channel', channel.id);
    return reply.send(res.body);
  }
  throw unreachable!;
}
