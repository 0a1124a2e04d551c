/**
 * The drain of `slotgate serve` on SIGTERM, in the order Kubernetes stops a pod: /readyz fails at once while the
 * listener still serves for server.drain_delay_ms; then a request still waiting for a slot is answered 503
 * shutting_down, new connections are refused, and the stream in flight runs to its end (or is cut at
 * server.drain_timeout_ms); at exit no lease or waiter of the gateway is left in Redis. Real child processes, the
 * shared test Redis under a prefix of their own, and an upstream gated by the test.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { FakeUpstream, gate, sseData } from '../helpers/fake-upstream.js';
import {
  killAllGateways,
  spawnGateway,
  tempDir,
  tryConnect,
  writeConfig,
  type GwProcess,
} from '../helpers/gw-gateway.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';

const CLIENT_TOKEN = 'sk-client-drain-test';

let dir: { dir: string; remove(): Promise<void> };
let redis: Redis;
let upstream: FakeUpstream | undefined;
const prefixes: string[] = [];

beforeAll(async () => {
  dir = await tempDir();
  redis = new Redis(redisUrl());
});

afterEach(async () => {
  await killAllGateways();
  await upstream?.close();
  upstream = undefined;
});

afterAll(async () => {
  await dir?.remove();
  for (const prefix of prefixes) {
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
  }
  redis?.disconnect();
});

/** A gateway with one channel of max 1 whose streamed answer sends one chunk, then waits for `held` to open. */
async function drainingGateway(name: string, server: Record<string, number>) {
  const prefix = uniquePrefix(name);
  prefixes.push(prefix);
  const held = gate();
  upstream = await FakeUpstream.start({
    keys: { 'sk-upstream-drain': 'ch' },
    reply: (request) =>
      JSON.parse(request.body.toString('utf8')).stream === true
        ? {
            sse: [
              sseData({ choices: [{ delta: { content: 'first' } }] }),
              () => held.promise,
              'data: [DONE]\n\n',
            ],
          }
        : { json: { choices: [{ message: { content: 'hello' } }] } },
  });
  const config = {
    redis: { url: redisUrl(), prefix },
    tokens: [{ key: CLIENT_TOKEN, name: 'test' }],
    channels: [
      {
        id: 'ch',
        type: 'openai',
        base_url: upstream.origin,
        key: 'sk-upstream-drain',
        models: ['m'],
        max_concurrency: 1,
      },
    ],
    server: { log_level: 'info', ...server },
    // a lease released only by expiry would still be there at the exit
    settings: { lease_ttl_ms: 120_000, wait_timeout_ms: 60_000 },
  };
  const gw = await spawnGateway({ configPath: await writeConfig(dir.dir, `${prefix}.yaml`, config) });
  await gw.ready;
  return { gw, prefix, held };
}

const post = (gw: GwProcess, stream: boolean) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${CLIENT_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: 'hi' }] }),
  });

/** A streamed answer whose first chunk has arrived; `rest` reads it to its end (or its cut). */
async function streaming(gw: GwProcess) {
  const res = await post(gw, true);
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!text.includes('first')) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the stream ended before its first chunk: ${text}`);
    text += decoder.decode(value, { stream: true });
  }
  const rest = (async () => {
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return { text, cut: false };
        text += decoder.decode(value, { stream: true });
      }
    } catch {
      return { text, cut: true };
    }
  })();
  return { rest };
}

async function load(prefix: string) {
  const store = new RedisStore({ url: redisUrl(), prefix });
  try {
    return (await store.readLoads(['ch'])).get('ch');
  } finally {
    await store.close();
  }
}

async function until(check: () => Promise<boolean>, what: string, gw: GwProcess): Promise<void> {
  for (let i = 0; i < 400; i++) {
    if (await check()) return;
    await sleep(25);
  }
  throw new Error(`${what} did not happen within 10 s:\n${gw.output()}`);
}

/** Nothing of the gateway's left: no slot taken, nobody waiting, no slots or queue key. */
async function expectNothingLeft(prefix: string): Promise<void> {
  expect(await load(prefix)).toMatchObject({ active: 0, waiting: 0 });
  const keys = await redis.keys(`${prefix}:v1:*`);
  expect(keys.filter((k) => k.endsWith(':slots') || k.endsWith(':fifo'))).toEqual([]);
}

describe('slotgate serve drains on SIGTERM', () => {
  it('fails /readyz at once, serves through the drain delay, then answers the waiting request 503 and lets the stream end', async () => {
    const { gw, prefix, held } = await drainingGateway('gw-drain', {
      drain_delay_ms: 5000,
      drain_timeout_ms: 600_000,
    });
    const { rest } = await streaming(gw);
    let waitingAnswered = false;
    const waiting = post(gw, false).then(async (res) => {
      waitingAnswered = true;
      return {
        status: res.status,
        headers: res.headers,
        body: (await res.json()) as { error: { code: string } },
      };
    });
    await until(async () => (await load(prefix))?.waiting === 1, 'the second request waiting', gw);

    gw.proc.kill('SIGTERM');
    let ready = await fetch(`${gw.url}/readyz`);
    while (ready.status === 200) {
      await ready.arrayBuffer();
      ready = await fetch(`${gw.url}/readyz`);
    }
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { error: { message: string } }).error.message).toContain('shutting down');
    // still accepting and serving on a new connection, the waiting request still waiting: the drain delay
    expect(await tryConnect(gw.port)).toBe('accepted');
    const live = await fetch(`${gw.url}/livez`, { headers: { connection: 'close' } });
    expect(live.status).toBe(200);
    expect(waitingAnswered, 'the waiting request was answered before the drain delay ended').toBe(false);

    const refused = await waiting;
    expect(refused.status).toBe(503);
    expect(refused.body.error.code).toBe('shutting_down');
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.headers.get('x-should-retry')).toBe('true');
    await until(async () => (await tryConnect(gw.port)) === 'refused', 'the listener closing', gw);

    held.open();
    const streamed = await rest;
    expect(streamed.cut).toBe(false);
    expect(streamed.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    expect(await gw.exited).toEqual({ code: 0, signal: null });
    await expectNothingLeft(prefix);
    // the refused request never reached the upstream
    expect(upstream!.total()).toBe(1);
  }, 40_000);

  it('cuts a stream still running at server.drain_timeout_ms, gives its slot back and exits 0', async () => {
    const { gw, prefix } = await drainingGateway('gw-drain-cut', {
      drain_delay_ms: 0,
      drain_timeout_ms: 500,
    });
    const { rest } = await streaming(gw);
    expect(await load(prefix)).toMatchObject({ active: 1 });

    gw.proc.kill('SIGTERM');
    const streamed = await rest;
    expect(streamed.text).not.toContain('[DONE]');
    expect(await gw.exited).toEqual({ code: 0, signal: null });
    await expectNothingLeft(prefix);
    const [request] = upstream!.requests('ch');
    await request!.done;
    expect(request!.aborted).toBe(true);
  }, 40_000);
});
