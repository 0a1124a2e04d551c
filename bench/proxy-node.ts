/**
 * One server in its own process (its own event loop): bench:proxy's upstream and proxies, and the HTTP scenario's
 * gateways, which count their Redis round trips. Messages: start → listening { url }, cpu → cpu { micros },
 * counters → counters (gateway role), stop → stopped.
 */
import { RedisStore, type AdmissionStats } from 'slotgate';
import { createGateway, parseConfig } from 'slotgate-gateway';
import { FakeUpstream, sseData, type Part } from '../test/helpers/fake-upstream.js';
import { sendToParent, serveParent } from './children.js';
import { startFastifyProxy } from './fastify-proxy.js';
import { startMinimalProxy } from './minimal-proxy.js';
import { CLIENT_TOKEN, MODEL, type NodeSpec } from './proxy-bench.js';
import { RoundTripCounter } from './redis.js';

export interface GatewayCounters {
  stats: AdmissionStats;
  requests: number;
  writes: number;
  /** process.cpuUsage() of the gateway's process, µs */
  cpuUs: number;
}

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

/** The HTTP scenario's gateway: `openai` channels c0… on the upstream (keyed `key-<id>`), a counted RedisStore. */
async function startGateway(spec: Extract<NodeSpec, { role: 'gateway' }>) {
  const config = parseConfig(
    {
      server: { host: '127.0.0.1', port: 0, log_level: 'silent', drain_timeout_ms: 2000 },
      redis: { url: spec.redisUrl, prefix: spec.namespace },
      channels: spec.channels.map((id) => ({
        id,
        type: 'openai',
        base_url: spec.target,
        key: `key-${id}`,
        models: ['bench'],
        max_concurrency: spec.max,
      })),
      settings: { load_cache_enabled: spec.cache },
    },
    '<bench>',
  );
  const counter = new RoundTripCounter();
  const client = counter.client(spec.redisUrl);
  const store = new RedisStore({ client, prefix: spec.namespace, timeoutMs: config.redis!.timeout_ms });
  const gateway = await createGateway({ config, store, logger: false });
  counters = () => {
    const cpu = process.cpuUsage();
    const { requests, writes } = counter;
    return { stats: gateway.admission.stats(), requests, writes, cpuUs: cpu.user + cpu.system };
  };
  return {
    url: await gateway.listen(),
    async close() {
      await gateway.close();
      await store.close();
      await client.quit().catch(() => client.disconnect());
    },
  };
}

let running: { url: string; close(): Promise<void> } | undefined;
let counters: (() => GatewayCounters) | undefined;

type Message = { type: 'start'; spec: NodeSpec } | { type: 'cpu' } | { type: 'counters' } | { type: 'stop' };

serveParent<Message>(async (message) => {
  if (message.type === 'cpu') {
    const { user, system } = process.cpuUsage();
    await sendToParent({ type: 'cpu', micros: user + system });
  } else if (message.type === 'counters') {
    await sendToParent({ type: 'counters', counters: counters!() });
  } else if (message.type === 'start') {
    const { spec } = message;
    if (spec.role === 'upstream') running = await startUpstream(spec.delayMs, spec.chunks);
    else if (spec.role === 'gateway') running = await startGateway(spec);
    else if (spec.role === 'slotgate') running = await startSlotgate(spec);
    else running = await (spec.role === 'minimal' ? startMinimalProxy : startFastifyProxy)(spec.target);
    await sendToParent({ type: 'listening', url: running.url });
  } else {
    await running?.close();
    await sendToParent({ type: 'stopped' });
    process.exit(0);
  }
});
