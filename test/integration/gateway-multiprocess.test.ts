/**
 * `slotgate serve` as real child processes: several gateways on the shared test Redis, each with
 * its own key prefix; an upstream run here in the test that counts in-flight requests per channel itself; graceful
 * shutdown on SIGTERM; the bundled demo from the built CLI; and an invalid config file at start. Every child is
 * SIGKILLed when its test ends, passed or failed. The concurrency test runs on one node and on a 3-master cluster
 * (the config file's `redis.cluster`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import {
  cleanEnv,
  killAllGateways,
  logLines,
  spawnGateway,
  tempDir,
  tryConnect,
  writeConfig,
  type GwProcess,
} from '../helpers/gw-gateway.js';
import { FakeUpstream, chatAnswer, chunkText } from '../helpers/fake-upstream.js';
import {
  clearOn,
  keyReader,
  redisUrl,
  topologies,
  uniquePrefix,
  type KeyReader,
  type StoreTarget,
} from '../helpers/redis.js';

const ADMIN_TOKEN = 'adm-multiprocess-test-token';
const CLIENT_TOKEN = 'sk-client-multiprocess-test';

type Json = Record<string, unknown>;

async function call(
  gw: GwProcess,
  method: string,
  path: string,
  opts: { body?: unknown; token?: string } = {},
): Promise<{ status: number; headers: Headers; json: Json; text: string }> {
  const res = await fetch(gw.url + path, {
    method,
    headers: {
      ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
      ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
  });
  const text = await res.text();
  let json: Json = {};
  try {
    json = JSON.parse(text) as Json;
  } catch {
    // an SSE stream or an empty body
  }
  return { status: res.status, headers: res.headers, json, text };
}

const getSettings = async (gw: GwProcess): Promise<Json> => {
  const res = await call(gw, 'GET', '/admin/settings', { token: ADMIN_TOKEN });
  expect(res.status, res.text).toBe(200);
  return res.json.settings as Json;
};

/**
 * Polls `gw`'s settings every 50 ms until `wanted` is in force; returns the ms from `since` to the poll that saw it
 * (the poll's response time). Gives up after 5 s so a failure reports what was seen instead of hanging.
 */
async function msUntilSettings(gw: GwProcess, wanted: Json, since: number): Promise<number> {
  let last: Json = {};
  while (performance.now() - since < 5000) {
    last = await getSettings(gw);
    const seenAt = performance.now();
    if (Object.entries(wanted).every(([k, v]) => last[k] === v)) return seenAt - since;
    await sleep(50);
  }
  throw new Error(`settings ${JSON.stringify(wanted)} not in force after 5 s; saw ${JSON.stringify(last)}`);
}

/** Keys of `prefix` that hold slots or waiters (settings and cooldown keys are neither). */
async function leaseKeys(redis: Pick<KeyReader, 'keys'>, prefix: string): Promise<string[]> {
  const keys = await redis.keys(`${prefix}:v1:*`);
  return keys.filter((k) => k.endsWith(':slots') || k.endsWith(':fifo'));
}

