/**
 * RedisStore's Redis cost, measured twice: on the client (a counting ioredis client passed as `client:`) and on the
 * server (INFO commandstats of a private redis-server that only this file uses, so every call in it is ours).
 * The per-operation numbers asserted here are the ones docs/redis.md lists.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
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
/** A release of the shared store, sent with its turn: its answer. */
const release = (lease: LeaseRef, ttlMs = 60_000, s?: RedisStore) => (s ?? store).release(lease, ttlMs).done;

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
  expect(await release({ channelId: 'warm', token: 'warm:1' })).toBe(true); // releaseSlot: a grant
  expect(await store.leaveQueue(waiter('warm', 'warm:w', 1), 60_000)).toBe(true);
  await store.readLoads(['warm']);
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

/**
 * The high-water mark's cost when a removal notes it in a new minute (includes/peak.lua): HMGET, one HSET, and a
 * PEXPIRE (counted with the others where a test lists PEXPIRE). Within a minute an old peak costs no HSET and no
 * PEXPIRE; `newMinute` makes the next note take the new-minute path whenever it runs, so no count depends on the clock.
 */
const MARK = { hmget: 1, hset: 1 };
async function newMinute(channelId: string): Promise<void> {
  await cc.client.hset(store.keys.peak(channelId), 'b', -1);
}

