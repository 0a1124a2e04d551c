/**
 * RedisStore's Redis cost, measured twice: on the client (a counting ioredis client passed as `client:`) and on the
 * server (INFO commandstats of a private redis-server that only this file uses, so every call in it is ours).
 * The per-operation numbers asserted here are the ones docs/redis.md lists.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../packages/slotgate/src/core/clock.js';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { RedisClock } from '../../packages/slotgate/src/store/redis/redis-time.js';
import {
  PURPOSES,
  emptyCounts,
  type LeaseRef,
  type Purpose,
} from '../../packages/slotgate/src/store/store.js';
import { RedisServer } from '../helpers/redis-server.js';
import { countingClient, uniquePrefix, type CountingClient } from '../helpers/redis.js';

/** Connection housekeeping (handshakes, the INFO that reads the stats): not store work. */
const HOUSEKEEPING = new Set(['info', 'client', 'ping', 'hello', 'select', 'command', 'config', 'quit']);
const WRITES = [
  'zadd',
  'zrem',
  'zremrangebyscore',
  'pexpire',
  'expire',
  'del',
  'set',
  'unlink',
  'eval',
  'evalsha',
];

const opts = (token: string, leaseTtlMs = 60_000, checkCooldown = true) => ({
  token,
  leaseTtlMs,
  checkCooldown,
});
/** A waiter on the channel under `max`, and the options of its enqueue. */
const waiter = (channelId: string, token: string, max: number) => ({ channelId, token, max });
const waitOpts = (maxWaiting = 5) => ({ maxWaiting, ttlMs: 60_000, leaseTtlMs: 60_000 });

let server: RedisServer;
let cc: CountingClient;
let store: RedisStore;
const prefix = uniquePrefix('store');

beforeAll(async () => {
  server = await RedisServer.start();
  // Default client options (auto-pipelining on), as a store created from a URL would use.
  cc = await countingClient(server.url);
  store = new RedisStore({ client: cc.client, prefix });
  // The first call of each script on a connection is sent as EVAL with the body (ioredis); warm every one up so
  // the measurements below show the steady state (EVALSHA).
  await store.acquireFirst([{ channelId: 'warm', max: 1 }], opts('warm:1'));
  await store.renew([{ channelId: 'warm', token: 'warm:1' }], 60_000);
  expect(await store.enqueue(waiter('warm', 'warm:w', 1), waitOpts())).toBe('queued');
  expect(await store.pollWaiter(waiter('warm', 'warm:w', 1), 60_000)).toBe('queued');
  expect(await store.release({ channelId: 'warm', token: 'warm:1' })).toBe(true); // releaseSlot: a grant
  expect(await store.leaveQueue(waiter('warm', 'warm:w', 1), 60_000)).toBe(true);
});

afterAll(async () => {
  await store?.close();
  await cc?.close();
  await server?.stop();
});

interface Measured {
  /** Command names the client sent (evalsha for script calls). */
  sent: string[];
  /** Sizes of pipelines the client executed. */
  pipelines: number[];
  /** Server-side calls by command, including those run inside scripts (housekeeping removed). */
  server: Record<string, number>;
  /** The store's own `commands` counters, delta by purpose (non-zero only). */
  counted: Partial<Record<Purpose, number>>;
}

function diff(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, calls] of Object.entries(after)) {
    const d = calls - (before[name] ?? 0);
    if (d > 0 && !HOUSEKEEPING.has(name)) out[name] = d;
  }
  return out;
}

async function measure(
  op: () => Promise<unknown>,
  target: { cc: CountingClient; store: RedisStore } = { cc, store },
  { freshClock = true }: { freshClock?: boolean } = {},
): Promise<Measured> {
  // the acquire script scores leases by the store's estimate of the Redis clock while a TIME sent and answered in the
  // last 10 s backs it (RedisClock.upperNow), else it reads TIME: measured with one fresh, as in steady traffic
  if (freshClock) {
    const { redisClock } = target.store as unknown as { redisClock: RedisClock };
    const sentAt = redisClock.sending();
    redisClock.learn(await target.cc.client.time(), sentAt);
  }
  const before = await server.commandstats();
  const countedBefore = { ...target.store.commands };
  target.cc.reset();
  await op();
  const sent = [...target.cc.sent];
  const pipelines = [...target.cc.pipelines];
  const after = await server.commandstats();
  const counted: Partial<Record<Purpose, number>> = {};
  for (const p of PURPOSES) {
    const d = target.store.commands[p] - countedBefore[p];
    if (d) counted[p] = d;
  }
  return { sent, pipelines, server: diff(before, after), counted };
}

