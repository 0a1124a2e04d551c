/**
 * One process of `npm run bench:proxy` (forked by proxy-bench.ts), so that the load generator, the upstream and
 * the proxy under test each have their own event loop:
 *   { type: 'start', role: 'upstream', upstreamDelayMs, chunks } → { type: 'listening', url } (the channel's base URL)
 *   { type: 'start', role: 'minimal' | 'slotgate', target, ... }  → { type: 'listening', url }
 *   { type: 'cpu' }                                                → { type: 'cpu', micros } (process.cpuUsage(), µs)
 *   { type: 'stop' }                                               → { type: 'stopped' }, exits
 */
import { createGateway, parseConfig } from 'slotgate-gateway';
import { FakeUpstream, sseData, type Part } from '../test/helpers/fake-upstream.js';
import { sendToParent, serveParent } from './children.js';
import { startFastifyProxy } from './fastify-proxy.js';
import { startMinimalProxy } from './minimal-proxy.js';
import { CLIENT_TOKEN, MODEL, type NodeSpec } from './proxy-bench.js';

const ANSWER = {
  id: 'bench',
  object: 'chat.completion',
  model: MODEL,
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
};

/** The upstream: after `delayMs`, a JSON answer, or `chunks` SSE chunks each written on its own, then [DONE]. */
async function startUpstream(delayMs: number, chunks: number) {
  const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));
  const sse: Part[] = [];
  for (let i = 0; i < chunks; i++) {
    if (i > 0) sse.push(nextTurn);
    sse.push(
      sseData({
        id: 'bench',
        object: 'chat.completion.chunk',
        choices: [{ index: 0, delta: { content: `t${i}` } }],
      }),
    );
  }
  sse.push(nextTurn, 'data: [DONE]\n\n');
  const upstream = await FakeUpstream.start({
    keepRequests: false,
    reply: (request) =>
      /"stream"\s*:\s*true/.test(request.body.toString()) ? { delayMs, sse } : { delayMs, json: ANSWER },
  });
  return { url: upstream.url('bench'), close: () => upstream.close() };
}

async function startSlotgate(spec: Extract<NodeSpec, { role: 'slotgate' }>) {
  const config = parseConfig(
    {
      server: { port: 0, log_level: 'silent' },
      tokens: [{ key: CLIENT_TOKEN, name: 'bench' }],
      ...(spec.redisUrl ? { redis: { url: spec.redisUrl, prefix: `bench-proxy-${process.pid}` } } : {}),
      channels: [
        {
          id: 'bench',
          type: 'openai',
          base_url: spec.target,
          key: 'upstream-key',
          models: [MODEL],
          max_concurrency: spec.maxConcurrency,
        },
      ],
    },
    'bench:proxy',
  );
  const gateway = await createGateway({ config, logger: false });
  return { url: await gateway.listen(), close: () => gateway.close() };
}

let running: { url: string; close(): Promise<void> } | undefined;

serveParent<{ type: 'start'; spec: NodeSpec } | { type: 'cpu' } | { type: 'stop' }>(async (message) => {
  if (message.type === 'cpu') {
    const { user, system } = process.cpuUsage();
    await sendToParent({ type: 'cpu', micros: user + system });
  } else if (message.type === 'start') {
    const { spec } = message;
    running =
      spec.role === 'upstream'
        ? await startUpstream(spec.delayMs, spec.chunks)
        : spec.role === 'minimal'
          ? await startMinimalProxy(spec.target)
          : spec.role === 'fastify'
            ? await startFastifyProxy(spec.target)
            : await startSlotgate(spec);
    await sendToParent({ type: 'listening', url: running.url });
  } else {
    await running?.close();
    await sendToParent({ type: 'stopped' });
    process.exit(0);
  }
});