async function measure(
  op: () => Promise<unknown>,
  target: { cc: CountingClient; store: RedisStore } = { cc, store },
): Promise<Measured> {
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
    expect(m.counted).toEqual({ acquire: 1 });
  });

  it('readLoads of 125 channels: 125 loads, script calls of 50+50+25 channels, a TIME each, no write at all', async () => {
    const ids = Array.from({ length: 125 }, (_, i) => `load-${i}`);
    await store.acquireFirst([{ channelId: 'load-7', max: 4 }], opts('l:1'));
    await store.acquireFirst([{ channelId: 'load-7', max: 4 }], opts('l:2'));
    await store.acquireFirst([{ channelId: 'load-60', max: 1 }], opts('l:3'));
    expect(await store.enqueue(waiter('load-60', 'w:1', 1), waitOpts())).toBe('queued');
    await store.setCooldown('load-124', 30_000, 'x');
    let loads = new Map();
    const m = await measure(async () => {
      loads = await store.readLoads(ids);
    });
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
    expect(m.sent).toEqual(['evalsha', 'evalsha', 'evalsha']);
    expect(m.server).toEqual({ evalsha: 3, time: 3, zcount: 250, pttl: 125 });
    for (const name of WRITES.filter((n) => n !== 'evalsha')) expect(m.server[name]).toBeUndefined();
    expect(m.counted).toEqual({ load_read: 3 });
  });

  it('the store counters agree with the counting client over a mixed, concurrent workload', async () => {
    await store.exchangeLoads({ instanceId: 'mixer', mode: 'changes', counts: new Map(), read: ['x'] });
    const before = { ...store.commands };
    cc.reset();
    await Promise.all([
      store.acquireFirst([{ channelId: 'mix', max: 3 }], opts('m:1')),
      store.acquireFirst([{ channelId: 'mix', max: 3 }], opts('m:2')),
      store.enqueue(waiter('mix', 'w:1', 3), waitOpts()),
      store.readLoads(['mix', 'other', 'third']),
      store.setCooldown('mix-c', 1_000, 'r'),
      release({ channelId: 'other', token: 'nope' }),
      store.renew(
        Array.from({ length: 60 }, (_, i) => ({ channelId: 'mix', token: `ghost:${i}` })),
        60_000,
      ),
    ]);
    await store.leaveQueue(waiter('mix', 'w:1', 3), 60_000);
    await store.clearCooldown('mix-c');
    const delta = emptyCounts();
    for (const p of PURPOSES) delta[p] = store.commands[p] - before[p];
    expect(delta).toEqual({
      load_read: 1,
      // the two acquires of the same turn are one script call
      acquire: 1,
      release: 1,
      renew: 2,
      // the enqueue (granted at once, a slot being free), then the leave: a ZREM finding no member, and the script
      // giving the grant back
      wait: 3,
      // set + the summary's note of its end (HSET, PEXPIRE), del + the note's removal
      cooldown: 3 + 2,
      settings: 0,
    });
    expect(cc.sent).toHaveLength(Object.values(delta).reduce((a, b) => a + b, 0));
    // every script call: acquire, release, renew ×2, enqueue, leave, the load read
    expect(cc.count('evalsha')).toBe(7);
  });

  describe('per operation', () => {
    it('acquire that admits (new channel)', async () => {
      const m = await measure(() => store.acquireFirst([{ channelId: 'ok', max: 2 }], opts('a:1')));
      expect(m.sent).toEqual(['evalsha']);
      // cooldown and queue looked at, the slots counted, the lease scored by TIME, the new key given its expiry
      expect(m.server).toEqual({ evalsha: 1, exists: 2, zcard: 1, time: 1, zadd: 1, pttl: 1, pexpire: 1 });
      expect(m.counted).toEqual({ acquire: 1 });
    });

    it('acquire that admits, cooldown check off: the queue is looked at whatever the setting', async () => {
      const m = await measure(() =>
        store.acquireFirst([{ channelId: 'ok-nc', max: 2 }], opts('a:1', 60_000, false)),
      );
      expect(m.server).toEqual({ evalsha: 1, exists: 1, zcard: 1, time: 1, zadd: 1, pttl: 1, pexpire: 1 });
    });

    it('acquire that finds the channel full: one sweep of expired leases, by Redis TIME', async () => {
      await store.acquireFirst([{ channelId: 'busy', max: 1 }], opts('b:1'));
      const m = await measure(async () => {
        expect(await store.acquireFirst([{ channelId: 'busy', max: 1 }], opts('b:2'))).toEqual(['full']);
      });
      expect(m.server).toEqual({ evalsha: 1, exists: 2, zcard: 1, time: 1, zremrangebyscore: 1 });
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
      // the cooling channel's queue and slots are not looked at; TIME once for the call
      expect(m.server).toEqual({
        evalsha: 1,
        exists: 2 + 1 + 2,
        zcard: 2,
        time: 1,
        zremrangebyscore: 1,
        zadd: 1,
        pttl: 1,
        pexpire: 1,
      });
    });

    it('acquire that finds a queue on a full channel: only its oldest waiter is read', async () => {
      await store.acquireFirst([{ channelId: 'aq', max: 1 }], opts('h:1'));
      expect(await store.enqueue(waiter('aq', 'w:1', 1), waitOpts())).toBe('queued');
      const m = await measure(async () => {
        expect(await store.acquireFirst([{ channelId: 'aq', max: 1 }], opts('n:1'))).toEqual(['queued']);
      });
      expect(m.server).toEqual({ evalsha: 1, exists: 2, zcard: 1, time: 1, zremrangebyscore: 1, zrange: 1 });
      expect(m.counted).toEqual({ acquire: 1 });
    });

    it('release with nobody waiting (and a second release of the same lease): one script call', async () => {
      await store.acquireFirst([{ channelId: 'rel', max: 1 }], opts('r:1'));
      await newMinute('rel');
      const m = await measure(async () => {
        expect(await release({ channelId: 'rel', token: 'r:1' })).toBe(true);
      });
      expect(m.sent).toEqual(['evalsha']);
      // the count before the removal goes to the high-water mark (MARK, and its key's expiry in a new minute)
      expect(m.server).toEqual({ evalsha: 1, zrem: 1, zcard: 1, time: 1, ...MARK, pexpire: 1, zrange: 1 });
      expect(m.counted).toEqual({ release: 1 });
      const again = await measure(async () => {
        expect(await release({ channelId: 'rel', token: 'r:1' })).toBe(false);
      });
      expect(again.server).toEqual({ evalsha: 1, zrem: 1, zrange: 1 });
    });

    it('a release grants the freed slot to the oldest waiter in the same script, whatever this store knew of it', async () => {
      // another instance's waiter: this store has not heard of the queue
      const other = new RedisStore({ url: server.url, prefix });
      try {
        await store.acquireFirst([{ channelId: 'rz', max: 1 }], opts('r:1'));
        expect(await other.enqueue(waiter('rz', 'o:1', 1), waitOpts())).toBe('queued');
        await newMinute('rz');
        const m = await measure(async () => {
          const [released, newcomer] = await Promise.all([
            release({ channelId: 'rz', token: 'r:1' }, 120_000),
            store.acquireFirst([{ channelId: 'rz', max: 1 }], opts('n:1')),
          ]);
          expect(released).toBe(true);
          // the release goes first in the turn and grants the slot: the newcomer of the same turn finds it taken
          expect(newcomer).toEqual(['full']);
        });
        expect(m.sent).toEqual(['evalsha', 'evalsha']);
        expect(m.pipelines).toEqual([2]);
        // releaseSlot: ZREM and the high-water mark, the window of waiters, one grant (its PUBLISH, its key's expiry
        // checked once), the empty rest; the acquire: no queue left, full, one sweep
        expect(m.server).toEqual({
          evalsha: 2,
          zrem: 2,
          zrange: 2,
          zcard: 3,
          time: 2,
          zadd: 1,
          pttl: 1,
          ...MARK,
          pexpire: 2,
          publish: 1,
          exists: 2,
          zremrangebyscore: 1,
        });
        expect(await cc.client.zrange(store.keys.slots('rz'), 0, -1)).toEqual(['o:1']);
      } finally {
        await other.close();
      }
    });

    it('the releases and acquires of one turn go out as one pipeline: the releases first, then one acquire call', async () => {
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
          Promise.all(held.map((lease) => release(lease))),
        ]);
        // releases go first in the pipeline, so every acquire finds its first channel freed
        expect(acquired).toEqual(Array.from({ length: 10 }, () => ['acquired']));
        expect(released).toEqual(Array.from({ length: 10 }, () => true));
      });
      expect(m.sent).toEqual(Array.from({ length: 11 }, () => 'evalsha'));
      expect(m.pipelines).toEqual([11]);
      expect(m.counted).toEqual({ acquire: 1, release: 10 });
    });

    it('a release taken back in the same turn is never sent; once sent it can no longer be taken back', async () => {
      await store.acquireFirst([{ channelId: 'wd', max: 2 }], opts('wd:1'));
      await store.acquireFirst([{ channelId: 'wd', max: 2 }], opts('wd:2'));
      const m = await measure(async () => {
        const first = store.release({ channelId: 'wd', token: 'wd:1' }, 60_000);
        const second = store.release({ channelId: 'wd', token: 'wd:2' }, 60_000);
        expect([first.withdrawable, second.withdrawable]).toEqual([true, true]);
        expect(first.withdraw()).toBe(true);
        expect(first.withdraw()).toBe(false);
        expect(await first.done).toBe(true);
        expect(await second.done).toBe(true);
        expect(second.withdraw()).toBe(false);
      });
      expect(m.sent).toEqual(['evalsha']);
      expect(m.counted).toEqual({ release: 1 });
      expect(await cc.client.zrange(store.keys.slots('wd'), 0, -1)).toEqual(['wd:1']);
    });

    it('a token withdrawn once in a turn is not withdrawn again in that turn: its second release goes out', async () => {
      await store.acquireFirst([{ channelId: 'wt', max: 2 }], opts('wt:1'));
      const m = await measure(async () => {
        const first = store.release({ channelId: 'wt', token: 'wt:1' }, 60_000);
        expect(first.withdraw()).toBe(true); // handed off: the slot stays held
        const again = store.release({ channelId: 'wt', token: 'wt:1' }, 60_000); // its new holder gives it back
        expect(again.withdraw()).toBe(false); // at most once per token and turn
        expect(await again.done).toBe(true);
      });
      expect(m.sent).toEqual(['evalsha']);
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

    it("an admission extends its key's expiry to 1.25 TTL only when it has less than a TTL left, and never shortens it", async () => {
      const ttl = 4000;
      await store.acquireFirst([{ channelId: 'ext', max: 9 }], opts('e:1', ttl));
      // the key has 1.25 TTL: the next admission reads its PTTL and leaves it
      const soon = await measure(() => store.acquireFirst([{ channelId: 'ext', max: 9 }], opts('e:2', ttl)));
      expect(soon.server).toEqual({ evalsha: 1, exists: 2, zcard: 1, time: 1, zadd: 1, pttl: 1 });
      // a quarter TTL later it has less than a TTL: extended
      await new Promise((r) => setTimeout(r, ttl / 4 + 50));
      const later = await measure(() => store.acquireFirst([{ channelId: 'ext', max: 9 }], opts('e:3', ttl)));
      expect(later.server).toEqual({
        evalsha: 1,
        exists: 2,
        zcard: 1,
        time: 1,
        zadd: 1,
        pttl: 1,
        pexpire: 1,
      });
      expect(await cc.client.pttl(store.keys.slots('ext'))).toBeGreaterThan(ttl);
      // a key that holds longer leases (another instance's longer lease TTL) is never shortened
      await cc.client.pexpire(store.keys.slots('ext'), 10 * ttl);
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
      // a longer TTL than the acquire's, so every key's expiry is extended
      const m = await measure(async () => {
        expect(await store.renew(leases, 120_000)).toEqual([]);
      });
      expect(m.sent).toEqual(['evalsha', 'evalsha', 'evalsha']);
      // per batch of 50: TIME once, ZADD XX CH per lease, PTTL per distinct key in the batch, PEXPIRE when that
      // extends the key (a later batch in the same millisecond may find it extended already)
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
      // the queue forms: those older than the longest lifetime go, the grant loop sweeps the full set, and the one
      // instance holding a slot is told
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
      expect(full.server).toEqual({ evalsha: 1, time: 1, zcount: 1 });
      const poll = await measure(async () => {
        expect(await store.pollWaiter(waiter('wq', 'w:1', 1), 60_000)).toBe('queued');
      });
      expect(poll.server).toEqual({
        evalsha: 1,
        time: 1,
        zrange: 1,
        zscore: 2,
        zcard: 1,
        zremrangebyscore: 1,
      });
      expect(poll.counted).toEqual({ wait: 1 });
      // a member still queued leaves with a plain ZREM
      const leave = await measure(async () => {
        expect(await store.leaveQueue(waiter('wq', 'w:1', 1), 60_000)).toBe(false);
      });
      expect(leave.sent).toEqual(['zrem']);
      expect(leave.server).toEqual({ zrem: 1 });
      expect(leave.counted).toEqual({ wait: 1 });
      expect(await store.enqueue(waiter('wq', 'w:4', 1), waitOpts(1))).toBe('queued');
      expect(await release({ channelId: 'wq', token: 'h:1' })).toBe(true); // grants w:4
      const slotsKey = new KeyBuilder(prefix).slots('wq');
      expect(await cc.client.zrange(slotsKey, 0, -1)).toEqual(['w:4']);
      // one granted here: no member to remove, so the script gives the grant back and it passes on
      const granted = await measure(async () => {
        expect(await store.leaveQueue(waiter('wq', 'w:4', 1), 60_000)).toBe(true);
      });
      expect(granted.sent).toEqual(['zrem', 'evalsha']);
      expect(granted.counted).toEqual({ wait: 2 });
      expect(await cc.client.zcard(slotsKey)).toBe(0);
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
      expect(await release({ channelId: 'wt2', token: 'h:2' })).toBe(true);
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

    it('enqueue behind a live waiter: a sweep, no grant loop, its key extended only when short', async () => {
      await store.acquireFirst([{ channelId: 'wb', max: 1 }], opts('h:1'));
      expect(await store.enqueue(waiter('wb', 'w:1', 1), waitOpts())).toBe('queued');
      const m = await measure(async () => {
        expect(await store.enqueue(waiter('wb', 'w:2', 1), waitOpts())).toBe('queued');
      });
      expect(m.sent).toEqual(['evalsha']);
      // the forming enqueue left the key two lifetimes: the PTTL finds enough; the sweep of leases run out finds none
      expect(m.server).toEqual({ evalsha: 1, time: 1, zcount: 1, zadd: 1, pttl: 1, zremrangebyscore: 1 });
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

    it('a granting release drops a registration that ran out with no lookup (its arrival and lifetime say so), then grants the next live waiter', async () => {
      await store.acquireFirst([{ channelId: 'rl', max: 1 }], opts('l:1'));
      expect(await store.enqueue(waiter('rl', 'w:1', 1), waitOpts())).toBe('queued');
      expect(await store.enqueue(waiter('rl', 'w:2', 1), waitOpts())).toBe('queued');
      // w:1 arrived longer ago than its lifetime (60 s): its instance died without leaving
      const [sec] = await cc.client.time();
      await cc.client.zadd(store.keys.queue('rl'), 'XX', (Number(sec) * 1000 - 61_000) * 1000, '1|60000|w:1');
      const m = await measure(async () => {
        expect(await release({ channelId: 'rl', token: 'l:1' }, 120_000)).toBe(true);
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
        expect(await release({ channelId: 'ro', token: 'o:1' }, 120_000)).toBe(true);
      });
      expect(m.server.zremrangebyscore).toBe(1);
      expect(m.server.zrem).toBe(2); // the slot, the granted w:3
      expect(await cc.client.zrange(store.keys.slots('ro'), 0, -1)).toEqual(['w:3']);
    });

    it('cooldown set and clear', async () => {
      await store.exchangeLoads({ instanceId: 'cd', mode: 'changes', counts: new Map(), read: ['cd'] });
      const set = await measure(() => store.setCooldown('cd', 5_000, 'upstream 429'));
      // the cooldown key (what the acquire script checks), then its end in the load summary (for its readers)
      expect(set.sent).toEqual(['set', 'hset', 'pexpire']);
      expect(set.server).toEqual({ set: 1, hset: 1, pexpire: 1 });
      expect(set.counted).toEqual({ cooldown: 3 });
      expect(await cc.client.get(store.keys.cooldown('cd'))).toBe('upstream 429');
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
      await s.ready(); // the epoch check of the new connection
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
      grant: ({ channelId, token }) => void heard.push(`g ${token} ${channelId}`),
      queued: () => {},
      resync: () => heard.push('resync'),
    });
    try {
      await listening.ready;
      expect(await store.acquireFirst([{ channelId: ch, max: 1 }], opts('ra:1'))).toEqual(['acquired']);
      expect(await b.enqueue(waiter(ch, 'rb:1', 1), waitOpts())).toBe('queued');
      await cc.client.client('KILL', 'TYPE', 'pubsub');
      expect((await cc.client.pubsub('NUMSUB', b.keys.grants('rb')))[1]).toBe(0);
      expect(await release({ channelId: ch, token: 'ra:1' })).toBe(true); // granted to rb:1, told to nobody
      await expect.poll(() => heard, { timeout: 10_000 }).toEqual(['resync']);
      expect((await cc.client.pubsub('NUMSUB', b.keys.grants('rb')))[1]).toBe(1);
      // what the waiter's check then finds
      expect(await b.pollWaiter(waiter(ch, 'rb:1', 1), 60_000)).toBe('granted');
      expect(await release({ channelId: ch, token: 'rb:1' }, 60_000, b)).toBe(true);
    } finally {
      await listening.stop();
      await b.close();
      client.disconnect();
    }
  });
});

describe('grant messages', () => {
  it('carry any channel id whole, a newline in it too', async () => {
    const ch = 'odd\nid: {x}';
    const b = new RedisStore({ url: server.url, prefix });
    const heard: string[] = [];
    const listening = b.listen('nb', {
      grant: ({ channelId, token }) => void heard.push(`g ${token} ${JSON.stringify(channelId)}`),
      queued: (channelId) => heard.push(`q ${JSON.stringify(channelId)}`),
      resync: () => {},
    });
    try {
      await listening.ready;
      expect(await b.acquireFirst([{ channelId: ch, max: 1 }], opts('nb:h'))).toEqual(['acquired']);
      expect(await store.enqueue(waiter(ch, 'na:1', 1), waitOpts())).toBe('queued'); // "q" to nb, the holder
      await expect.poll(() => b.queued(ch), { timeout: 10_000 }).toBe(true);
      expect(await b.enqueue(waiter(ch, 'nb:1', 1), waitOpts())).toBe('queued');
      expect(await release({ channelId: ch, token: 'nb:h' }, 60_000, b)).toBe(true); // grants na:1
      expect(await store.leaveQueue(waiter(ch, 'na:1', 1), 60_000)).toBe(true); // passes it to nb:1
      await expect.poll(() => heard.length, { timeout: 10_000 }).toBe(2);
      expect(heard).toEqual([`q ${JSON.stringify(ch)}`, `g nb:1 ${JSON.stringify(ch)}`]);
      expect(await release({ channelId: ch, token: 'nb:1' }, 60_000, b)).toBe(true);
    } finally {
      await listening.stop();
      await b.close();
    }
  });

  it("an older release's forms (`G` and `Q`, with a time first) are understood alike", async () => {
    const b = new RedisStore({ url: server.url, prefix });
    const heard: string[] = [];
    const listening = b.listen('ob', {
      grant: ({ kind, channelId, token }) => void heard.push(`${kind} ${token} ${channelId}`),
      queued: (channelId) => heard.push(`q ${channelId}`),
      resync: () => {},
    });
    try {
      await listening.ready;
      await cc.client.publish(b.keys.grants('ob'), 'G\n1700000000000\nob:1\nold ch');
      await cc.client.publish(b.keys.grants('ob'), 'Q\n1700000000000\nold ch');
      await cc.client.publish(b.keys.grants('ob'), 'x\nnot a message');
      await expect.poll(() => heard, { timeout: 10_000 }).toEqual(['claim ob:1 old ch', 'q old ch']);
      expect(b.queued('old ch')).toBe(true);
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
      grant: ({ channelId, token }) => void heard.push(`g ${token} ${channelId}`),
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
      // a release that leaves no live waiter clears it
      expect(await release({ channelId: ch, token: 'b:1' }, 60_000, b)).toBe(true);
      expect(b.queued(ch)).toBe(false);
      // an acquire that is admitted: no queue there
      expect(await c.acquireFirst([{ channelId: ch, max: 1 }], opts('c:2'))).toEqual(['acquired']);
      expect(c.queued(ch)).toBe(false);
      // a load read that finds a waiter sets it
      expect(await store.enqueue(waiter(ch, 'a:w', 1), waitOpts())).toBe('queued');
      expect((await c.readLoads([ch])).get(ch)!.waiting).toBe(1);
      expect(c.queued(ch)).toBe(true);
      // a release that grants the last waiter leaves none: cleared
      expect(await release({ channelId: ch, token: 'c:2' }, 60_000, c)).toBe(true);
      expect(c.queued(ch)).toBe(false);
      expect(await release({ channelId: ch, token: 'a:w' })).toBe(true);
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
  return s.exchangeLoads({
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
    await store.exchangeLoads({
      instanceId: 'V',
      mode: 'changes',
      counts: mine(2),
      keepMs: 60_000,
      read: [],
    });
    await store.exchangeLoads({
      instanceId: 'W',
      mode: 'changes',
      counts: mine(1),
      keepMs: 60_000,
      read: [],
    });
    // an older write of V lands after its last: the same tag, a version V no longer remembers, other counts
    const last = await field('V');
    const tag = String(last[0]).split('.')[0];
    await cc.client.hset(store.keys.loadCounts(), 'V', JSON.stringify([`${tag}.0`, last[1], 'lv', 5]));
    const read = await readAs(store, 'V', ['lv']);
    // what Redis holds (W's 1 + the stale 5), not that plus its own 2 again (8)
    expect(read.get('lv')).toMatchObject({ active: 6, waiting: 0 });
    // and V's latest counts go back in, as a new version
    await expect.poll(async () => (await field('V')).slice(2)).toEqual(['lv', 2]);
    expect((await field('V'))[0]).not.toBe(`${tag}.0`);
    const after = await readAs(store, 'W', ['lv']);
    expect(after.get('lv')).toMatchObject({ active: 3 });
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
      await s.exchangeLoads({
        instanceId: 'A',
        mode: 'changes',
        counts: counts({ x: 2 }),
        keepMs: 60_000,
        read: [],
      });
      await s.exchangeLoads({
        instanceId: 'B',
        mode: 'changes',
        counts: counts({ x: 1, y: 1 }),
        keepMs: 60_000,
        read: [],
      });
      const first = await readAs(s, 'C', ['x', 'y']);
      expect(first.get('x')).toMatchObject({ active: 3 });
      own.reset();
      const again = await readAs(s, 'C', ['x', 'y']);
      expect(again.get('x')).toMatchObject({ active: 3 });
      expect(again.get('y')).toMatchObject({ active: 1 });
      expect(own.count('hgetall')).toBe(2);
      expect(own.count('evalsha') + own.count('eval')).toBe(0);
      // a change and a read with a max age: the write as an HSET, then the snapshot built here and stored
      const mine = await s.exchangeLoads({
        instanceId: 'A',
        mode: 'changes',
        counts: counts({ x: 5 }),
        read: ['x'],
        maxAgeMs: 60_000,
      });
      expect(mine.get('x')).toMatchObject({ active: 6 });
      await expect.poll(() => own.client.exists(s.keys.loadSnapshot(60_000))).toBe(1);
      // and the next read shares it: one GET, no build
      own.reset();
      const shared = await readAs(s, 'B', ['x'], 60_000);
      expect(shared.get('x')).toMatchObject({ active: 6 });
      expect(own.sent).toEqual(['get']);
      // a lapsed instance is left out, and deleted (by the script, which checks it again)
      await own.client.hset(s.keys.loadCounts(), 'dead', JSON.stringify(['d.1', 1, 'y', 7]));
      const left = await readAs(s, 'C', ['y']);
      expect(left.get('y')).toMatchObject({ active: 1 });
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
    expect(await release({ channelId: ch, token: 'ls:h' })).toBe(true);
  });
});