describe('RedisStore command cost (client and server side)', () => {
  it('a cooling channel costs exactly one EVALSHA, which runs EXISTS only', async () => {
    await store.setCooldown('cool', 30_000, 'upstream 429');
    const m = await measure(async () => {
      expect(await store.acquireFirst([{ channelId: 'cool', max: 3 }], opts('c:1'))).toEqual(['cooling']);
    });
    expect(m.sent).toEqual(['evalsha']);
    expect(m.server).toEqual({ evalsha: 1, exists: 1 });
    for (const name of ['zcard', 'time', 'zadd', 'zremrangebyscore', 'pexpire']) {
      expect(m.server[name]).toBeUndefined();
    }
    expect(m.counted).toEqual({ acquire: 1 });
  });

  it('readLoads of 125 channels: 125 loads, one TIME, pipelines of 50+50+25 channels, no write at all', async () => {
    // A client without auto-pipelining, so every pipeline the counter records is one the store built itself
    // (with auto-pipelining ioredis also routes single commands such as TIME through client.pipeline()).
    const explicit = await countingClient(server.url, { enableAutoPipelining: false });
    const reader = new RedisStore({ client: explicit.client, prefix });
    try {
      const ids = Array.from({ length: 125 }, (_, i) => `load-${i}`);
      await store.acquireFirst([{ channelId: 'load-7', max: 4 }], opts('l:1'));
      await store.acquireFirst([{ channelId: 'load-7', max: 4 }], opts('l:2'));
      await store.acquireFirst([{ channelId: 'load-60', max: 1 }], opts('l:3'));
      expect(await store.enqueue(waiter('load-60', 'w:1', 1), waitOpts())).toBe('queued');
      await store.setCooldown('load-124', 30_000, 'x');
      let loads = new Map();
      const m = await measure(
        async () => {
          loads = await reader.readLoads(ids);
        },
        { cc: explicit, store: reader },
        { freshClock: false },
      );
      expect(loads.size).toBe(125);
      expect(loads.get('load-7')).toMatchObject({ active: 2, waiting: 0, coolingDown: false });
      expect(loads.get('load-60')).toMatchObject({ active: 1, waiting: 1, coolingDown: false });
      expect(loads.get('load-124')).toMatchObject({ active: 0, waiting: 0, coolingDown: true });
      expect(loads.get('load-0')).toEqual({
        active: 0,
        waiting: 0,
        coolingDown: false,
        cooldownRemainingMs: 0,
      });

      expect(m.pipelines).toEqual([150, 150, 75]);
      expect(explicit.count('time')).toBe(1);
      expect(explicit.count('zcount')).toBe(250);
      expect(explicit.count('pttl')).toBe(125);
      expect(m.sent).toHaveLength(1 + 375);
      expect(m.server).toEqual({ time: 1, zcount: 250, pttl: 125 });
      for (const name of WRITES) expect(m.server[name]).toBeUndefined();
      expect(m.counted).toEqual({ load_read: 376 });
    } finally {
      await explicit.close();
    }
  });

  it('the store counters agree with the counting client over a mixed, concurrent workload', async () => {
    const before = { ...store.commands };
    cc.reset();
    await Promise.all([
      store.acquireFirst([{ channelId: 'mix', max: 3 }], opts('m:1')),
      store.acquireFirst([{ channelId: 'mix', max: 3 }], opts('m:2')),
      store.enqueue(waiter('mix', 'w:1', 3), waitOpts()),
      store.readLoads(['mix', 'other', 'third']),
      store.setCooldown('mix-c', 1_000, 'r'),
      store.readCooldown('mix-c'),
      store.release({ channelId: 'other', token: 'nope' }),
      store.renew(
        Array.from({ length: 60 }, (_, i) => ({ channelId: 'mix', token: `ghost:${i}` })),
        60_000,
      ),
    ]);
    await store.leaveQueue(waiter('mix', 'w:1', 3), 60_000);
    await store.clearCooldown('mix-c');
    const delta = emptyCounts();
    for (const p of PURPOSES) delta[p] = store.commands[p] - before[p];
    // the two acquires of the same turn are one script call
    // the load read carries a TIME when the clock estimate is a second old (when depends on the tests before)
    expect(cc.count('time')).toBeLessThanOrEqual(1);
    expect(delta).toEqual({
      load_read: cc.count('time') + 3 * 3,
      acquire: 1,
      release: 1,
      renew: 2,
      wait: 2,
      // set + the summary's note of its end (HSET, PEXPIRE), get + pttl, del + the note's removal
      cooldown: 3 + 2 + 2,
      settings: 0,
    });
    expect(cc.sent).toHaveLength(Object.values(delta).reduce((a, b) => a + b, 0));
    // acquire, renew ×2, enqueue and leave are script calls; the release (no queue known, none registering on its
    // channel) a plain ZREM
    expect(cc.count('evalsha')).toBe(1 + 2 + 2);
    expect(cc.count('zrem')).toBe(1);
  });

  describe('per operation (the table in docs/redis.md)', () => {
    it('acquire that admits (new channel)', async () => {
      const m = await measure(() => store.acquireFirst([{ channelId: 'ok', max: 2 }], opts('a:1')));
      expect(m.sent).toEqual(['evalsha']);
      // the key was missing (the EXISTS says so: no ZCARD): PEXPIRE with the first lease, no PTTL
      expect(m.server).toEqual({ evalsha: 1, exists: 1, zadd: 1, pexpire: 1 });
      expect(m.counted).toEqual({ acquire: 1 });
    });

    it('acquire that admits, cooldown check off', async () => {
      const m = await measure(() =>
        store.acquireFirst([{ channelId: 'ok-nc', max: 2 }], opts('a:1', 60_000, false)),
      );
      expect(m.sent).toEqual(['evalsha']);
      // the queue is checked whatever the cooldown setting: one EXISTS
      expect(m.server).toEqual({ evalsha: 1, exists: 1, zadd: 1, pexpire: 1 });
    });

    it('acquire that finds the channel full', async () => {
      await store.acquireFirst([{ channelId: 'busy', max: 1 }], opts('b:1'));
      const m = await measure(async () => {
        expect(await store.acquireFirst([{ channelId: 'busy', max: 1 }], opts('b:2'))).toEqual(['full']);
      });
      expect(m.sent).toEqual(['evalsha']);
      expect(m.server).toEqual({ evalsha: 1, exists: 1, time: 1, zcard: 1, zremrangebyscore: 1 });
      expect(m.counted).toEqual({ acquire: 1 });
    });

    it('one acquire call over three channels (full, cooling, free)', async () => {
      await store.acquireFirst([{ channelId: 'm-full', max: 1 }], opts('p:1'));
      await store.setCooldown('m-cool', 30_000, 'x');
      const targets = [
        { channelId: 'm-full', max: 1 },
        { channelId: 'm-cool', max: 1 },
        { channelId: 'm-free', max: 1 },
      ];
      const m = await measure(async () => {
        expect(await store.acquireFirst(targets, opts('p:2'))).toEqual(['full', 'cooling', 'acquired']);
      });
      expect(m.sent).toEqual(['evalsha']);
      // one EXISTS over the three cooldown and three queue keys finds one, then one per channel tried and kind (the
      // cooling channel's queue is not looked at)
      expect(m.server).toEqual({
        evalsha: 1,
        exists: 1 + 3 + 2,
        time: 1,
        zcard: 2,
        zremrangebyscore: 1,
        zadd: 1,
        pexpire: 1,
      });
    });

    it('acquire that finds a queue (one channel): one EXISTS, then the grant check (no registration looked up)', async () => {
      await store.acquireFirst([{ channelId: 'aq', max: 1 }], opts('h:1'));
      expect(await store.enqueue(waiter('aq', 'w:1', 1), waitOpts())).toBe('queued');
      const m = await measure(async () => {
        expect(await store.acquireFirst([{ channelId: 'aq', max: 1 }], opts('n:1'))).toEqual(['queued']);
      });
      expect(m.sent).toEqual(['evalsha']);
      expect(m.server).toEqual({
        evalsha: 1,
        exists: 1,
        time: 1,
        zrange: 1,
        zcard: 1,
        zremrangebyscore: 1,
      });
      expect(m.counted).toEqual({ acquire: 1 });
    });

    it('release (and a second release of the same lease)', async () => {
      await store.acquireFirst([{ channelId: 'rel', max: 1 }], opts('r:1'));
      const m = await measure(async () => {
        expect(await store.release({ channelId: 'rel', token: 'r:1' })).toBe(true);
      });
      expect(m.sent).toEqual(['zrem']);
      expect(m.server).toEqual({ zrem: 1 });
      expect(m.counted).toEqual({ release: 1 });
      expect(store.queued('rel')).toBe(false); // so a plain ZREM, not releaseSlot
      const again = await measure(async () => {
        expect(await store.release({ channelId: 'rel', token: 'r:1' })).toBe(false);
      });
      expect(again.server).toEqual({ zrem: 1 });
    });

    it('the releases and acquires of one turn go out as one pipeline: a ZREM each, then one acquire call', async () => {
      const held: LeaseRef[] = [];
      for (let i = 0; i < 10; i++) {
        held.push({ channelId: `co-${i}`, token: `h:${i}` });
        await store.acquireFirst([{ channelId: `co-${i}`, max: 2 }], opts(`h:${i}`));
      }
      const m = await measure(async () => {
        const [acquired, released] = await Promise.all([
          Promise.all(
            Array.from({ length: 10 }, (_, i) =>
              store.acquireFirst(
                [
                  { channelId: `co-${i}`, max: 1 },
                  { channelId: `co-free-${i}`, max: 1 },
                ],
                opts(`co:${i}`),
              ),
            ),
          ),
          Promise.all(held.map((lease) => store.release(lease))),
        ]);
        // releases go first in the pipeline, so every acquire finds its first channel freed
        expect(acquired).toEqual(Array.from({ length: 10 }, () => ['acquired']));
        expect(released).toEqual(Array.from({ length: 10 }, () => true));
      });
      // the ten ZREMs first, then one acquire script call, in one pipeline
      expect(m.sent).toEqual([...Array.from({ length: 10 }, () => 'zrem'), 'evalsha']);
      expect(m.pipelines).toEqual([11]);
      expect(m.counted).toEqual({ acquire: 1, release: 10 });
      // one EXISTS over all 20 cooldown keys for the whole call (no TIME: the leases are scored by the store's clock
      // estimate); one ZCARD per channel tried
      expect(m.server).toEqual({
        evalsha: 1,
        zrem: 10,
        exists: 1,
        zcard: 10,
        zadd: 10,
        pexpire: 10,
      });
    });

    it('a release taken back in the same turn is never sent; once sent it can no longer be taken back', async () => {
      await store.acquireFirst([{ channelId: 'wd', max: 2 }], opts('wd:1'));
      await store.acquireFirst([{ channelId: 'wd', max: 2 }], opts('wd:2'));
      const m = await measure(async () => {
        const first = store.releaseDeferred({ channelId: 'wd', token: 'wd:1' });
        const second = store.releaseDeferred({ channelId: 'wd', token: 'wd:2' });
        expect([first.held, second.held]).toEqual([true, true]);
        expect(first.withdraw()).toBe(true);
        expect(first.withdraw()).toBe(false);
        expect(await first.done).toBe(true);
        expect(await second.done).toBe(true);
        expect(second.withdraw()).toBe(false);
      });
      expect(m.sent).toEqual(['zrem']);
      expect(m.counted).toEqual({ release: 1 });
      expect(await cc.client.zrange(store.keys.slots('wd'), 0, -1)).toEqual(['wd:1']);
    });

    it('a token withdrawn once in a turn is not withdrawn again in that turn: its second release goes out', async () => {
      await store.acquireFirst([{ channelId: 'wt', max: 2 }], opts('wt:1'));
      const m = await measure(async () => {
        const first = store.releaseDeferred({ channelId: 'wt', token: 'wt:1' });
        expect(first.withdraw()).toBe(true); // handed off: the slot stays held
        const again = store.releaseDeferred({ channelId: 'wt', token: 'wt:1' }); // its new holder gives it back
        expect(again.withdraw()).toBe(false); // at most once per token and turn
        expect(await again.done).toBe(true);
      });
      expect(m.sent).toEqual(['zrem']);
      expect(await cc.client.zrange(store.keys.slots('wt'), 0, -1)).toEqual([]);
    });

    it('200 channels tried per acquire call at most: a larger turn is split into several calls', async () => {
      const many = Array.from({ length: 5 }, (_, i) =>
        Array.from({ length: 50 }, (_, j) => ({ channelId: `split-${i}-${j}`, max: 1 })),
      );
      const m = await measure(() => Promise.all(many.map((t, i) => store.acquireFirst(t, opts(`sp:${i}`)))));
      expect(m.sent).toEqual(['evalsha', 'evalsha']);
      expect(m.counted).toEqual({ acquire: 2 });
    });

    it("a key's expiry is extended at most once per TTL/4 by this store", async () => {
      // TTL/4 = 1 s: the second acquire (one measured call later) comes well within it on a busy machine too, and
      // the check after the third sees the key extended with most of a second to spare
      const ttl = 4000;
      await store.acquireFirst([{ channelId: 'ext', max: 9 }], opts('e:1', ttl));
      // within TTL/4 of the store's last extension: no PTTL, no PEXPIRE
      const soon = await measure(() => store.acquireFirst([{ channelId: 'ext', max: 9 }], opts('e:2', ttl)));
      expect(soon.server).toEqual({ evalsha: 1, exists: 1, zcard: 1, zadd: 1 });
      await new Promise((r) => setTimeout(r, ttl / 4 + 20)); // past TTL/4 since the first acquire
      const pttlBefore = await cc.client.pttl(store.keys.slots('ext'));
      const later = await measure(() => store.acquireFirst([{ channelId: 'ext', max: 9 }], opts('e:3', ttl)));
      // Redis 7 extends with one PEXPIRE … GT; before it, PTTL then PEXPIRE
      const major = Number(/redis_version:(\d+)/.exec(await cc.client.info('server'))![1]);
      expect(later.server).toEqual({
        evalsha: 1,
        exists: 1,
        zcard: 1,
        zadd: 1,
        ...(major >= 7 ? {} : { pttl: 1 }),
        pexpire: 1,
      });
      expect(pttlBefore).toBeLessThanOrEqual(ttl * 0.75);
      expect(await cc.client.pttl(store.keys.slots('ext'))).toBeGreaterThan(ttl * 0.75);
      // and never shortens a key that holds longer leases (another instance's longer lease TTL)
      await cc.client.pexpire(store.keys.slots('ext'), 10 * ttl);
      await new Promise((r) => setTimeout(r, ttl / 4 + 20));
      await store.acquireFirst([{ channelId: 'ext', max: 9 }], opts('e:4', ttl));
      expect(await cc.client.pttl(store.keys.slots('ext'))).toBeGreaterThan(9 * ttl);
    });

    it('renew of 120 leases over 3 channels: 3 script calls', async () => {
      const leases: LeaseRef[] = [];
      for (let i = 0; i < 120; i++) {
        const lease = { channelId: `ren-${i % 3}`, token: `n:${i}` };
        await store.acquireFirst([{ channelId: lease.channelId, max: 100 }], opts(lease.token));
        leases.push(lease);
      }
      // a longer TTL than the acquire's, so every key's expiry is extended (as in steady state, where a third of the
      // TTL has passed since the last renewal)
      const m = await measure(async () => {
        expect(await store.renew(leases, 120_000)).toEqual([]);
      });
      expect(m.sent).toEqual(['evalsha', 'evalsha', 'evalsha']);
      // per batch of 50: TIME once, ZADD XX CH per lease, PTTL per distinct key in the batch, PEXPIRE when that
      // extends the key: the first batch to touch a key always does; a later batch in the same millisecond finds the
      // key already at the full TTL and skips it
      const { pexpire, ...rest } = m.server;
      expect(rest).toEqual({ evalsha: 3, time: 3, zadd: 120, pttl: 9 });
      expect(pexpire).toBeGreaterThanOrEqual(3);
      expect(pexpire).toBeLessThanOrEqual(9);
      expect(m.counted).toEqual({ renew: 3 });
    });

    it('renew of one lost lease', async () => {
      const m = await measure(async () => {
        expect(await store.renew([{ channelId: 'ren-0', token: 'ghost:1' }], 60_000)).toHaveLength(1);
      });
      expect(m.sent).toEqual(['evalsha']);
      expect(m.server).toEqual({ evalsha: 1, time: 1, zadd: 1, zscore: 1 });
    });

    it('enqueue (queued, then queue full), poll and leave', async () => {
      await store.acquireFirst([{ channelId: 'wq', max: 1 }], opts('h:1'));
      const ok = await measure(async () => {
        expect(await store.enqueue(waiter('wq', 'w:1', 1), waitOpts(1))).toBe('queued');
      });
      expect(ok.sent).toEqual(['evalsha']);
      // the queue forms: those older than the longest lifetime go (one ZREMRANGEBYSCORE), one message to the one instance
      // holding a slot; the grant check sweeps the full set
      expect(ok.server).toEqual({
        evalsha: 1,
        zcount: 1,
        zcard: 1,
        time: 1,
        zadd: 1,
        pttl: 1,
        pexpire: 1,
        zrange: 2,
        zremrangebyscore: 2,
        publish: 1,
      });
      expect(ok.counted).toEqual({ wait: 1 });
      const full = await measure(async () => {
        expect(await store.enqueue(waiter('wq', 'w:2', 1), waitOpts(1))).toBe('queue_full');
      });
      expect(full.sent).toEqual(['evalsha']);
      expect(full.server).toEqual({ evalsha: 1, time: 1, zcount: 1 });
      const poll = await measure(async () => {
        expect(await store.pollWaiter(waiter('wq', 'w:1', 1), 60_000)).toBe('queued');
      });
      expect(poll.sent).toEqual(['evalsha']);
      expect(poll.server).toEqual({
        evalsha: 1,
        time: 1,
        zrange: 1,
        zscore: 2,
        zcard: 1,
        zremrangebyscore: 1,
      });
      expect(poll.counted).toEqual({ wait: 1 });
      // giving up on the channel within a second of the poll's sweep: a plain ZREM (the sweeping leave is measured
      // below, on a store with a manual clock)
      const leave = await measure(async () => {
        expect(await store.leaveQueue(waiter('wq', 'w:1', 1), 60_000)).toBe(false);
      });
      expect(leave.sent).toEqual(['zrem']);
      expect(leave.server).toEqual({ zrem: 1 });
      expect(leave.counted).toEqual({ wait: 1 });
      // a waiter granted on another channel leaves with no sweep
      expect(await store.enqueue(waiter('wq', 'w:3', 1), waitOpts(1))).toBe('queued');
      const plain = await measure(async () => {
        expect(await store.leaveQueue(waiter('wq', 'w:3', 1), 60_000, false)).toBe(false);
      });
      // a plain ZREM of its member, no script
      expect(plain.sent).toEqual(['zrem']);
      expect(plain.server).toEqual({ zrem: 1 });
      expect(plain.counted).toEqual({ wait: 1 });
      // one granted here too: the ZREM finds it gone from the queue, and the script gives the grant back
      expect(await store.enqueue(waiter('wq', 'w:4', 1), waitOpts(1))).toBe('queued');
      expect(await store.release({ channelId: 'wq', token: 'h:1', ttlMs: 60_000 })).toBe(true); // grants w:4
      const slotsKey = new KeyBuilder(prefix).slots('wq');
      expect(await cc.client.zrange(slotsKey, 0, -1)).toEqual(['w:4']);
      const granted = await measure(async () => {
        expect(await store.leaveQueue(waiter('wq', 'w:4', 1), 60_000, false)).toBe(true);
      });
      expect(granted.sent).toEqual(['zrem', 'evalsha']);
      expect(granted.counted).toEqual({ wait: 2 });
      expect(await cc.client.zcard(slotsKey)).toBe(0);
    });

    it('waiters giving up on one channel sweep its expired leases once a second from a store: the others leave with a plain ZREM', async () => {
      const clock = new ManualClock();
      const s = new RedisStore({ client: cc.client, prefix, clock });
      await s.acquireFirst([{ channelId: 'sw', max: 1 }], opts('h:1'));
      for (const t of ['w:1', 'w:2', 'w:3'])
        expect(await s.enqueue(waiter('sw', t, 1), waitOpts())).toBe('queued');
      const leave = async (token: string) =>
        (await measure(() => s.leaveQueue(waiter('sw', token, 1), 60_000), { cc, store: s })).sent;
      expect(await leave('w:1')).toEqual(['evalsha']);
      await clock.advance(999);
      expect(await leave('w:2')).toEqual(['zrem']);
      await clock.advance(1);
      expect(await leave('w:3')).toEqual(['evalsha']);
      expect(await cc.client.zcard(s.keys.queue('sw'))).toBe(0);
    });

    it("a store's safety polls on one channel run the grant loop once a second; the others look the waiter up alone", async () => {
      const clock = new ManualClock();
      const s = new RedisStore({ client: cc.client, prefix, clock });
      await s.acquireFirst([{ channelId: 'sp', max: 1 }], opts('h:1'));
      for (const t of ['w:1', 'w:2', 'w:3', 'w:4'])
        expect(await s.enqueue(waiter('sp', t, 1), waitOpts())).toBe('queued');
      const on = { cc, store: s };
      const poll = (token: string) => measure(() => s.pollWaiter(waiter('sp', token, 1), 60_000), on);
      const leave = (token: string) => measure(() => s.leaveQueue(waiter('sp', token, 1), 60_000), on);
      // the first poll runs the grant loop: on the full channel, one sweep of expired leases (none here)
      const full = await poll('w:1');
      expect(full.sent).toEqual(['evalsha']);
      expect(full.server).toEqual({
        evalsha: 1,
        zrange: 1,
        zcard: 1,
        time: 1,
        zremrangebyscore: 1,
        zscore: 2,
      });
      // within the second: the waiter looked up alone, its lifetime judged by the store's bound of the Redis clock
      await clock.advance(999);
      const light = await poll('w:2');
      expect(light.server).toEqual({ evalsha: 1, zscore: 2 });
      expect(light.counted).toEqual({ wait: 1 });
      // the loop swept the channel: a waiter giving up within the second leaves with a plain ZREM
      expect((await leave('w:2')).sent).toEqual(['zrem']);
      // a second on, a waiter giving up sweeps; that does not stand in for the grant loop (it grants only what its
      // sweep frees), so the next poll runs the loop, and the polls after it within the second are light
      await clock.advance(1);
      const sweeping = await leave('w:3');
      expect(sweeping.sent).toEqual(['evalsha']);
      // still queued, so granted nothing here: no slot to give back, and no grant loop (the sweep freed none)
      expect(sweeping.server).toEqual({ evalsha: 1, zrem: 1, zcard: 1, time: 1, zremrangebyscore: 1 });
      expect((await poll('w:4')).server).toEqual(full.server);
      expect((await poll('w:1')).server).toEqual(light.server);
      await clock.advance(1000);
      expect((await poll('w:1')).server).toEqual(full.server);
      expect(await cc.client.zrange(s.keys.queue('sp'), 0, -1)).toEqual(['1|60000|w:1', '1|60000|w:4']);
    });

    it('registrations sent together go out in one call, with one TIME, in the order sent', async () => {
      await store.acquireFirst([{ channelId: 'wt1', max: 1 }], opts('h:1'));
      await store.acquireFirst([{ channelId: 'wt2', max: 1 }], opts('h:2'));
      const m = await measure(async () => {
        // a waiter joining two queues, and another joining the second, in one job
        expect(
          await Promise.all([
            store.enqueue(waiter('wt1', 'w:1', 1), waitOpts()),
            store.enqueue(waiter('wt2', 'w:1', 1), waitOpts()),
            store.enqueue(waiter('wt2', 'w:2', 1), waitOpts()),
          ]),
        ).toEqual(['queued', 'queued', 'queued']);
      });
      expect(m.sent).toEqual(['evalsha']);
      expect(m.counted).toEqual({ wait: 1 });
      expect(m.server.evalsha).toBe(1);
      expect(m.server.time).toBe(1);
      expect(m.server.zadd).toBe(3);
      expect(await cc.client.zrange(store.keys.queue('wt2'), 0, -1)).toEqual(['1|60000|w:1', '1|60000|w:2']);
      // each as a call of its own: a full queue turns away only the registration that finds it full
      const full = await Promise.all([
        store.enqueue(waiter('wt1', 'w:3', 1), waitOpts(1)),
        store.enqueue(waiter('wt2', 'w:3', 1), waitOpts(3)),
      ]);
      expect(full).toEqual(['queue_full', 'queued']);
      // and a slot given back goes to the oldest of them
      expect(await store.release({ channelId: 'wt2', token: 'h:2' })).toBe(true);
      expect(await cc.client.zrange(store.keys.slots('wt2'), 0, -1)).toEqual(['w:1']);
    });

    it('a registration whose commands fail in a shared call fails alone: the others sent with it stand', async () => {
      await store.acquireFirst([{ channelId: 'wf1', max: 1 }], opts('h:1'));
      await cc.client.set(store.keys.queue('wf2'), 'not a sorted set');
      const [good, bad] = await Promise.allSettled([
        store.enqueue(waiter('wf1', 'w:1', 1), waitOpts()),
        store.enqueue(waiter('wf2', 'w:1', 1), waitOpts()),
      ]);
      expect(good).toEqual({ status: 'fulfilled', value: 'queued' });
      expect(bad.status).toBe('rejected');
      const err = (bad as PromiseRejectedResult).reason as {
        code: string;
        operation: string;
        message: string;
      };
      expect(err).toMatchObject({ code: 'admission_store_unavailable', operation: 'wait_register' });
      expect(err.message).toMatch(/WRONGTYPE/);
      expect(await cc.client.zrange(store.keys.queue('wf1'), 0, -1)).toEqual(['1|60000|w:1']);
      await cc.client.del(store.keys.queue('wf2'));
    });

    it('enqueue behind a live waiter: no grant loop, and no expiry check while this store knows the keys outlive it', async () => {
      await store.acquireFirst([{ channelId: 'wb', max: 1 }], opts('h:1'));
      expect(await store.enqueue(waiter('wb', 'w:1', 1), waitOpts())).toBe('queued');
      const m = await measure(async () => {
        expect(await store.enqueue(waiter('wb', 'w:2', 1), waitOpts())).toBe('queued');
      });
      expect(m.sent).toEqual(['evalsha']);
      // the first enqueue (the queue formed) checked the key's expiry: it lasts 1.5 registration lifetimes at least
      expect(m.server).toEqual({ evalsha: 1, time: 1, zcount: 1, zadd: 1 });
      // another store (another instance) has not checked them: it does, once
      const other = new RedisStore({ url: server.url, prefix });
      try {
        // (its first call of the script is an EVAL with the body)
        expect(await other.enqueue(waiter('wb-warm', 'w:0', 1), waitOpts())).toBe('granted');
        const o = await measure(async () => {
          expect(await other.enqueue(waiter('wb', 'w:3', 1), waitOpts())).toBe('queued');
        });
        expect(o.server).toEqual({ evalsha: 1, time: 1, zcount: 1, zadd: 1, pttl: 1 });
      } finally {
        await other.close();
      }
    });

    it('enqueue granted at once: no queue forms, no message is sent', async () => {
      const m = await measure(async () => {
        expect(await store.enqueue(waiter('wg', 'w:1', 1), waitOpts())).toBe('granted');
      });
      expect(m.sent).toEqual(['evalsha']);
      expect(m.server).toEqual({
        evalsha: 1,
        zcount: 1,
        zremrangebyscore: 1,
        zcard: 1,
        time: 1,
        zadd: 2,
        pttl: 2,
        pexpire: 2,
        zrange: 2,
        zrem: 1,
      });
      expect(store.queued('wg')).toBe(false);
    });

    it("a release on a channel the store knows has a queue is one releaseSlot call in the turn's pipeline", async () => {
      await store.acquireFirst([{ channelId: 'rq', max: 1 }], opts('r:1'));
      expect(store.queued('rq')).toBe(false);
      expect(await store.enqueue(waiter('rq', 'w:1', 1), waitOpts())).toBe('queued');
      expect(store.queued('rq')).toBe(true);
      const m = await measure(async () => {
        const [released, newcomer] = await Promise.all([
          store.release({ channelId: 'rq', token: 'r:1', ttlMs: 120_000 }),
          store.acquireFirst([{ channelId: 'rq', max: 1 }], opts('n:1')),
        ]);
        expect(released).toBe(true);
        // the release goes first and grants the slot to the waiter: the newcomer of the same turn finds it taken
        expect(newcomer).toEqual(['full']);
      });
      expect(m.sent).toEqual(['evalsha', 'evalsha']);
      expect(m.pipelines).toEqual([2]);
      expect(m.counted).toEqual({ release: 1, acquire: 1 });
      // releaseSlot: ZREM, the heads, one grant (its PUBLISH included), no TIME (the store's bound of the Redis clock
      // scores the grant); the acquire: EXISTS finds no queue left, full, and its sweep reads TIME
      expect(m.server).toEqual({
        evalsha: 2,
        zrem: 2,
        exists: 1,
        time: 1,
        zrange: 2,
        zcard: 2,
        zadd: 1,
        pttl: 1,
        pexpire: 1,
        publish: 1,
        zremrangebyscore: 1,
      });
      expect(await cc.client.zrange(store.keys.slots('rq'), 0, -1)).toEqual(['w:1']);
    });

    it('a second granting release within TTL/4 of the first skips the PTTL of the slots key', async () => {
      await store.acquireFirst([{ channelId: 'rp', max: 2 }], opts('p:1'));
      await store.acquireFirst([{ channelId: 'rp', max: 2 }], opts('p:2'));
      expect(await store.enqueue(waiter('rp', 'w:1', 2), waitOpts())).toBe('queued');
      expect(await store.enqueue(waiter('rp', 'w:2', 2), waitOpts())).toBe('queued');
      const first = await measure(async () => {
        expect(await store.release({ channelId: 'rp', token: 'p:1', ttlMs: 120_000 })).toBe(true);
      });
      expect(first.server.pttl).toBe(1);
      const second = await measure(async () => {
        expect(await store.release({ channelId: 'rp', token: 'p:2', ttlMs: 120_000 })).toBe(true);
      });
      // ZREM, the head, one grant (ZADD, ZREM, PUBLISH), a ZRANGE that finds the queue empty, and no PTTL: the first
      // release checked the key (and no TIME: the grant is scored by the store's bound of the Redis clock)
      expect(second.server).toEqual({
        evalsha: 1,
        zrem: 2,
        zrange: 2,
        zcard: 1,
        zadd: 1,
        publish: 1,
      });
      expect(await cc.client.zrange(store.keys.slots('rp'), 0, -1)).toEqual(['w:1', 'w:2']);
    });

    it('a granting release drops a registration that ran out with no lookup (its arrival and lifetime say so), then grants the next live waiter', async () => {
      await store.acquireFirst([{ channelId: 'rl', max: 1 }], opts('l:1'));
      expect(await store.enqueue(waiter('rl', 'w:1', 1), waitOpts())).toBe('queued');
      expect(await store.enqueue(waiter('rl', 'w:2', 1), waitOpts())).toBe('queued');
      // w:1 arrived longer ago than its lifetime (60 s): its instance died without leaving
      const [sec] = await cc.client.time();
      await cc.client.zadd(store.keys.queue('rl'), 'XX', (Number(sec) * 1000 - 61_000) * 1000, '1|60000|w:1');
      const m = await measure(async () => {
        expect(await store.release({ channelId: 'rl', token: 'l:1', ttlMs: 120_000 })).toBe(true);
      });
      expect(m.server.zscore).toBeUndefined(); // no registration is looked up
      expect(m.server.zrem).toBe(3); // the slot, the dead w:1, the granted w:2
      expect(m.server.zrange).toBe(2); // the window, then the empty rest
      expect(m.server.publish).toBe(1);
      expect(await cc.client.zrange(store.keys.slots('rl'), 0, -1)).toEqual(['w:2']);
      expect(await cc.client.zcard(store.keys.queue('rl'))).toBe(0);
    });

    it('registrations older than the longest lifetime (62 s) go in one ZREMRANGEBYSCORE before the grant loop looks', async () => {
      await store.acquireFirst([{ channelId: 'ro', max: 1 }], opts('o:1'));
      for (const t of ['w:1', 'w:2', 'w:3'])
        expect(await store.enqueue(waiter('ro', t, 1), waitOpts())).toBe('queued');
      const [sec] = await cc.client.time();
      for (const t of ['w:1', 'w:2'])
        await cc.client.zadd(
          store.keys.queue('ro'),
          'XX',
          (Number(sec) * 1000 - 63_000) * 1000,
          `1|60000|${t}`,
        );
      const m = await measure(async () => {
        expect(await store.release({ channelId: 'ro', token: 'o:1', ttlMs: 120_000 })).toBe(true);
      });
      expect(m.server.zremrangebyscore).toBe(1);
      expect(m.server.zrem).toBe(2); // the slot, the granted w:3
      expect(await cc.client.zrange(store.keys.slots('ro'), 0, -1)).toEqual(['w:3']);
    });

    it('a release on a channel the store knows no queue of is a plain ZREM; the next acquire grants the slot', async () => {
      // another instance's waiter: this store has not heard of the queue
      const other = new RedisStore({ url: server.url, prefix });
      try {
        await store.acquireFirst([{ channelId: 'rz', max: 1 }], opts('r:1'));
        expect(await other.enqueue(waiter('rz', 'o:1', 1), waitOpts())).toBe('queued');
        expect(store.queued('rz')).toBe(false);
        const m = await measure(async () => {
          expect(await store.release({ channelId: 'rz', token: 'r:1' })).toBe(true);
        });
        expect(m.sent).toEqual(['zrem']);
        expect(m.server).toEqual({ zrem: 1 });
        expect(await cc.client.zcard(store.keys.slots('rz'))).toBe(0); // freed, not granted yet
        // the next acquire grants the free slot to the waiter first, and the newcomer waits behind nobody: full
        expect(await store.acquireFirst([{ channelId: 'rz', max: 1 }], opts('n:1'))).toEqual(['full']);
        expect(await cc.client.zrange(store.keys.slots('rz'), 0, -1)).toEqual(['o:1']);
      } finally {
        await other.close();
      }
    });

    it('readLoads of 1 and of 50 channels: TIME only when the clock reading is a second old', async () => {
      await new Promise((r) => setTimeout(r, 1050)); // the last clock reading is now over a second old
      const one = await measure(() => store.readLoads(['x']));
      expect(one.sent).toEqual(['time', 'zcount', 'zcount', 'pttl']);
      expect(one.server).toEqual({ time: 1, zcount: 2, pttl: 1 });
      expect(one.counted).toEqual({ load_read: 4 });
      const fifty = await measure(() => store.readLoads(Array.from({ length: 50 }, (_, i) => `f-${i}`)));
      expect(fifty.sent).toHaveLength(150);
      expect(fifty.server).toEqual({ zcount: 100, pttl: 50 });
      expect(fifty.counted).toEqual({ load_read: 150 });
    });

    it('cooldown set, read, clear', async () => {
      await store.readLoads(['cd']); // reads the Redis clock, which the summary's note of the cooldown's end needs
      const set = await measure(() => store.setCooldown('cd', 5_000, 'upstream 429'));
      // the cooldown key (what the acquire script checks), then its end in the load summary (for the summary's readers)
      expect(set.sent).toEqual(['set', 'hset', 'pexpire']);
      expect(set.server).toEqual({ set: 1, hset: 1, pexpire: 1 });
      expect(set.counted).toEqual({ cooldown: 3 });
      const read = await measure(async () => {
        expect((await store.readCooldown('cd'))?.reason).toBe('upstream 429');
      });
      expect(read.sent).toEqual(['get', 'pttl']);
      expect(read.server).toEqual({ get: 1, pttl: 1 });
      expect(read.counted).toEqual({ cooldown: 2 });
      const clear = await measure(() => store.clearCooldown('cd'));
      expect(clear.sent).toEqual(['del', 'hdel']);
      expect(clear.server).toEqual({ del: 1, hdel: 1 });
      expect(clear.counted).toEqual({ cooldown: 2 });
    });
  });

  it('the first script call on a new connection is sent as EVAL with the body, later ones as EVALSHA', async () => {
    const fresh = await countingClient(server.url);
    const s = new RedisStore({ client: fresh.client, prefix });
    try {
      await s.ready(); // the epoch check of the new connection (plain commands, no script)
      const first = await measure(() => s.acquireFirst([{ channelId: 'ev', max: 5 }], opts('e:1')), {
        cc: fresh,
        store: s,
      });
      // the counting wrapper sees the command before ioredis rewrites it to EVAL for a connection that has not
      // loaded the script yet; the server shows what really ran
      expect(first.sent).toEqual(['evalsha']);
      expect(first.server.eval).toBe(1);
      expect(first.server.evalsha).toBeUndefined();
      const second = await measure(() => s.acquireFirst([{ channelId: 'ev', max: 5 }], opts('e:2')), {
        cc: fresh,
        store: s,
      });
      expect(second.server.evalsha).toBe(1);
      expect(second.server.eval).toBeUndefined();
    } finally {
      await fresh.close();
    }
  });
});

