/**
 * A lowered max reaches a waiter's registration in Redis (admission/waiting.ts, reconfigure → move → the requeue
 * script): after `configChanged()`, each waiter of this instance stands in the channel's queue (`<prefix>:v1:{X}:fifo`,
 * member `<max>|<live>|<token>`) under the new max and a new token, with its lifetime and its arrival score unchanged,
 * so it keeps its place; a waiter of another instance (no engine here to move it) is left as it was.
 */
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { useCleanups } from '../helpers/cleanups.js';
import { clearOn, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { until } from '../helpers/until.js';

const cleanups = useCleanups();
const SETTINGS = { wait_timeout_ms: 30_000, max_waiting_per_channel: 20 };

let client: Redis;

interface Entry {
  max: string;
  live: string;
  token: string;
  score: string;
}

/** The queue's registrations, oldest first. */
async function entries(key: string): Promise<Entry[]> {
  const flat = await client.zrange(key, 0, -1, 'WITHSCORES');
  const out: Entry[] = [];
  for (let i = 0; i < flat.length; i += 2) {
    const [max, live, ...token] = flat[i]!.split('|');
    out.push({ max: max!, live: live!, token: token.join('|'), score: flat[i + 1]! });
  }
  return out;
}

describe('a lowered max requeues the waiters in Redis', () => {
  it('max 2 → 1: each waiter is registered again under max 1 with a new token, at its own arrival score', async () => {
    const prefix = uniquePrefix('requeue');
    client = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
    cleanups.push(() => client.disconnect());
    cleanups.push(() => clearOn({ url: redisUrl() }, `${prefix}:*`));
    const store = new RedisStore({ url: redisUrl(), prefix });
    const admission = createAdmission({ store, settings: SETTINGS });
    cleanups.push(() => store.close());
    cleanups.push(() => admission.close());
    let channels: Candidate[] = [{ id: 'x', maxConcurrency: 2 }];
    const resolve = () => channels;
    const queue = store.keys.queue('x');

    const held = [
      await admission.acquire({ candidates: channels }),
      await admission.acquire({ candidates: channels }),
    ];
    expect(held.map((t) => t.channel.id)).toEqual(['x', 'x']);
    const waiters = [admission.acquire({ candidates: channels, resolve })];
    await until(async () => (await client.zcard(queue)) === 1, 'the first waiter queued');
    // a waiter of another instance, between this instance's two
    const foreign = { channelId: 'x', token: 'foreign:1', max: 2 };
    expect(await store.enqueue(foreign, { maxWaiting: 20, ttlMs: 30_000, leaseTtlMs: 30_000 })).toBe(
      'queued',
    );
    waiters.push(admission.acquire({ candidates: channels, resolve }));
    await until(async () => (await client.zcard(queue)) === 3, 'the second waiter queued');
    for (const w of waiters) w.catch(() => {}); // they end with the admission, after the test
    const before = await entries(queue);
    expect(before.map((e) => e.max)).toEqual(['2', '2', '2']);
    expect(before[1]!.token).toBe('foreign:1');

    channels = [{ id: 'x', maxConcurrency: 1 }];
    admission.configChanged();
    const ours = (list: Entry[]) => list.filter((e) => e.token !== 'foreign:1').map((e) => e.token);
    const after = await until(
      async () => {
        const now = await entries(queue);
        return ours(now).some((t) => ours(before).includes(t)) ? undefined : now;
      },
      "the waiters' old registrations gone from the queue",
      { timeoutMs: 5_000 },
    ).catch(async () => entries(queue)); // (the assertions below say what is there instead)

    expect(after.map((e) => [e.max, e.live, e.score])).toEqual(
      before.map((e, i) => [i === 1 ? '2' : '1', e.live, e.score]),
    );
    expect(after[1]!.token).toBe('foreign:1');
    for (const i of [0, 2]) {
      expect(after[i]!.token).not.toBe(before[i]!.token);
      expect(before.map((e) => e.token)).not.toContain(after[i]!.token);
    }
    expect(await client.zcard(store.keys.slots('x'))).toBe(2); // nothing granted: both slots still held
  });
});
