/**
 * Issue 35, item 8: every key slotgate writes has a TTL, but the documented exceptions (docs/redis.md, "Nothing is left
 * behind": the epoch key, the settings overrides and their record). Two gateways share the test Redis and exercise
 * every kind of key — slots, a queue, a limited client's slots, a cooldown, the load summary, the high-water marks,
 * settings, the instance list — then the prefix is scanned while the traffic still holds slots and again after it.
 */
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { createGateway, type Gateway } from '../../packages/gateway/src/server.js';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { useCleanups } from '../helpers/cleanups.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';

const cleanups = useCleanups();
const ADMIN = 'adm-expiry-S3CRET';
const CLIENT = 'tok-expiry-S3CRET';

async function gateway(prefix: string): Promise<Gateway> {
  const config = parseConfig(
    {
      redis: { url: redisUrl(), prefix },
      admin: { token: ADMIN },
      tokens: [{ key: CLIENT, name: 'expiry', max_concurrency: 3 }],
      channels: [
        { id: 'one', type: 'mock', models: ['m'], max_concurrency: 1, mock: { latency_ms: 300 } },
        { id: 'cool', type: 'mock', models: ['c'], max_concurrency: 2, mock: { latency_ms: 0 } },
      ],
      settings: { wait_enabled: true, wait_timeout_ms: 5000 },
    },
    'expiry-test',
    {},
  );
  const gw = await createGateway({ config, logger: false });
  cleanups.push(() => gw.close());
  await gw.app.ready();
  return gw;
}

const chat = (gw: Gateway, model: string) =>
  gw.app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    headers: { authorization: `Bearer ${CLIENT}`, 'content-type': 'application/json' },
    payload: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
  });

const admin = (gw: Gateway, method: 'GET' | 'PUT' | 'POST', url: string, payload?: unknown) =>
  gw.app.inject({
    method,
    url,
    headers: { authorization: `Bearer ${ADMIN}` },
    ...(payload !== undefined && { payload: payload as object }),
  });

/** The prefix's keys without a TTL. */
async function withoutTtl(redis: Redis, prefix: string): Promise<{ all: string[]; none: string[] }> {
  const all = (await redis.keys(`${prefix}:*`)).sort();
  const none: string[] = [];
  for (const key of all) if ((await redis.pttl(key)) === -1) none.push(key);
  return { all, none };
}

describe('key expiry', () => {
  it('every key slotgate writes has a TTL, but the epoch key and the settings overrides with their record', async () => {
    const prefix = uniquePrefix('expiry');
    const keys = new KeyBuilder(prefix);
    const redis = new Redis(redisUrl());
    cleanups.push(async () => {
      const left = await redis.keys(`${prefix}:*`);
      if (left.length) await redis.del(...left);
      redis.disconnect();
    });
    const [a, b] = [await gateway(prefix), await gateway(prefix)];
    expect((await admin(a, 'PUT', '/admin/settings', { load_cache_ttl_ms: 250 })).statusCode).toBe(200);
    // three requests on a max-1 channel from two gateways: a queue forms; the client's own limit is used too
    const running = [chat(a, 'm'), chat(b, 'm'), chat(a, 'm')];
    await expect.poll(async () => redis.exists(keys.queue('one')), { timeout: 10_000 }).toBe(1);
    expect((await chat(b, 'c')).statusCode).toBe(200);
    expect((await admin(b, 'POST', '/admin/channels/cool/cooldown', { seconds: 60 })).statusCode).toBe(200);
    for (const gw of [a, b]) {
      expect((await gw.app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(200);
      expect((await admin(gw, 'GET', '/admin/fleet')).statusCode).toBe(200);
    }
    const busy = await withoutTtl(redis, prefix);
    expect((await Promise.all(running)).map((r) => r.statusCode)).toEqual([200, 200, 200]);
    const after = await withoutTtl(redis, prefix);

    const exceptions = [keys.epoch(), keys.settings(), keys.settingsRecord()].sort();
    // every kind was written: the check covers each
    const kinds = new Set(busy.all.map((k) => keys.parse(k)?.kind));
    for (const kind of [
      'slots',
      'queue',
      'cooldown',
      'peak',
      'settings',
      'instances',
      'epoch',
      'load_counts',
    ])
      expect(kinds, kind).toContain(kind);
    expect(busy.all.some((k) => k.includes('%00client:'))).toBe(true); // the limited client's own slots
    expect(busy.none).toEqual(exceptions);
    expect(after.none).toEqual(exceptions);
  });
});