describe('the grants subscription', () => {
  it('after a lost connection, tells the listener to resync once it is subscribed again; a grant sent meanwhile is lost', async () => {
    const ch = 'resub';
    // a slow reconnect, so the grant surely goes out while nobody listens
    const client = new Redis(server.url, { retryStrategy: () => 400, lazyConnect: false });
    const b = new RedisStore({ client, prefix });
    const heard: string[] = [];
    const listening = b.listen('rb', {
      grant: (channelId, token) => heard.push(`g ${token} ${channelId}`),
      queued: () => {},
      resync: () => heard.push('resync'),
    });
    try {
      await listening.ready;
      expect(await store.acquireFirst([{ channelId: ch, max: 1 }], opts('ra:1'))).toEqual(['acquired']);
      expect(await b.enqueue(waiter(ch, 'rb:1', 1), waitOpts())).toBe('queued');
      await cc.client.client('KILL', 'TYPE', 'pubsub');
      expect((await cc.client.pubsub('NUMSUB', b.keys.grants('rb')))[1]).toBe(0);
      expect(await store.release({ channelId: ch, token: 'ra:1' })).toBe(true); // granted to rb:1, told to nobody
      await expect.poll(() => heard, { timeout: 10_000 }).toEqual(['resync']);
      expect((await cc.client.pubsub('NUMSUB', b.keys.grants('rb')))[1]).toBe(1);
      // what the waiter's check then finds
      expect(await b.pollWaiter(waiter(ch, 'rb:1', 1), 60_000)).toBe('granted');
      expect(await b.release({ channelId: ch, token: 'rb:1' })).toBe(true);
    } finally {
      await listening.stop();
      await b.close();
      client.disconnect();
    }
  });
});

