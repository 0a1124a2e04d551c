/**
 * GET /metrics under real traffic on the test Redis: the exposition is parsed line by line (test/helpers/prom-text.ts)
 * and every engine counter is checked against what the test itself sent and against admission.stats();
 * histograms are cumulative and count every admission; per-channel gauges are current in the same scrape; labels
 * carry channel ids, purposes and outcomes, never a token or a key.
 */
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { createGateway, type Gateway } from '../../packages/gateway/src/server.js';
import { PURPOSES } from '../../packages/slotgate/src/store/store.js';
import { parsePrometheusText, select, valueOf, type Exposition } from '../helpers/prom-text.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';
import { RedisServer } from '../helpers/redis-server.js';
import { useCleanups } from '../helpers/cleanups.js';

const SECRETS = {
  admin: 'adm-metrics-S3CRET-41d2',
  client: 'tok-metrics-S3CRET-9b07',
  channelKey: 'sk-metrics-S3CRET-c3e8',
} as const;
const CLIENT = { authorization: `Bearer ${SECRETS.client}`, 'content-type': 'application/json' };
const ADMIN = { authorization: `Bearer ${SECRETS.admin}`, 'content-type': 'application/json' };

const CHANNELS = [
  {
    id: 'pool',
    type: 'mock',
    models: ['m-pool'],
    max_concurrency: 4,
    mock: { latency_ms: 2, chunks: 2, chunk_delay_ms: 1 },
  },
  // Holds its one slot long enough for the scrape taken while it is busy (a bound, not a timing assertion).
  {
    id: 'solo',
    type: 'mock',
    models: ['m-solo'],
    max_concurrency: 1,
    mock: { latency_ms: 2000, chunks: 1 },
  },
  {
    id: 'queue',
    type: 'mock',
    models: ['m-queue'],
    max_concurrency: 1,
    mock: { latency_ms: 300, chunks: 1 },
  },
  { id: 'free', type: 'mock', models: ['m-free'], max_concurrency: 0, mock: { latency_ms: 1, chunks: 1 } },
  {
    id: 'real-off',
    type: 'openai',
    base_url: 'http://127.0.0.1:9/v1',
    key: SECRETS.channelKey,
    models: ['m-off'],
    max_concurrency: 3,
    enabled: false,
  },
] as const;

const cleanups = useCleanups();

async function startGateway(): Promise<{ gw: Gateway; prefix: string }> {
  const prefix = uniquePrefix('metrics');
  const config = parseConfig(
    {
      server: { host: '127.0.0.1', port: 0, drain_timeout_ms: 2000 },
      redis: { url: redisUrl(), prefix },
      admin: { token: SECRETS.admin },
      tokens: [{ key: SECRETS.client, name: 'metrics-test' }],
      channels: CHANNELS,
      settings: { wait_enabled: false, retry_times: 0 },
    },
    'metrics-test',
    {},
  );
  const gw = await createGateway({ config, logger: false });
  cleanups.push(async () => {
    await gw.close();
    const admin = new Redis(redisUrl());
    const keys = await admin.keys(`${prefix}:*`);
    if (keys.length) await admin.del(...keys);
    admin.disconnect();
  });
  return { gw, prefix };
}

async function chat(gw: Gateway, model: string): Promise<number> {
  const res = await gw.app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    headers: CLIENT,
    payload: { model, messages: [{ role: 'user', content: 'hi' }] },
  });
  return res.statusCode;
}

