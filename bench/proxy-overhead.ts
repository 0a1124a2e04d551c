/**
 * The gateway's added latency per request against a local upstream that answers at once (the counting upstream of
 * test/helpers/fake-upstream.ts), and requests/s on one instance with a mock channel and with that upstream.
 * Embedded store (no Redis) unless --redis URL is given.
 *
 *   npm run bench:proxy -- [--requests 2000] [--concurrency 64] [--duration 5] [--redis URL]
 */
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { createGateway, parseConfig } from 'slotgate-gateway';
import { percentile } from './load.js';
import { FakeUpstream } from '../test/helpers/fake-upstream.js';
import { fmt } from './report.js';

const { values: flags } = parseArgs({
  options: {
    requests: { type: 'string' },
    concurrency: { type: 'string' },
    duration: { type: 'string' },
    redis: { type: 'string' },
  },
});
const N = Number(flags.requests ?? 2000);
const CONCURRENCY = Number(flags.concurrency ?? 64);
const DURATION_S = Number(flags.duration ?? 5);
const BODY = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
const ANSWER = JSON.stringify({
  id: 'x',
  object: 'chat.completion',
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' } }],
});

const upstream = await FakeUpstream.start({ reply: { body: ANSWER }, keepRequests: false });
const upstreamUrl = upstream.url('real');

const config = parseConfig(
  {
    server: { port: 0, log_level: 'silent' },
    tokens: [{ key: 'k', name: 'bench' }],
    ...(flags.redis ? { redis: { url: flags.redis, prefix: `overhead-${Date.now()}` } } : {}),
    channels: [
      {
        id: 'real',
        type: 'openai',
        base_url: upstreamUrl,
        key: 'upstream-key',
        models: ['m'],
        max_concurrency: 1000,
      },
      {
        id: 'mock',
        type: 'mock',
        models: ['mock'],
        max_concurrency: 1000,
        mock: { latency_ms: 0, chunks: 1, chunk_delay_ms: 0 },
      },
    ],
  },
  'bench',
);
const gateway = await createGateway({ config, logger: false });
const gatewayUrl = await gateway.listen();
const agent = new Agent({ connections: 256, pipelining: 1 });
const headers = { authorization: 'Bearer k', 'content-type': 'application/json' };

async function once(url: string, body = BODY): Promise<number> {
  const t0 = performance.now();
  const res = await request(url, { method: 'POST', headers, body, dispatcher: agent });
  await res.body.text();
  if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}`);
  return performance.now() - t0;
}

async function sequential(url: string): Promise<number[]> {
  for (let i = 0; i < 200; i++) await once(url); // warm-up
  const out: number[] = [];
  for (let i = 0; i < N; i++) out.push(await once(url));
  return out.sort((a, b) => a - b);
}

async function throughput(url: string, body: string): Promise<number> {
  let done = 0;
  const deadline = performance.now() + DURATION_S * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (performance.now() < deadline) {
        await once(url, body);
        done++;
      }
    }),
  );
  return done / DURATION_S;
}

const direct = await sequential(`${upstreamUrl}/v1/chat/completions`);
const proxied = await sequential(`${gatewayUrl}/v1/chat/completions`);
const rps = await throughput(`${gatewayUrl}/v1/chat/completions`, JSON.stringify({ model: 'mock' }));
const rpsReal = await throughput(`${gatewayUrl}/v1/chat/completions`, BODY);

console.log(`# slotgate proxy overhead\n`);
console.log(
  `${N} sequential requests each (after 200 warm-up), upstream on 127.0.0.1 answering at once; throughput: ` +
    `${CONCURRENCY} concurrent clients for ${DURATION_S} s; store: ${gateway.store.kind}; one bounded channel ` +
    `(max 1000). Machine: ${os.cpus().length} × ${os.cpus()[0]?.model}, Node ${process.version}. Client, gateway and ` +
    `upstream share the machine.\n`,
);
console.log('| measure | value |\n| --- | --- |');
console.log(
  `| direct to upstream, median / p99 ms | ${fmt(percentile(direct, 0.5), 3)} / ${fmt(percentile(direct, 0.99), 3)} |`,
);
console.log(
  `| through slotgate, median / p99 ms | ${fmt(percentile(proxied, 0.5), 3)} / ${fmt(percentile(proxied, 0.99), 3)} |`,
);
console.log(`| added latency, median ms | ${fmt(percentile(proxied, 0.5) - percentile(direct, 0.5), 3)} |`);
console.log(`| requests/s through slotgate, mock channel | ${fmt(rps, 0)} |`);
console.log(`| requests/s through slotgate, local upstream | ${fmt(rpsReal, 0)} |`);

await gateway.close();
await agent.close();
await upstream.close();