/**
 * Makes the grants subscription a store opens on `client` hold every message it receives until `open()` (a message
 * slow to arrive: the store's own connection answers meanwhile). `held()` is how many wait.
 */
function holdMessages(client: Redis): { open(): void; held(): number } {
  const held: unknown[][] = [];
  let deliver: ((...args: unknown[]) => boolean) | undefined;
  const duplicate = client.duplicate.bind(client);
  client.duplicate = ((...args: Parameters<Redis['duplicate']>) => {
    const sub = duplicate(...args);
    const emit = sub.emit.bind(sub);
    deliver = (...rest) => emit('message', ...rest);
    sub.emit = ((event: string | symbol, ...rest: unknown[]) => {
      if (event !== 'message' || !deliver) return emit(event, ...rest);
      held.push(rest);
      return true;
    }) as typeof sub.emit;
    return sub;
  }) as Redis['duplicate'];
  return {
    open() {
      const send = deliver!;
      deliver = undefined;
      for (const m of held.splice(0)) send(...m);
    },
    held: () => held.length,
  };
}

describe('a release racing a queue that forms', () => {
  /** A store of instance `id`, listening on a connection whose messages wait for `gate.open()`. */
  async function heldStore(
    id: string,
    body: (a: RedisStore, gate: ReturnType<typeof holdMessages>) => Promise<void>,
  ): Promise<void> {
    const client = new Redis(server.url);
    const gate = holdMessages(client);
    const a = new RedisStore({ client, prefix });
    const listening = a.listen(id, { grant: () => {}, queued: () => {}, resync: () => {} });
    try {
      await listening.ready;
      await body(a, gate);
    } finally {
      await listening.stop();
      await a.close();
      client.disconnect();
    }
  }

  it("a registration of the store's own on its way makes a release in the same turn go through the queue", async () => {
    const ch = 'race-own';
    await store.acquireFirst([{ channelId: ch, max: 1 }], opts('o:1'));
    // Redis holds every command for 600 ms: the registration is written, and unanswered, when the release is asked for
    const admin = new Redis(server.url);
    try {
      expect(await admin.call('CLIENT', 'PAUSE', '600', 'ALL')).toBe('OK');
    } finally {
      admin.disconnect();
    }
    let answered = false;
    const registered = store.enqueue(waiter(ch, 'o:w', 1), waitOpts()).finally(() => (answered = true));
    await new Promise((r) => setTimeout(r, 100));
    expect(answered).toBe(false);
    const released = store.release({ channelId: ch, token: 'o:1', ttlMs: 60_000 });
    expect(await registered).toBe('queued');
    expect(await released).toBe(true);
    // a plain ZREM would have left the slot free behind the waiter
    expect(await cc.client.zrange(store.keys.slots(ch), 0, -1)).toEqual(['o:w']);
    expect(await store.release({ channelId: ch, token: 'o:w', ttlMs: 60_000 })).toBe(true);
  });

  it('a plain release Redis ran after a queue formed elsewhere is made good when the "Q" message comes: the slot goes to the waiter', async () => {
    const ch = 'race-kick';
    await heldStore('ka', async (a, gate) => {
      await a.readLoads([ch]); // the store's clock reading: its bound says when the release was answered
      expect(await a.acquireFirst([{ channelId: ch, max: 1 }], opts('ka:1'))).toEqual(['acquired']);
      expect(await store.enqueue(waiter(ch, 'kb:1', 1), waitOpts())).toBe('queued'); // "Q" to ka: held
      await expect.poll(gate.held, { timeout: 10_000 }).toBe(1);
      expect(a.queued(ch)).toBe(false);
      const before = a.commands.release;
      expect(await a.release({ channelId: ch, token: 'ka:1', ttlMs: 60_000 })).toBe(true);
      expect(await cc.client.zcard(a.keys.slots(ch))).toBe(0); // freed behind the waiter, granted to nobody
      gate.open();
      expect(a.queued(ch)).toBe(true);
      await expect
        .poll(() => cc.client.zrange(a.keys.slots(ch), 0, -1), { timeout: 10_000 })
        .toEqual(['kb:1']);
      expect(a.commands.release - before).toBe(2); // the ZREM, and one releaseSlot that granted the slot
      expect(await store.release({ channelId: ch, token: 'kb:1', ttlMs: 60_000 })).toBe(true);
    });
  });

  it('a plain release answered well before a queue formed costs nothing more when the "Q" message comes', async () => {
    const ch = 'race-none';
    await heldStore('na', async (a, gate) => {
      await a.readLoads([ch]); // the store's clock reading: its bound says when the release was answered
      expect(await a.acquireFirst([{ channelId: ch, max: 2 }], opts('na:1'))).toEqual(['acquired']);
      expect(await a.acquireFirst([{ channelId: ch, max: 2 }], opts('na:2'))).toEqual(['acquired']);
      expect(await a.release({ channelId: ch, token: 'na:1', ttlMs: 60_000 })).toBe(true); // a plain ZREM
      // longer than any slack of the bound, and than the window used without one
      await new Promise((r) => setTimeout(r, 1100));
      expect(await store.acquireFirst([{ channelId: ch, max: 2 }], opts('nb:1'))).toEqual(['acquired']);
      expect(await store.enqueue(waiter(ch, 'nb:w', 2), waitOpts())).toBe('queued'); // "Q" to na: held
      await expect.poll(gate.held, { timeout: 10_000 }).toBe(1);
      const before = a.commands.release;
      gate.open();
      expect(a.queued(ch)).toBe(true);
      // a kick would have gone out at the end of this turn
      await new Promise((r) => setTimeout(r, 50));
      expect(a.commands.release).toBe(before);
      expect(await cc.client.zrange(a.keys.slots(ch), 0, -1)).toEqual(['na:2', 'nb:1']);
      expect(await store.leaveQueue(waiter(ch, 'nb:w', 2), 60_000)).toBe(false);
    });
  });

  it("a load read that counts no waiter by its store's lifetime leaves the mark: a longer-lived waiter is granted the slot", async () => {
    const ch = 'mixed-lives';
    const a = new RedisStore({ url: server.url, prefix });
    try {
      // a's registrations live 300 ms (a short wait time-out); the other instance's waiter lives a minute
      expect(await a.enqueue(waiter('mixed-other', 'ma:w', 1), { ...waitOpts(), ttlMs: 300 })).toBe(
        'granted',
      );
      expect(await a.release({ channelId: 'mixed-other', token: 'ma:w', ttlMs: 60_000 })).toBe(true);
      expect(await a.acquireFirst([{ channelId: ch, max: 1 }], opts('ma:1'))).toEqual(['acquired']);
      expect(await store.enqueue(waiter(ch, 'mb:w', 1), waitOpts())).toBe('queued');
      expect(await a.acquireFirst([{ channelId: ch, max: 1 }], opts('ma:2'))).toEqual(['queued']);
      expect(a.queued(ch)).toBe(true);
      await new Promise((r) => setTimeout(r, 800));
      // registered longer ago than a's lifetime: a's read counts nobody, yet the waiter waits
      expect((await a.readLoads([ch])).get(ch)!.waiting).toBe(0);
      expect(a.queued(ch)).toBe(true);
      // so the release goes through the queue, and the waiter is granted the slot (a plain ZREM would free it unseen)
      expect(await a.release({ channelId: ch, token: 'ma:1', ttlMs: 60_000 })).toBe(true);
      expect(await cc.client.zrange(a.keys.slots(ch), 0, -1)).toEqual(['mb:w']);
      expect(a.queued(ch)).toBe(false);
      expect(await store.release({ channelId: ch, token: 'mb:w', ttlMs: 60_000 })).toBe(true);
    } finally {
      await a.close();
    }
  });
});