/** The process's exit, or undefined if it is still running after `ms`. */
async function exitWithin(gw: GwProcess, ms: number) {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)));
  try {
    return await Promise.race([gw.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function readLoad(prefix: string, channel: string) {
  const store = new RedisStore({ url: redisUrl(), prefix });
  try {
    return (await store.readLoads([channel])).get(channel);
  } finally {
    await store.close();
  }
}

let dir: { dir: string; remove(): Promise<void> };
let redis: Redis;
const prefixes: string[] = [];

beforeAll(async () => {
  dir = await tempDir();
  redis = new Redis(redisUrl());
});

afterEach(async () => {
  await killAllGateways();
});

afterAll(async () => {
  await killAllGateways();
  await dir?.remove();
  if (redis) {
    for (const prefix of prefixes) {
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length) await redis.del(...keys);
    }
    redis.disconnect();
  }
});

function newPrefix(name: string): string {
  const prefix = uniquePrefix(name);
  prefixes.push(prefix);
  return prefix;
}

describe('two gateway processes on one Redis: settings', () => {
  it('a PUT on one is in force on the other within 1 s; an invalid PUT changes nothing on either', async () => {
    const prefix = newPrefix('gw-settings');
    const config = {
      redis: { url: redisUrl(), prefix },
      admin: { token: 'env:SLOTGATE_TEST_ADMIN_TOKEN' }, // the env: secret syntax, resolved in the child
      tokens: [{ key: CLIENT_TOKEN, name: 'test' }],
      channels: [{ id: 'mock-1', type: 'mock', models: ['m'], max_concurrency: 1 }],
      settings: { wait_timeout_ms: 3000 },
    };
    const path = await writeConfig(dir.dir, `${prefix}.yaml`, config);
    const env = cleanEnv({ SLOTGATE_TEST_ADMIN_TOKEN: ADMIN_TOKEN });
    const [a, b] = await Promise.all([
      spawnGateway({ configPath: path, env }),
      spawnGateway({ configPath: path, env }),
    ]);
    await Promise.all([a!.ready, b!.ready]);
    const gwA = a!;
    const gwB = b!;

    // Both start from the config file's value (over the default 5000), and the admin token came from the env.
    for (const gw of [gwA, gwB]) {
      expect(await getSettings(gw)).toMatchObject({ wait_timeout_ms: 3000, retry_times: 1 });
      expect((await call(gw, 'GET', '/admin/settings')).status).toBe(401);
    }

    // A → B
    const put = await call(gwA, 'PUT', '/admin/settings', {
      token: ADMIN_TOKEN,
      body: { wait_timeout_ms: 1234, retry_times: 3 },
    });
    const putAt = performance.now();
    expect(put.status, put.text).toBe(200);
    expect(put.json.settings).toMatchObject({ wait_timeout_ms: 1234, retry_times: 3 });
    const aToB = await msUntilSettings(gwB, { wait_timeout_ms: 1234, retry_times: 3 }, putAt);
    console.info(`settings propagation A→B: ${aToB.toFixed(1)} ms after the PUT returned`);
    expect(aToB).toBeLessThanOrEqual(1000);

    // An invalid update (one good key, one out of range, one unknown) is rejected whole, naming each problem.
    const bad = await call(gwB, 'PUT', '/admin/settings', {
      token: ADMIN_TOKEN,
      body: { retry_times: 0, load_cache_ttl_ms: 9000, no_such_setting: true },
    });
    expect(bad.status, bad.text).toBe(400);
    const error = bad.json.error as Json;
    expect(error.code).toBe('invalid_settings');
    expect(error.message).toContain('Expected `load_cache_ttl_ms` to be an integer in 1–5000, got 9000');
    expect(error.message).toContain('Unknown setting `no_such_setting`');

    // A valid sentinel PUT on B after the rejected one: once A sees the sentinel, A would also have seen anything
    // the rejected PUT had written or announced before it (one hash, one ordered pub/sub channel).
    const sentinel = await call(gwB, 'PUT', '/admin/settings', {
      token: ADMIN_TOKEN,
      body: { safety_poll_ms: 3850 },
    });
    const sentinelAt = performance.now();
    expect(sentinel.status, sentinel.text).toBe(200);
    const bToA = await msUntilSettings(gwA, { safety_poll_ms: 3850 }, sentinelAt);
    console.info(`settings propagation B→A: ${bToA.toFixed(1)} ms after the PUT returned`);
    expect(bToA).toBeLessThanOrEqual(1000);

    for (const gw of [gwA, gwB]) {
      expect(await getSettings(gw)).toMatchObject({
        retry_times: 3,
        load_cache_ttl_ms: 200,
        wait_timeout_ms: 1234,
        safety_poll_ms: 3850,
      });
    }
    expect(await redis.hgetall(`${prefix}:v1:settings`)).toEqual({
      wait_timeout_ms: '1234',
      retry_times: '3',
      safety_poll_ms: '3850',
    });
  }, 40_000);
});

/** The config file's `redis` section for `target`: a URL, or the cluster's seed nodes. */
function redisSection(target: StoreTarget, prefix: string) {
  return 'url' in target ? { url: target.url, prefix } : { cluster: { nodes: target.cluster.nodes }, prefix };
}

describe.each(topologies())('two gateway processes on $name: concurrency', ({ target }) => {
  let upstream: FakeUpstream | undefined;
  let reader: KeyReader | undefined;
  let prefix = '';
  afterEach(async () => {
    await upstream?.close();
    upstream = undefined;
    reader?.close();
    reader = undefined;
    await killAllGateways();
    if (prefix) await clearOn(target, `${prefix}:*`);
  });

  it('60 concurrent requests over both gateways never put more than 2 in flight per channel at the upstream', async () => {
    prefix = newPrefix('gw-burst');
    const keyRedis = (reader = keyReader(target));
    const MAX = 2;
    const keys = { 'sk-upstream-ch-a': 'ch-a', 'sk-upstream-ch-b': 'ch-b' };
    upstream = await FakeUpstream.start({
      keys,
      reply: chatAnswer({ holdMs: 50, chunks: 5, chunkDelayMs: 10 }),
      keepRequests: false,
    });
    const config = {
      redis: redisSection(target, prefix),
      admin: { token: ADMIN_TOKEN },
      tokens: [{ key: CLIENT_TOKEN, name: 'test' }],
      channels: Object.entries(keys).map(([key, id]) => ({
        id,
        type: 'openai',
        base_url: upstream!.origin,
        key,
        models: ['gpt-test'],
        max_concurrency: MAX,
      })),
      // Each waiter stands in both channels' queues, so 40 places per channel hold 40 waiters: with 4 in flight, 44 of
      // the 60 go through (on both gateways) and the rest is turned away with the gateway's 429 (queue full). Either
      // gateway alone has at most 30 waiters, so both get places whichever burst reaches Redis first (with
      // 20 places, the first burst's 26 waiters could take them all, as a FIFO queue should let them).
      settings: { max_waiting_per_channel: 40, safety_poll_ms: 2000, wait_timeout_ms: 5000 },
    };
    const path = await writeConfig(dir.dir, `${prefix}.yaml`, config);
    const gateways = await Promise.all([
      spawnGateway({ configPath: path }),
      spawnGateway({ configPath: path }),
    ]);
    await Promise.all(gateways.map((g) => g.ready));
    // One request through each gateway first, so neither is still connecting to Redis or the upstream when the burst
    // starts (that would hand every early slot to the other one).
    for (const gw of gateways) {
      const warm = await call(gw, 'POST', '/v1/chat/completions', {
        token: CLIENT_TOKEN,
        body: { model: 'gpt-test', messages: [{ role: 'user', content: 'warm up' }] },
      });
      expect(warm.status, warm.text).toBe(200);
    }
    const warmUps = upstream.total();

    // Watch Redis during the burst: the gateways must really be using this prefix.
    let sampling = true;
    let mostLeaseKeys = 0;
    const sampler = (async () => {
      while (sampling) {
        mostLeaseKeys = Math.max(mostLeaseKeys, (await leaseKeys(keyRedis, prefix)).length);
        await sleep(5);
      }
    })();

    const N = 60;
    const results = await Promise.all(
      Array.from({ length: N }, async (_, i) => {
        const stream = i % 3 === 0;
        const res = await call(gateways[i % 2]!, 'POST', '/v1/chat/completions', {
          token: CLIENT_TOKEN,
          body: { model: 'gpt-test', stream, messages: [{ role: 'user', content: `request ${i}` }] },
        });
        return { ...res, stream, gateway: i % 2 };
      }),
    );
    sampling = false;
    await sampler;

    const report = JSON.stringify({
      statuses: results.map((r) => r.status),
      messages: [
        ...new Set(
          results.map((r, i) => `gw${i % 2}: ${String((r.json.error as Json | undefined)?.message)}`),
        ),
      ],
      seen: Object.fromEntries(upstream.channels().map((id) => [id, upstream!.record(id)])),
      bad: upstream.bad,
    });
    const ok = results.filter((r) => r.status === 200);
    const capacity = results.filter((r) => r.status === 429);
    expect(ok.length + capacity.length, report).toBe(N);
    // Every 429 is the gateway's own (the upstream never sends one), with its code and a Retry-After.
    for (const r of capacity) {
      expect((r.json.error as Json).code, r.text).toBe('channel_capacity_exhausted');
      expect(Number(r.headers.get('retry-after')), r.text).toBeGreaterThanOrEqual(1);
    }
    // Every 200 is a complete upstream answer.
    for (const r of ok) {
      const channel = r.headers.get('x-slotgate-channel');
      expect(['ch-a', 'ch-b'], r.text).toContain(channel);
      if (r.stream) {
        const content = r.text
          .split('\n')
          .filter((l) => l.startsWith('data: {'))
          .map(
            (l) =>
              (JSON.parse(l.slice(6)) as { choices: [{ delta: { content: string } }] }).choices[0].delta
                .content,
          )
          .join('');
        expect(content).toBe([0, 1, 2, 3, 4].map(chunkText).join(''));
        expect(r.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
      } else {
        expect(r.json.choices, r.text).toEqual([
          { index: 0, message: { role: 'assistant', content: `hello from ${channel}` } },
        ]);
      }
    }

    // I1 as the upstream saw it; and the load was real: both channels reached their maximum, both gateways served,
    // streamed and non-streamed answers both went through, and every admitted request reached the upstream once.
    expect(upstream.bad, report).toEqual([]);
    for (const id of ['ch-a', 'ch-b']) {
      const s = upstream.record(id);
      expect(s.max, `${id}: ${report}`).toBe(MAX);
      expect(s.current, id).toBe(0);
    }
    expect(upstream.total() - warmUps, report).toBe(ok.length);
    expect(ok.some((r) => r.stream)).toBe(true);
    expect(ok.some((r) => !r.stream)).toBe(true);
    for (const [i, gw] of gateways.entries()) {
      const served = results.filter((r, k) => k % 2 === i && r.status === 200).length;
      expect(served, `gateway ${i} served nothing: ${report}`).toBeGreaterThan(0);
      expect(gw.proc.exitCode, gw.output()).toBeNull();
    }
    expect(mostLeaseKeys, 'no slots/waiters key of this prefix was ever seen in Redis').toBeGreaterThan(0);

    // I5: once both gateways hold no lease, no slots or waiters key is left. Waiter unregistration is sent without
    // waiting for it, so allow it a moment — far less than any key's own expiry (wait_timeout_ms + margin, lease TTL).
    for (const gw of gateways) {
      let live = -1;
      for (let t = 0; t < 100 && live !== 0; t++) {
        const status = await call(gw, 'GET', '/admin/status', { token: ADMIN_TOKEN });
        live = status.json.live_leases as number;
        if (live !== 0) await sleep(20);
      }
      expect(live, gw.output()).toBe(0);
    }
    let left = await leaseKeys(keyRedis, prefix);
    for (let t = 0; t < 20 && left.length; t++) {
      await sleep(50);
      left = await leaseKeys(keyRedis, prefix);
    }
    expect(left).toEqual([]);
    console.info(
      `burst: ${ok.length} × 200 (${ok.filter((r) => r.gateway === 0).length} via gateway 0), ` +
        `${capacity.length} × 429; upstream highest per channel ` +
        Object.entries(upstream.highest())
          .map(([id, n]) => `${id}=${n}`)
          .join(', '),
    );
  }, 40_000);
});

describe('graceful shutdown', () => {
  let upstream: FakeUpstream | undefined;
  afterEach(async () => {
    await upstream?.close();
    upstream = undefined;
  });

  it('SIGTERM lets a streaming request finish, refuses new connections, exits 0 and releases the lease', async () => {
    const prefix = newPrefix('gw-shutdown');
    const CHUNKS = 30;
    upstream = await FakeUpstream.start({
      keys: { 'sk-upstream-long': 'ch-long' },
      reply: chatAnswer({ holdMs: 0, chunks: CHUNKS, chunkDelayMs: 100 }),
    });
    const config = {
      // A long lease TTL: a lease released only by expiry would still count as active after the exit.
      redis: { url: redisUrl(), prefix },
      tokens: [{ key: CLIENT_TOKEN, name: 'test' }],
      channels: [
        {
          id: 'ch-long',
          type: 'openai',
          base_url: upstream.origin,
          key: 'sk-upstream-long',
          models: ['gpt-test'],
          max_concurrency: 1,
        },
      ],
      // The forced close after drain_timeout_ms must play no part: the graceful path alone has to end the process.
      server: { drain_timeout_ms: 600_000 },
      settings: { lease_ttl_ms: 120_000 },
    };
    const path = await writeConfig(dir.dir, `${prefix}.yaml`, config);
    const gw = await spawnGateway({ configPath: path });
    await gw.ready;

    // A streaming request, read as it arrives; this client keeps its connection alive, as most do.
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${CLIENT_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    while (!text.includes(chunkText(0))) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the stream ended before its first chunk: ${text}`);
      text += decoder.decode(value, { stream: true });
    }
    expect(await readLoad(prefix, 'ch-long')).toMatchObject({ active: 1 });
    expect(await tryConnect(gw.port)).toBe('accepted');

    let streamDone = false;
    const rest = (async () => {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      streamDone = true;
    })();

    gw.proc.kill('SIGTERM');
    // New connections are refused while the stream is still going.
    let outcome = 'accepted';
    while (outcome !== 'refused' && !streamDone && gw.proc.exitCode === null) {
      outcome = await tryConnect(gw.port);
      if (outcome !== 'refused') await sleep(20);
    }
    expect(outcome).toBe('refused');
    expect(streamDone, 'the stream ended before new connections were refused').toBe(false);
    expect(await tryConnect(gw.port)).toBe('refused');

    await rest;
    const content = text
      .split('\n')
      .filter((l) => l.startsWith('data: {'))
      .map(
        (l) =>
          (JSON.parse(l.slice(6)) as { choices: [{ delta: { content: string } }] }).choices[0].delta.content,
      )
      .join('');
    expect(content).toBe(Array.from({ length: CHUNKS }, (_, i) => chunkText(i)).join(''));
    expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);

    const exit = await exitWithin(gw, 15_000);
    expect(exit, `the gateway did not exit within 15 s of its last request ending:\n${gw.output()}`).toEqual({
      code: 0,
      signal: null,
    });
    // Right after the exit, not one lease TTL later.
    expect(await readLoad(prefix, 'ch-long')).toMatchObject({ active: 0, waiting: 0 });
    expect(await leaseKeys(redis, prefix)).toEqual([]);
    expect(upstream.total()).toBe(1);
    expect(logLines(gw.output()).some((l) => String(l.msg).startsWith('shutting down'))).toBe(true);
  }, 30_000);
});

describe('slotgate serve and its environment', () => {
  it('reads the config file from SLOTGATE_CONFIG and the Redis URL from REDIS_URL', async () => {
    const prefix = newPrefix('gw-env');
    // The file names a Redis nobody listens on; REDIS_URL must replace that URL (and keep the file's prefix).
    const config = {
      redis: { url: 'redis://127.0.0.1:1', prefix },
      admin: { token: ADMIN_TOKEN },
      channels: [{ id: 'mock-1', type: 'mock', models: ['m'], max_concurrency: 1 }],
    };
    const path = await writeConfig(dir.dir, `${prefix}.yaml`, config);
    const gw = await spawnGateway({ env: cleanEnv({ SLOTGATE_CONFIG: path, REDIS_URL: redisUrl() }) });
    await gw.ready;
    const status = await call(gw, 'GET', '/admin/status', { token: ADMIN_TOKEN });
    expect(status.status, status.text).toBe(200);
    expect(status.json).toMatchObject({ store: 'redis', redis: { healthy: true }, config: { source: path } });
    const put = await call(gw, 'PUT', '/admin/settings', { token: ADMIN_TOKEN, body: { retry_times: 2 } });
    expect(put.status, put.text).toBe(200);
    expect(await redis.hgetall(`${prefix}:v1:settings`)).toEqual({ retry_times: '2' });
  }, 30_000);
});

describe('an invalid config file at start', () => {
  it('exits 2 with a message naming the path, the expectation and the value, and no secret', async () => {
    const secrets = {
      channelKey: 'sk-channel-secret-9f3a7c',
      headerValue: 'Bearer sk-header-secret-51d2',
      token: 'sk-client-secret-77e0b1',
      admin: 'adm-secret-0c4e2d',
      redisPassword: 'redis-pw-secret-3b8e',
    };
    const config = {
      redis: { url: `redis://:${secrets.redisPassword}@127.0.0.1:1`, prefix: 'bad config', timeout_ms: 5 },
      admin: { token: secrets.admin },
      tokens: [{ key: secrets.token, name: 'client' }],
      channels: [
        {
          id: 'openai-1',
          type: 'openai',
          base_url: 'https://api.example.com/v1',
          key: secrets.channelKey,
          models: ['gpt-test'],
          max_concurrency: -3,
          // a secret-bearing field with the wrong type: its value must not be echoed
          headers: { Authorization: [secrets.headerValue] },
        },
      ],
    };
    const path = await writeConfig(dir.dir, 'invalid.yaml', config);
    const gw = await spawnGateway({ configPath: path });
    const exit = await exitWithin(gw, 15_000);
    const output = gw.output();
    expect(exit, output).toEqual({ code: 2, signal: null });

    expect(output).toContain(`invalid configuration in ${path}`);
    expect(output).toMatch(/channels\[0\]\.max_concurrency: .*expected .*>=0.*, got -3/);
    expect(output).toMatch(/redis\.timeout_ms: .*expected .*>=10.*, got 5/);
    expect(output).toMatch(/redis\.prefix: no braces or spaces, got "bad config"/);
    expect(output).toMatch(
      /channels\[0\]\.headers\.Authorization: .*expected string.*, got \(a secret, not shown\)/,
    );
    for (const secret of Object.values(secrets)) expect(output).not.toContain(secret);
    expect(output).not.toContain('sk-');
    expect(output).not.toContain('listening');
  }, 30_000);

  it('exits 2 naming the variable of an unset env: secret, and a bad setting, in one message', async () => {
    const variable = `SLOTGATE_TEST_UNSET_${process.pid}`;
    const config = {
      tokens: [{ key: 'sk-client-secret-a1', name: 'client' }],
      channels: [
        {
          id: 'anthropic-1',
          type: 'anthropic',
          base_url: 'https://api.example.com',
          key: `env:${variable}`,
          models: ['claude-test'],
        },
      ],
      settings: { load_cache_ttl_ms: 9000 },
    };
    const path = await writeConfig(dir.dir, 'missing-env.yaml', config);
    const gw = await spawnGateway({ configPath: path });
    const exit = await exitWithin(gw, 15_000);
    const output = gw.output();
    expect(exit, output).toEqual({ code: 2, signal: null });
    expect(output).toContain(`invalid configuration in ${path}`);
    expect(output).toContain(
      `channels[0].key: expected the environment variable ${variable} to be set (from "env:${variable}"), got nothing`,
    );
    expect(output).toContain('settings: Expected `load_cache_ttl_ms` to be an integer in 1–5000, got 9000');
    expect(output).not.toContain('sk-client-secret-a1');
  }, 30_000);
});
