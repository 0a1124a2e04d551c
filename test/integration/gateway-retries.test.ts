/**
 * Upstream errors through the gateway, on a real Redis with a fake upstream: an upstream 429 cools
 * the channel down for its Retry-After and the request is served by another channel; a 5xx other than 504 and a
 * connection error are retried elsewhere, a 504 is not; a quota 429 starts no cooldown; when the retries are used up
 * the client gets the upstream's own status and body, never a slotgate 429 in its place.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import type { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { FakeUpstream, gate } from '../helpers/fake-upstream.js';
import {
  ADMIN,
  CLIENT,
  SECRETS,
  call,
  chat,
  configDoc,
  startGateway,
  streamingCall,
  within,
  type TestGateway,
  expectNoSecretsLogged,
} from '../helpers/gateway.js';
import { freePort } from '../helpers/redis-server.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

let up: FakeUpstream;
beforeEach(async () => {
  up = await FakeUpstream.start();
  cleanups.push(() => up.close());
});

/** An openai channel on the fake upstream. */
const channel = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  type: 'openai',
  base_url: up.url(id),
  key: SECRETS.channelKey,
  models: ['gpt-x'],
  max_concurrency: 4,
  ...extra,
});

async function gatewayWith(
  channels: Record<string, unknown>[],
  settings: Record<string, unknown> = {},
): Promise<TestGateway> {
  const gw = await startGateway(configDoc({ channels, settings }));
  cleanups.push(() => gw.close());
  return gw;
}

/** Two bounded channels: `first` (priority 10) is tried before `second` (priority 0). */
const twoChannels = (settings: Record<string, unknown> = {}, extra: Record<string, unknown>[] = []) =>
  gatewayWith([channel('first', { priority: 10 }), channel('second', { priority: 0 }), ...extra], settings);

const store = (gw: TestGateway) => gw.gateway.store as RedisStore;
const ask = (gw: TestGateway, model = 'gpt-x') =>
  call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat(model) });

async function adminChannel(gw: TestGateway, id: string) {
  const res = await call(`${gw.url}/admin/channels`, { headers: ADMIN });
  expect(res.status).toBe(200);
  const list = (res.json() as { channels: { id: string; cooling: boolean; cooldown_remaining_ms: number }[] })
    .channels;
  return list.find((c) => c.id === id)!;
}

const upstreamError = (message: string, type = 'server_error') => ({ error: { message, type, code: null } });