describe('grant messages', () => {
  it('carry any channel id whole, a newline in it too', async () => {
    const ch = 'odd\nid: {x}';
    const b = new RedisStore({ url: server.url, prefix });
    const heard: string[] = [];
    const listening = b.listen('nb', {
      grant: (channelId, token) => heard.push(`g ${token} ${JSON.stringify(channelId)}`),
      queued: (channelId) => heard.push(`q ${JSON.stringify(channelId)}`),
      resync: () => {},
    });
    try {
      await listening.ready;
      expect(await b.acquireFirst([{ channelId: ch, max: 1 }], opts('nb:h'))).toEqual(['acquired']);
      expect(await store.enqueue(waiter(ch, 'na:1', 1), waitOpts())).toBe('queued'); // "q" to nb, the holder
      await expect.poll(() => b.queued(ch), { timeout: 10_000 }).toBe(true);
      expect(await b.enqueue(waiter(ch, 'nb:1', 1), waitOpts())).toBe('queued');
      expect(await b.release({ channelId: ch, token: 'nb:h', ttlMs: 60_000 })).toBe(true); // grants na:1
      expect(await store.leaveQueue(waiter(ch, 'na:1', 1), 60_000)).toBe(true); // passes it to nb:1
      await expect.poll(() => heard.length, { timeout: 10_000 }).toBe(2);
      expect(heard).toEqual([`q ${JSON.stringify(ch)}`, `g nb:1 ${JSON.stringify(ch)}`]);
      expect(await b.release({ channelId: ch, token: 'nb:1', ttlMs: 60_000 })).toBe(true);
    } finally {
      await listening.stop();
      await b.close();
    }
  });
});