async function scrape(gw: Gateway): Promise<{ text: string; exp: Exposition }> {
  const res = await gw.app.inject({ method: 'GET', url: '/metrics' });
  expect(res.statusCode).toBe(200);
  expect(res.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
  return { text: res.body, exp: parsePrometheusText(res.body) };
}

/** Sum over every series of a family's sample name (e.g. a histogram's _count across outcomes). */
const total = (exp: Exposition, name: string, labels: Record<string, string> = {}) =>
  select(exp, name, labels).reduce((a, s) => a + s.value, 0);

function expectCumulativeHistogram(exp: Exposition, name: string): void {
  const counts = select(exp, `${name}_count`);
  expect(counts.length).toBeGreaterThan(0);
  for (const count of counts) {
    const buckets = select(exp, `${name}_bucket`, count.labels)
      .map((s) => ({ le: s.labels.le === '+Inf' ? Infinity : Number(s.labels.le), value: s.value }))
      .sort((a, b) => a.le - b.le);
    expect(buckets.length).toBeGreaterThan(2);
    expect(buckets.at(-1)!.le).toBe(Infinity);
    for (let i = 1; i < buckets.length; i++)
      expect(buckets[i]!.value).toBeGreaterThanOrEqual(buckets[i - 1]!.value);
    expect(buckets.at(-1)!.value).toBe(count.value);
    expect(valueOf(exp, `${name}_sum`, count.labels)).toBeGreaterThanOrEqual(0);
  }
}

const ALLOWED_LABELS = new Set([
  // slotgate's own
  'channel',
  'purpose',
  'outcome',
  'event',
  'result',
  'store',
  'source',
  'code',
  'le',
  // upstream answers' status class (2xx … error), retry and cooldown causes
  'class',
  'reason',
  // the Redis nodes the store writes to (host:port, and master / replica / standalone)
  'node',
  'role',
  // prom-client's default process/nodejs metrics
  'version',
  'major',
  'minor',
  'patch',
  'space',
  'kind',
  'type',
]);

function expectSafeLabels(text: string, exp: Exposition): void {
  for (const secret of Object.values(SECRETS)) expect(text).not.toContain(secret);
  const ids = new Set<string>(CHANNELS.map((c) => c.id));
  for (const sample of exp.samples) {
    for (const [name, value] of Object.entries(sample.labels)) {
      expect(ALLOWED_LABELS, `${sample.name} label ${name}`).toContain(name);
      for (const secret of Object.values(SECRETS)) expect(value).not.toContain(secret);
      expect(value).not.toMatch(/Bearer|sk-|tok-/);
      if (name === 'channel') expect(ids, `${sample.name} channel label`).toContain(value);
      if (name === 'code') expect(value).toMatch(/^[1-5]\d\d$/);
    }
  }
}

describe('GET /metrics', () => {
  it('the parser reads the format strictly', () => {
    const exp = parsePrometheusText(
      [
        '# HELP x_total a \\\\ help',
        '# TYPE x_total counter',
        'x_total{a="q\\"u\\\\o\\nte",b=""} 3',
        '# TYPE h histogram',
        'h_bucket{le="+Inf"} 2',
        'h_count 2',
        'h_sum 0.5',
        '# TYPE g gauge',
        'g{x="nan"} Nan',
        'g{x="inf"} +Inf',
      ].join('\n'),
    );
    expect(valueOf(exp, 'x_total', { a: 'q"u\\o\nte', b: '' })).toBe(3);
    expect(exp.families.get('x_total')!.help).toBe('a \\ help');
    expect(valueOf(exp, 'h_bucket', { le: '+Inf' })).toBe(2);
    expect(valueOf(exp, 'g', { x: 'nan' })).toBeNaN();
    expect(valueOf(exp, 'g', { x: 'inf' })).toBe(Infinity);
    expect(() => parsePrometheusText('undeclared 1')).toThrow(/undeclared/);
    expect(() => parsePrometheusText('# TYPE a gauge\na{b="c} 1')).toThrow(/unterminated/);
    expect(() => parsePrometheusText('# TYPE a gauge\na 1\na 2')).toThrow(/repeated/);
    expect(() => parsePrometheusText('# TYPE a gauge\na one')).toThrow(/bad value/);
  });

  it('exports every engine counter, moving with traffic and equal to what was sent and to admission.stats()', async () => {
    const { gw } = await startGateway();

    // First scrape, before any traffic: every configured channel already has its gauges.
    const first = await scrape(gw);
    for (const c of CHANNELS) {
      expect(valueOf(first.exp, 'slotgate_channel_max_concurrency', { channel: c.id })).toBe(
        c.max_concurrency,
      );
      for (const g of ['in_flight', 'waiting', 'cooling', 'local_in_flight'])
        expect(valueOf(first.exp, `slotgate_channel_${g}`, { channel: c.id })).toBe(0);
    }
    expect(valueOf(first.exp, 'slotgate_channels')).toBe(CHANNELS.length);
    expect(valueOf(first.exp, 'slotgate_store_up', { store: 'redis' })).toBe(1);
    expect(total(first.exp, 'slotgate_admissions_total')).toBe(0);
    for (const name of [
      'process_cpu_user_seconds_total',
      'process_resident_memory_bytes',
      'process_start_time_seconds',
      'nodejs_heap_size_used_bytes',
      'nodejs_eventloop_lag_seconds',
    ])
      expect(select(first.exp, name).length, name).toBe(1);

    // Traffic: admitted on a bounded and an unlimited channel, and a burst that one max-1 channel turns away.
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) statuses.push(await chat(gw, 'm-pool'));
    for (let i = 0; i < 5; i++) statuses.push(await chat(gw, 'm-free'));
    let held = true;
    const holder = chat(gw, 'm-solo').finally(() => (held = false));
    await expect.poll(() => gw.admission.stats().liveLeases).toBe(1);
    const rejected = await Promise.all([chat(gw, 'm-solo'), chat(gw, 'm-solo'), chat(gw, 'm-solo')]);
    expect(rejected).toEqual([429, 429, 429]);

    // A scrape while the slot is held shows it in that same scrape.
    const busy = await scrape(gw);
    expect(held, 'the solo request ended before the scrape; the channel latency is too short').toBe(true);
    expect(valueOf(busy.exp, 'slotgate_channel_in_flight', { channel: 'solo' })).toBe(1);
    expect(valueOf(busy.exp, 'slotgate_channel_local_in_flight', { channel: 'solo' })).toBe(1);
    expect(valueOf(busy.exp, 'slotgate_live_leases')).toBe(1);
    // the high-water mark, read from the store, with the window it covers; an unlimited channel has none
    expect(valueOf(busy.exp, 'slotgate_channel_in_flight_peak', { channel: 'solo' })).toBe(1);
    const window = valueOf(busy.exp, 'slotgate_channel_in_flight_peak_window_seconds', { channel: 'solo' });
    expect(window).toBeGreaterThanOrEqual(60);
    expect(window).toBeLessThanOrEqual(120);
    const pool = valueOf(busy.exp, 'slotgate_channel_in_flight_peak', { channel: 'pool' });
    expect(pool).toBeGreaterThanOrEqual(1);
    expect(pool).toBeLessThanOrEqual(4);
    expect(select(busy.exp, 'slotgate_channel_in_flight_peak', { channel: 'free' })).toEqual([]);

    statuses.push(await holder, ...rejected);
    // The slot goes back just after the response ends (the release is detached from the request).
    await expect.poll(async () => (await gw.store.readLoads(['solo'])).get('solo')!.active).toBe(0);
    const ok = statuses.filter((s) => s === 200).length;
    const turnedAway = statuses.filter((s) => s === 429).length;
    expect([ok, turnedAway]).toEqual([16, 3]);

    const before = gw.admission.stats();
    const s1 = await scrape(gw);
    const after = gw.admission.stats();

    expect(valueOf(s1.exp, 'slotgate_admissions_total', { outcome: 'acquired' })).toBe(ok);
    expect(valueOf(s1.exp, 'slotgate_admissions_total', { outcome: 'capacity_full' })).toBe(turnedAway);
    for (const outcome of [
      'capacity_queue_full',
      'capacity_wait_timeout',
      'capacity_aborted',
      'store_unavailable',
      'no_channel',
    ])
      expect(valueOf(s1.exp, 'slotgate_admissions_total', { outcome }), outcome).toBe(0);
    expect(valueOf(s1.exp, 'slotgate_responses_total', { source: 'upstream', code: '200' })).toBe(ok);
    expect(valueOf(s1.exp, 'slotgate_responses_total', { source: 'gateway', code: '429' })).toBe(turnedAway);

    // Redis commands by purpose: the engine's own counts (load reads and heartbeats may tick during the scrape).
    for (const purpose of PURPOSES) {
      const scraped = valueOf(s1.exp, 'slotgate_redis_commands_total', { purpose });
      expect(scraped, purpose).toBeGreaterThanOrEqual(before.commands[purpose]);
      expect(scraped, purpose).toBeLessThanOrEqual(after.commands[purpose]);
    }
    for (const purpose of ['acquire', 'release', 'wait', 'cooldown', 'renew'] as const)
      expect(valueOf(s1.exp, 'slotgate_redis_commands_total', { purpose }), purpose).toBe(
        before.commands[purpose],
      );
    // One release command per bounded admission; the unlimited channel costs none.
    expect(valueOf(s1.exp, 'slotgate_redis_commands_total', { purpose: 'release' })).toBe(11);
    // 10 + 1 sequential acquires, then the burst of 3, whose acquires may share one coalesced call
    const acquireCommands = valueOf(s1.exp, 'slotgate_redis_commands_total', { purpose: 'acquire' });
    // (+ the store's epoch check on its connection: one checkEpoch script call)
    expect(acquireCommands).toBeGreaterThanOrEqual(12 + 1);
    expect(acquireCommands).toBeLessThanOrEqual(before.acquireCalls + 1);
    expect(valueOf(s1.exp, 'slotgate_redis_commands_total', { purpose: 'load_read' })).toBeGreaterThan(0);
    expect(valueOf(s1.exp, 'slotgate_acquire_calls_total')).toBe(before.acquireCalls);
    expect(valueOf(s1.exp, 'slotgate_acquire_attempts_total')).toBe(before.acquireAttempts);
    expect(valueOf(s1.exp, 'slotgate_first_tries_total', { result: 'full' })).toBe(before.firstTriesFull);
    expect(valueOf(s1.exp, 'slotgate_first_tries_total', { result: 'free' }) + before.firstTriesFull).toBe(
      before.firstTries,
    );
    expect(before.firstTries).toBeGreaterThan(0);
    expect(valueOf(s1.exp, 'slotgate_leases_lost_total')).toBe(0);
    for (const [event, n] of Object.entries(before.loadView)) {
      const scraped = valueOf(s1.exp, 'slotgate_load_view_events_total', { event });
      expect(scraped, event).toBeGreaterThanOrEqual(n);
      expect(scraped, event).toBeLessThanOrEqual(after.loadView[event as keyof typeof after.loadView]);
    }

    // Histograms: cumulative buckets, one observation per admission.
    expectCumulativeHistogram(s1.exp, 'slotgate_admission_duration_seconds');
    expect(total(s1.exp, 'slotgate_admission_duration_seconds_count')).toBe(ok + turnedAway);
    expect(valueOf(s1.exp, 'slotgate_admission_duration_seconds_count', { outcome: 'acquired' })).toBe(ok);
    expect(valueOf(s1.exp, 'slotgate_admission_duration_seconds_count', { outcome: 'capacity_full' })).toBe(
      turnedAway,
    );
    expectCumulativeHistogram(s1.exp, 'slotgate_wait_duration_seconds');
    expect(valueOf(s1.exp, 'slotgate_wait_duration_seconds_count')).toBe(0);
    expect(valueOf(s1.exp, 'slotgate_channel_in_flight', { channel: 'solo' })).toBe(0);

    // More traffic, now with waiting on: every counter it touches moves between the two scrapes.
    const put = await gw.app.inject({
      method: 'PUT',
      url: '/admin/settings',
      headers: ADMIN,
      payload: { wait_enabled: true },
    });
    expect(put.statusCode).toBe(200);
    const pair = await Promise.all([chat(gw, 'm-queue'), chat(gw, 'm-queue')]);
    expect(pair).toEqual([200, 200]);
    const cool = await gw.app.inject({
      method: 'POST',
      url: '/admin/channels/pool/cooldown',
      headers: ADMIN,
      payload: { seconds: 60 },
    });
    expect(cool.statusCode).toBe(200);

    const s2 = await scrape(gw);
    const moved = (name: string, labels: Record<string, string> = {}) =>
      total(s2.exp, name, labels) - total(s1.exp, name, labels);
    expect(moved('slotgate_admissions_total', { outcome: 'acquired' })).toBe(2);
    expect(moved('slotgate_admission_duration_seconds_count', { outcome: 'acquired' })).toBe(2);
    expect(moved('slotgate_wait_duration_seconds_count')).toBe(1);
    expect(moved('slotgate_responses_total', { source: 'upstream', code: '200' })).toBe(2);
    expect(moved('slotgate_redis_commands_total', { purpose: 'acquire' })).toBeGreaterThanOrEqual(1);
    // the first response's slot goes back through Redis, which grants it to the waiting second request; the release
    // came from the waiter's own instance, so the grant is a full lease named in its reply: no claim (and the default
    // 60 s lease TTL renews nothing within the test); a handoff never passes a slot ahead of a queue
    expect(moved('slotgate_redis_commands_total', { purpose: 'release' })).toBe(2);
    expect(moved('slotgate_grants_total')).toBe(1);
    expect(moved('slotgate_handoffs_total')).toBe(0);
    expect(moved('slotgate_redis_commands_total', { purpose: 'renew' })).toBe(0);
    // the waiter joined the one queue of its one channel and was granted out of it: nothing to leave
    expect(moved('slotgate_redis_commands_total', { purpose: 'wait' })).toBe(1);
    expect(moved('slotgate_redis_commands_total', { purpose: 'settings' })).toBeGreaterThan(0);
    // the cooldown key, and its end in the load summary (HSET, PEXPIRE)
    expect(moved('slotgate_redis_commands_total', { purpose: 'cooldown' })).toBe(3);
    expect(moved('process_cpu_user_seconds_total')).toBeGreaterThanOrEqual(0);
    expectCumulativeHistogram(s2.exp, 'slotgate_wait_duration_seconds');
    expect(valueOf(s2.exp, 'slotgate_wait_duration_seconds_sum')).toBeGreaterThan(0);
    // The cooldown shows on the channel's gauges at once.
    expect(valueOf(s2.exp, 'slotgate_channel_cooling', { channel: 'pool' })).toBe(1);
    const remaining = valueOf(s2.exp, 'slotgate_channel_cooldown_remaining_seconds', { channel: 'pool' });
    expect(remaining).toBeGreaterThan(50);
    expect(remaining).toBeLessThanOrEqual(60);
    expect(valueOf(s2.exp, 'slotgate_channel_cooling', { channel: 'queue' })).toBe(0);

    for (const { text, exp } of [first, busy, s1, s2]) expectSafeLabels(text, exp);
    // Bounded cardinality: one series per configured channel in every per-channel gauge, per bounded channel in the
    // high-water mark's (the upstream counters and histograms have a series per channel that was called, and their
    // channel labels are checked above).
    const bounded = CHANNELS.filter((c) => c.max_concurrency > 0).length;
    for (const f of s2.exp.families.values())
      if (f.type === 'gauge' && f.samples.some((s) => 'channel' in s.labels))
        expect(f.samples.length, f.name).toBe(f.name.includes('_peak') ? bounded : CHANNELS.length);
  });

  it('reports the store down when its Redis stops answering', async () => {
    const server = await RedisServer.start();
    cleanups.push(() => server.stop());
    const config = parseConfig(
      {
        redis: { url: server.url, prefix: uniquePrefix('metrics-down'), timeout_ms: 200 },
        admin: { token: SECRETS.admin },
        tokens: [{ key: SECRETS.client, name: 'metrics-test' }],
        channels: CHANNELS,
      },
      'metrics-down',
      {},
    );
    const gw = await createGateway({ config, logger: false });
    cleanups.push(() => gw.close());
    expect(valueOf((await scrape(gw)).exp, 'slotgate_store_up', { store: 'redis' })).toBe(1);

    await server.stop();
    expect(await chat(gw, 'm-pool')).toBe(503);
    expect(await chat(gw, 'm-free')).toBe(200);
    const { exp } = await scrape(gw);
    expect(valueOf(exp, 'slotgate_store_up', { store: 'redis' })).toBe(0);
    expect(valueOf(exp, 'slotgate_admissions_total', { outcome: 'store_unavailable' })).toBe(1);
    expect(valueOf(exp, 'slotgate_admissions_total', { outcome: 'acquired' })).toBe(1);
    expect(valueOf(exp, 'slotgate_responses_total', { source: 'gateway', code: '503' })).toBe(1);
    // The configuration is still exported with the store down.
    expect(valueOf(exp, 'slotgate_channel_max_concurrency', { channel: 'solo' })).toBe(1);
  });
});