describe('gateway retries and cooldowns', () => {
  it('an upstream 429 with Retry-After: 7 cools the channel ~7 s and the request is served by another channel', async () => {
    const gw = await twoChannels();
    up.on('first', {
      status: 429,
      headers: { 'retry-after': '7' },
      json: upstreamError('slow down', 'rate_limit'),
    });
    up.on('second', { json: { id: 'from-second' } });

    const res = await ask(gw);
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ id: 'from-second' });
    expect(res.headers['x-slotgate-channel']).toBe('second');
    expect(up.requests('first')).toHaveLength(1);

    const cooldown = await store(gw).readCooldown('first');
    expect(cooldown?.reason).toBe('upstream 429');
    expect(cooldown!.remainingMs).toBeGreaterThan(5000);
    expect(cooldown!.remainingMs).toBeLessThanOrEqual(7000);
    const admin = await adminChannel(gw, 'first');
    expect(admin.cooling).toBe(true);
    expect(admin.cooldown_remaining_ms).toBeGreaterThan(5000);
    expect(admin.cooldown_remaining_ms).toBeLessThanOrEqual(7000);
    expect(await store(gw).readCooldown('second')).toBeNull();

    // while it cools, the next request goes straight to the other channel
    const next = await ask(gw);
    expect(next.status).toBe(200);
    expect(up.requests('first')).toHaveLength(1);
    expect(up.requests('second')).toHaveLength(2);
  });

  it('an upstream 500 is retried on another channel and starts no cooldown', async () => {
    const gw = await twoChannels();
    up.on('first', { status: 500, json: upstreamError('boom') });
    up.on('second', { json: { id: 'from-second' } });
    const res = await ask(gw);
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ id: 'from-second' });
    expect(up.requests('first')).toHaveLength(1);
    expect(up.requests('second')).toHaveLength(1);
    expect(await store(gw).readCooldown('first')).toBeNull();
  });

  it("a first attempt stands in the queues as of the request's arrival at the gateway, a retry as of its own acquire", async () => {
    const gw = await twoChannels();
    const { admission } = gw.gateway;
    const acquire = admission.acquire.bind(admission);
    const asked: (number | undefined)[] = [];
    admission.acquire = (request) => {
      asked.push(request.arrivedMsAgo);
      return acquire(request);
    };
    up.on('first', { status: 500, json: upstreamError('boom') });
    up.on('second', { json: { id: 'from-second' } });
    const res = await ask(gw);
    expect(res.status).toBe(200);
    expect(asked).toHaveLength(2);
    // the time since Fastify began handling the request (its auth, body and routing came first)
    expect(asked[0]).toBeGreaterThan(0);
    expect(asked[1]).toBeUndefined();
  });

  it('a connection error is retried on another channel', async () => {
    const deadPort = await freePort();
    const gw = await twoChannels({}, [
      channel('dead', { base_url: `http://127.0.0.1:${deadPort}`, priority: 20 }),
    ]);
    up.on('first', { json: { id: 'from-first' } });
    const res = await ask(gw);
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ id: 'from-first' });
    expect(res.headers['x-slotgate-channel']).toBe('first');
  });

  it('a connection error after an upstream 429 passes the upstream 429 on, not a slotgate 502', async () => {
    const deadPort = await freePort();
    const gw = await gatewayWith(
      [
        channel('first', { priority: 10 }),
        channel('dead', { base_url: `http://127.0.0.1:${deadPort}`, priority: 0 }),
      ],
      { retry_times: 1 },
    );
    const body = '{"error":{"message":"first is rate limited","type":"requests","code":"rl"}}';
    up.on('first', { status: 429, headers: { 'retry-after': '9' }, body });
    const res = await ask(gw);
    expect(res.status).toBe(429);
    expect(res.text).toBe(body);
    expect(res.text).not.toContain('upstream_unreachable');
    expect(res.headers['x-slotgate-channel']).toBe('first');
  });

  it('an upstream 504 is not retried: the client gets its body as it is', async () => {
    const gw = await twoChannels();
    const body = '{"error":{"message":"upstream gateway timeout","type":"timeout","code":"t504"}}';
    up.on('first', { status: 504, body, headers: { 'x-upstream-thing': 'kept' } });
    const res = await ask(gw);
    expect(res.status).toBe(504);
    expect(res.text).toBe(body);
    expect(res.headers['x-upstream-thing']).toBe('kept');
    expect(res.headers['x-slotgate-channel']).toBe('first');
    expect(up.requests('second')).toHaveLength(0);
    expect(await store(gw).readCooldown('first')).toBeNull();
  });

  it('a quota-exhausted 429 starts no cooldown (and is still retried elsewhere)', async () => {
    const gw = await twoChannels();
    up.on('first', {
      status: 429,
      headers: { 'retry-after': '7' },
      json: upstreamError('You exceeded your quota', 'insufficient_quota'),
    });
    up.on('second', { json: { id: 'from-second' } });
    const res = await ask(gw);
    expect(res.status).toBe(200);
    expect(res.headers['x-slotgate-channel']).toBe('second');
    expect(await store(gw).readCooldown('first')).toBeNull();
    expect((await adminChannel(gw, 'first')).cooling).toBe(false);
  });

  it('with the retries used up the client gets the last upstream status and body', async () => {
    const gw = await twoChannels({ retry_times: 1 });
    const secondBody = '{"error":{"message":"second is unhappy","type":"server_error","code":"s503"}}';
    up.on('first', { status: 500, json: upstreamError('first is unhappy') });
    up.on('second', { status: 503, body: secondBody, headers: { 'retry-after': '3' } });
    const res = await ask(gw);
    expect(res.status).toBe(503);
    expect(res.text).toBe(secondBody);
    expect(res.headers['retry-after']).toBe('3');
    expect(res.headers['x-slotgate-channel']).toBe('second');
  });

  it('retry_times 0: a 500 goes back to the client at once', async () => {
    const gw = await twoChannels({ retry_times: 0 });
    up.on('first', { status: 500, json: upstreamError('first is unhappy') });
    const res = await ask(gw);
    expect(res.status).toBe(500);
    expect(res.json()).toEqual(upstreamError('first is unhappy'));
    expect(up.requests('second')).toHaveLength(0);
  });

  it('every channel answering 429: the client gets the upstream 429, never a slotgate one', async () => {
    const gw = await twoChannels({ retry_times: 5 });
    const secondBody =
      '{"error":{"message":"upstream says too many requests","type":"requests","code":"rl"}}';
    up.on('first', { status: 429, headers: { 'retry-after': '5' }, json: upstreamError('first limited') });
    up.on('second', { status: 429, headers: { 'retry-after': '6' }, body: secondBody });
    const res = await ask(gw);
    expect(res.status).toBe(429);
    expect(res.text).toBe(secondBody);
    expect(res.text).not.toContain('channel_capacity_exhausted');
    expect(res.headers['retry-after']).toBe('6');
    expect(up.requests('first')).toHaveLength(1);
    expect(up.requests('second')).toHaveLength(1);
  });

  it('a retry that finds the other channel full passes the upstream error on, not a capacity 429', async () => {
    const hold = gate();
    cleanups.push(() => hold.open());
    const gw = await gatewayWith(
      [
        channel('first', { priority: 10 }),
        channel('second', { models: ['gpt-x', 'only-second'], max_concurrency: 1 }),
      ],
      { wait_enabled: false, retry_times: 3 },
    );
    up.on('first', { status: 502, json: upstreamError('bad gateway upstream') });
    up.on('second', { sse: ['data: {}\n\n', () => hold.promise, 'data: [DONE]\n\n'] });

    // the only slot of `second` is taken by a stream
    const holder = streamingCall(`${gw.url}/v1/chat/completions`, chat('only-second', { stream: true }));
    await within(holder.firstChunk, 5000, 'holder stream');

    const res = await ask(gw);
    expect(res.status).toBe(502);
    expect(res.json()).toEqual(upstreamError('bad gateway upstream'));
    expect(res.headers['x-slotgate-channel']).toBe('first');
    expect(up.requests('second')).toHaveLength(1);
    hold.open();
    await within(holder.body, 5000, 'holder body');
  });

  it('an upstream 429 on an unlimited channel cools it in memory only, with no Redis key', async () => {
    const gw = await gatewayWith([
      channel('free', { priority: 20, max_concurrency: 0 }),
      channel('first', { max_concurrency: 2 }),
    ]);
    up.on('free', { status: 429, headers: { 'retry-after': '9' }, json: upstreamError('limited') });
    up.on('first', { json: { id: 'from-first' } });
    const res = await ask(gw);
    expect(res.status).toBe(200);
    expect(res.headers['x-slotgate-channel']).toBe('first');
    const free = await adminChannel(gw, 'free');
    expect(free.cooling).toBe(true);
    expect(free.cooldown_remaining_ms).toBeGreaterThan(7000);
    expect(free.cooldown_remaining_ms).toBeLessThanOrEqual(9000);
    expect(await store(gw).readCooldown('free')).toBeNull();
    // the next request skips the cooling channel
    await ask(gw);
    expect(up.requests('free')).toHaveLength(1);
  });
});