describe('grant messages name the claim deadline', () => {
  it('the listener learns how long a grant holds without a claim; one past its deadline, or of the older form, claims first', async () => {
    const ch = 'deadline';
    const b = new RedisStore({ url: server.url, prefix });
    const heard: [string, number | undefined][] = [];
    const listening = b.listen('db', {
      grant: (_channelId, token, _leaseTtlMs, heldForMs) => heard.push([token, heldForMs]),
      queued: () => {},
      resync: () => {},
    });
    try {
      await listening.ready;
      await b.readLoads([ch]); // reads the Redis clock: before any read, no grant is taken as holding
      expect(await b.acquireFirst([{ channelId: ch, max: 1 }], opts('db:h'))).toEqual(['acquired']);
      expect(await store.enqueue(waiter(ch, 'da:1', 1), waitOpts())).toBe('queued'); // "q" to db, the holder
      await expect.poll(() => b.queued(ch), { timeout: 10_000 }).toBe(true);
      expect(await b.enqueue(waiter(ch, 'db:1', 1), waitOpts())).toBe('queued');
      expect(await b.release({ channelId: ch, token: 'db:h', ttlMs: 60_000 })).toBe(true); // grants da:1
      expect(await store.leaveQueue(waiter(ch, 'da:1', 1), 60_000)).toBe(true); // passes it to db:1, with a message
      await expect.poll(() => heard.length, { timeout: 10_000 }).toBe(1);
      // the claim deadline is 5 s after the grant; the store takes a 1 s margin off, and the message's way here
      const [token, heldForMs] = heard[0]!;
      expect(token).toBe('db:1');
      expect(heldForMs).toBeGreaterThan(3_000);
      expect(heldForMs).toBeLessThanOrEqual(4_000); // never more than the claim deadline (5 s) minus the margin
      // Messages made up here, by the Redis clock: a deadline too close to hold (1.5 s away: 0.5 s after the margin),
      // one far enough (2.5 s: about 1.5 s; the store's clock may lag a little), one further than any grant can hold
      // (60 s: capped at the claim deadline minus the margin), one past, and the older form with no deadline
      const [seconds, micros] = await cc.client.time();
      const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
      for (const [token, deadline] of [
        ['db:2', now + 1_500],
        ['db:3', now + 2_500],
        ['db:4', now + 60_000],
        ['db:5', now - 10],
      ] as const) {
        await cc.client.publish(b.keys.grants('db'), `G\n${deadline}\n${token}\n${ch}`);
      }
      await cc.client.publish(b.keys.grants('db'), `g\ndb:6\n${ch}`);
      await expect.poll(() => heard.length, { timeout: 10_000 }).toBe(6);
      const held = new Map(heard);
      expect(held.get('db:2')).toBeUndefined();
      expect(held.get('db:3')).toBeGreaterThan(1_000);
      expect(held.get('db:3')).toBeLessThan(2_000);
      expect(held.get('db:4')).toBe(4_000);
      expect(held.get('db:5')).toBeUndefined();
      expect(held.get('db:6')).toBeUndefined();
      expect(await b.release({ channelId: ch, token: 'db:1', ttlMs: 60_000 })).toBe(true);
    } finally {
      await listening.stop();
      await b.close();
    }
  });
});

describe("the store's queued() hint", () => {
  it('follows the acquire replies, its own enqueues, the "q" messages, the releases and the load reads that find waiters', async () => {
    const ch = 'hint';
    const b = new RedisStore({ url: server.url, prefix });
    const c = new RedisStore({ url: server.url, prefix });
    const heard: string[] = [];
    const listening = b.listen('b', {
      grant: (channelId, token) => heard.push(`g ${token} ${channelId}`),
      queued: (channelId) => heard.push(`q ${channelId}`),
      resync: () => heard.push('resync'),
    });
    const stop = () => listening.stop();
    try {
      await listening.ready;
      expect((await cc.client.pubsub('NUMSUB', b.keys.grants('b')))[1]).toBe(1);
      expect(await b.acquireFirst([{ channelId: ch, max: 1 }], opts('b:1'))).toEqual(['acquired']);
      expect([store.queued(ch), b.queued(ch), c.queued(ch)]).toEqual([false, false, false]);

      // its own enqueue that queues
      expect(await store.enqueue(waiter(ch, 'a:1', 1), waitOpts())).toBe('queued');
      expect(store.queued(ch)).toBe(true);
      // the "q" message: b holds a slot where the queue formed
      await expect.poll(() => b.queued(ch), { timeout: 10_000 }).toBe(true);
      expect(heard).toEqual([`q ${ch}`]);
      // an acquire reply: c has heard nothing, and its acquire answers queued
      expect(c.queued(ch)).toBe(false);
      expect(await c.acquireFirst([{ channelId: ch, max: 1 }], opts('c:1'))).toEqual(['queued']);
      expect(c.queued(ch)).toBe(true);

      // leaving says nothing of other waiters, and a load read that finds none leaves the hint: it counts the
      // registrations by this store's own lifetime, and a longer-lived one of another instance may still wait
      expect(await store.leaveQueue(waiter(ch, 'a:1', 1), 60_000)).toBe(false);
      expect(store.queued(ch)).toBe(true);
      expect((await store.readLoads([ch])).get(ch)!.waiting).toBe(0);
      expect(store.queued(ch)).toBe(true);
      // a release through the queue that leaves no live waiter clears it
      expect(await b.release({ channelId: ch, token: 'b:1' })).toBe(true);
      expect(b.queued(ch)).toBe(false);
      // an acquire that is admitted: no queue there
      expect(await c.acquireFirst([{ channelId: ch, max: 1 }], opts('c:2'))).toEqual(['acquired']);
      expect(c.queued(ch)).toBe(false);
      // a load read that finds a waiter sets it
      expect(await store.enqueue(waiter(ch, 'a:w', 1), waitOpts())).toBe('queued');
      expect((await c.readLoads([ch])).get(ch)!.waiting).toBe(1);
      expect(c.queued(ch)).toBe(true);
      // a release that grants the last waiter leaves none: cleared
      expect(await c.release({ channelId: ch, token: 'c:2' })).toBe(true);
      expect(c.queued(ch)).toBe(false);
      expect(await store.release({ channelId: ch, token: 'a:w' })).toBe(true);
      // its own enqueue granted at once: no queue either
      expect(await store.enqueue(waiter(ch, 'a:2', 2), waitOpts())).toBe('granted');
      expect(store.queued(ch)).toBe(false);
      // b was told of the one queue that formed while it held a slot, and never of a grant (it had no waiter)
      expect(heard).toEqual([`q ${ch}`]);
    } finally {
      await stop();
      await b.close();
      await c.close();
    }
  });
});

/** One plain read of the load summary: no counts put in, the channels read as `instanceId` sees them. */
function readAs(s: RedisStore, instanceId: string, read: string[], maxAgeMs?: number) {
  return s.exchangeLoads!({
    instanceId,
    mode: 'changes',
    counts: new Map(),
    read,
    ...(maxAgeMs === undefined ? {} : { maxAgeMs }),
  });
}

describe('the load summary: versions of an instance counts', () => {
  const mine = (active: number) => new Map([['lv', { active, waiting: 0 }]]);
  const field = async (id: string) =>
    JSON.parse((await cc.client.hget(store.keys.loadCounts(), id))!) as unknown[];

  it('a snapshot holding an older write than the last (landed late) shows the sums as they are, and the field is put right', async () => {
    await store.exchangeLoads!({ instanceId: 'V', mode: 'full', counts: mine(2), keepMs: 60_000, read: [] });
    await store.exchangeLoads!({ instanceId: 'W', mode: 'full', counts: mine(1), keepMs: 60_000, read: [] });
    // an older write of V lands after its last: the same tag, a version V no longer remembers, other counts
    const last = await field('V');
    const tag = String(last[0]).split('.')[0];
    await cc.client.hset(store.keys.loadCounts(), 'V', JSON.stringify([`${tag}.0`, last[1], 'lv', 5]));
    const read = await readAs(store, 'V', ['lv']);
    // what Redis holds (W's 1 + the stale 5), not that plus its own 2 again (8)
    expect(read.loads.get('lv')).toMatchObject({ active: 6, waiting: 0 });
    // and V's latest counts go back in, as a new version
    await expect.poll(async () => (await field('V')).slice(2)).toEqual(['lv', 2]);
    expect((await field('V'))[0]).not.toBe(`${tag}.0`);
    const after = await readAs(store, 'W', ['lv']);
    expect(after.loads.get('lv')).toMatchObject({ active: 3 });
  });
});

describe('the load summary built by the reader (many instance × channel counts)', () => {
  it('reads the fields with a plain HGETALL, adds them up itself, stores the snapshot, and drops the lapsed', async () => {
    const own = await countingClient(server.url);
    const p = uniquePrefix('built-here');
    // every count makes builds costly here: after the first snapshot (built by the script, which says how many
    // counts it summed), this store builds them itself
    const s = new RedisStore({ client: own.client, prefix: p, loadSummaryScriptBuildPairs: 0 });
    const counts = (e: Record<string, number>) =>
      new Map(Object.entries(e).map(([id, active]) => [id, { active, waiting: 0 }]));
    try {
      await s.exchangeLoads!({
        instanceId: 'A',
        mode: 'full',
        counts: counts({ x: 2 }),
        keepMs: 60_000,
        read: [],
      });
      await s.exchangeLoads!({
        instanceId: 'B',
        mode: 'full',
        counts: counts({ x: 1, y: 1 }),
        keepMs: 60_000,
        read: [],
      });
      const first = await readAs(s, 'C', ['x', 'y']);
      expect(first.loads.get('x')).toMatchObject({ active: 3 });
      own.reset();
      const again = await readAs(s, 'C', ['x', 'y']);
      expect(again.loads.get('x')).toMatchObject({ active: 3 });
      expect(again.loads.get('y')).toMatchObject({ active: 1 });
      expect(own.count('hgetall')).toBe(2);
      expect(own.count('evalsha') + own.count('eval')).toBe(0);
      // a change and a read with a max age: the write as an HSET, then the snapshot built here and stored
      const mine = await s.exchangeLoads!({
        instanceId: 'A',
        mode: 'changes',
        counts: counts({ x: 5 }),
        read: ['x'],
        maxAgeMs: 60_000,
      });
      expect(mine.loads.get('x')).toMatchObject({ active: 6 });
      await expect.poll(() => own.client.exists(s.keys.loadSnapshot(60_000))).toBe(1);
      // and the next read shares it: one GET, no build
      own.reset();
      const shared = await readAs(s, 'B', ['x'], 60_000);
      expect(shared.loads.get('x')).toMatchObject({ active: 6 });
      expect(own.sent).toEqual(['get']);
      // a lapsed instance is left out, and deleted (by the script, which checks it again)
      await own.client.hset(s.keys.loadCounts(), 'dead', JSON.stringify(['d.1', 1, 'y', 7]));
      const left = await readAs(s, 'C', ['y']);
      expect(left.loads.get('y')).toMatchObject({ active: 1 });
      await expect.poll(() => own.client.hexists(s.keys.loadCounts(), 'dead')).toBe(0);
    } finally {
      await s.close();
      await own.close();
    }
  });
});

describe('where a registration stands in its queue', () => {
  it("registrations of one job go out in one call, each standing as of its request's arrival when the call goes out", async () => {
    const ch = 'lead-at-send';
    await store.acquireFirst([{ channelId: ch, max: 1 }], opts('ls:h'));
    const calls = store.commands.wait;
    // 'ls:1' arrives at t and registers at once; 5 ms later in the same job 'ls:2' registers, its request having arrived
    // 2 ms before (t + 3), and 'ls:3', its request having arrived 30 ms before (t - 25; a stall of the process between
    // the calls moves ls:2 later only, and leaves ls:3 ahead of ls:1 unless it lasts 25 ms)
    const first = store.enqueue(waiter(ch, 'ls:1', 1), waitOpts());
    const until = performance.now() + 5;
    while (performance.now() < until) {
      // the job goes on
    }
    const second = store.enqueue(waiter(ch, 'ls:2', 1), { ...waitOpts(), arrivedMsAgo: 2 });
    const third = store.enqueue(waiter(ch, 'ls:3', 1), { ...waitOpts(), arrivedMsAgo: 30 });
    expect(await Promise.all([first, second, third])).toEqual(['queued', 'queued', 'queued']);
    expect(store.commands.wait - calls).toBe(1);
    const members = await cc.client.zrange(store.keys.queue(ch), 0, -1);
    // (leads taken when each was asked for: ls:3, ls:2, ls:1; none at all: ls:1, ls:2, ls:3)
    expect(members.map((m) => m.slice(m.lastIndexOf('|') + 1))).toEqual(['ls:3', 'ls:1', 'ls:2']);
    for (const t of ['ls:1', 'ls:2', 'ls:3']) await store.leaveQueue(waiter(ch, t, 1), 60_000);
    expect(await store.release({ channelId: ch, token: 'ls:h', ttlMs: 60_000 })).toBe(true);
  });
});

describe("a waiter's safety poll within a second of its store's last sweep of the channel (no grant loop)", () => {
  it('still finds a grant whose message was lost and a registration Redis lost; the next due poll grants the slot of a lease that ran out', async () => {
    const ch = 'light-poll';
    const clock = new ManualClock();
    const s = new RedisStore({ client: cc.client, prefix, clock });
    const w = (token: string) => waiter(ch, token, 1);
    await s.acquireFirst([{ channelId: ch, max: 1 }], opts('dead:1'));
    const slotsKey = s.keys.slots(ch);
    for (const t of ['lp:1', 'lp:2', 'lp:3']) expect(await s.enqueue(w(t), waitOpts())).toBe('queued');
    // the first poll sweeps: the lease is live, nobody is granted
    expect(await s.pollWaiter(w('lp:1'), 60_000)).toBe('queued');
    // then the holder dies: its lease has run out on the Redis clock (the key keeps its expiry), nobody releases it
    const [sec, us] = await cc.client.time();
    await cc.client.zadd(slotsKey, 'XX', Number(sec) * 1000 + Math.floor(Number(us) / 1000) - 1, 'dead:1');
    // polls within the second look their waiter up alone: the slot is not swept, nobody is granted
    await clock.advance(500);
    expect(await s.pollWaiter(w('lp:1'), 60_000)).toBe('queued');
    expect(await s.pollWaiter(w('lp:2'), 60_000)).toBe('queued');
    expect(await cc.client.zrange(slotsKey, 0, -1)).toEqual(['dead:1']);
    // a second after the sweep, the next poll (of any waiter) sweeps the lease and grants the oldest waiter
    await clock.advance(500);
    expect(await s.pollWaiter(w('lp:3'), 60_000)).toBe('queued');
    expect(await cc.client.zrange(slotsKey, 0, -1)).toEqual(['lp:1']);
    // lp:1's grant message went nowhere (no instance listens for "lp"): a light poll finds the grant
    expect(await s.pollWaiter(w('lp:1'), 60_000)).toBe('granted');
    // the queue key is lost (Redis restarted empty): a light poll finds the registration gone
    await cc.client.del(s.keys.queue(ch));
    expect(await s.pollWaiter(w('lp:2'), 60_000)).toBe('gone');
    await s.release({ channelId: ch, token: 'lp:1', ttlMs: 60_000 });
  });

  it('a waiter giving up in that second leaves the loop to the next poll: a slot freed unseen is granted', async () => {
    const ch = 'light-poll-leave';
    const clock = new ManualClock();
    const s = new RedisStore({ client: cc.client, prefix, clock });
    const w = (token: string) => waiter(ch, token, 1);
    await s.acquireFirst([{ channelId: ch, max: 1 }], opts('h:1'));
    for (const t of ['gl:1', 'gl:2', 'gl:3']) expect(await s.enqueue(w(t), waitOpts())).toBe('queued');
    // a give-up sweeps the full channel (nothing ran out) and grants nothing
    expect(await s.leaveQueue(w('gl:3'), 60_000)).toBe(false);
    // then the slot frees with no grant (a plain release that ran after the queue formed, its "Q" message lost)
    const slotsKey = s.keys.slots(ch);
    await cc.client.zrem(slotsKey, 'h:1');
    // a poll within the same second runs the grant loop: the oldest waiter is granted
    expect(await s.pollWaiter(w('gl:2'), 60_000)).toBe('queued');
    expect(await cc.client.zrange(slotsKey, 0, -1)).toEqual(['gl:1']);
    await s.leaveQueue(w('gl:2'), 60_000);
    await s.release({ channelId: ch, token: 'gl:1', ttlMs: 60_000 });
  });
});
