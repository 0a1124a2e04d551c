/**
 * LeaseManager on MemoryStore with a ManualClock (lease expiry, release backoff, the renewal timer and the cleanup
 * cap all run on it), and on small hand-written failing stores. Nothing depends on wall time.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from './manual-clock.js';
import { LeaseLostError, StoreUnavailableError } from '../../packages/slotgate/src/core/errors.js';
import {
  LeaseManager,
  type Lease,
  type LeaseEvent,
  type LeaseManagerOptions,
} from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import type { AcquireTarget, LeaseRef, SlotStore } from '../../packages/slotgate/src/store/store.js';

let clock: ManualClock;
let inner: MemoryStore;
let events: LeaseEvent[];
const managers: LeaseManager[] = [];

beforeEach(() => {
  clock = new ManualClock();
  inner = new MemoryStore({ clock });
  events = [];
});

afterEach(async () => {
  for (const m of managers.splice(0)) await m.close().catch(() => {});
});

/** Lets pending promise continuations run. */
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

function manager(options: Partial<LeaseManagerOptions> = {}): LeaseManager {
  const m = new LeaseManager({
    store: inner,
    clock,
    instanceId: 'inst',
    leaseTtlMs: () => 60_000,
    onEvent: (e) => events.push(e),
    ...options,
  });
  managers.push(m);
  return m;
}

type Overrides = Partial<Pick<SlotStore, 'acquireFirst' | 'renew' | 'reclaim'>> & {
  /** A release sent at once: its answer (the stub makes it a release that cannot be withdrawn). */
  release?: (lease: LeaseRef) => Promise<boolean>;
};

/** A store that behaves like `inner` except for the overridden operations. */
function stub(overrides: Overrides): SlotStore {
  const { release } = overrides;
  return {
    kind: 'memory',
    maxChannelsPerAcquire: 50,
    get commands() {
      return inner.commands;
    },
    acquireFirst: overrides.acquireFirst ?? ((t, o) => inner.acquireFirst(t, o)),
    release: release
      ? (l) => ({ done: release(l), withdrawable: false, withdraw: () => false })
      : (l, ttl, limit) => inner.release(l, ttl, limit),
    renew: overrides.renew ?? ((l, ttl) => inner.renew(l, ttl)),
    reclaim: overrides.reclaim ?? ((l, ttl, restore) => inner.reclaim(l, ttl, restore)),
    onRestart: () => () => {},
    onReconnect: () => () => {},
    enqueue: (w, o) => inner.enqueue(w, o),
    pollWaiter: (w) => inner.pollWaiter(w),
    leaveQueue: (w) => inner.leaveQueue(w),
    requeue: (f, t, o) => inner.requeue(f, t, o),
    listen: (id, l) => inner.listen(id, l),
    queued: (id) => inner.queued(id),
    readLoads: (ids) => inner.readLoads(ids),
    exchangeLoads: (e) => inner.exchangeLoads(e),
    readPeaks: (ids) => inner.readPeaks(ids),
    readHolders: (ids) => inner.readHolders(ids),
    readLimits: (ids) => inner.readLimits(ids),
    limitOf: (id) => inner.limitOf(id),
    setCooldown: (...a) => inner.setCooldown(...a),
    clearCooldown: (id) => inner.clearCooldown(id),
    health: () => inner.health(),
    sharedSettings: (o) => inner.sharedSettings(o),
    presence: inner.presence,
    close: () => inner.close(),
  };
}

const one = (channelId: string, max = 10): AcquireTarget[] => [{ channelId, max }];

async function take(m: LeaseManager, channelId: string, max = 10): Promise<Lease> {
  const outcome = await m.acquireFirst(one(channelId, max), true);
  expect(outcome.lease).toBeDefined();
  return outcome.lease!;
}

async function activeIn(channelId: string): Promise<number> {
  return (await inner.readLoads([channelId])).get(channelId)!.active;
}

describe('tokens and local counts', () => {
  it('tokens are <instanceId>:<seq>, one sequence number per acquire attempt', async () => {
    const m = manager();
    expect((await take(m, 'a')).token).toBe('inst:1');
    expect((await take(m, 'a')).token).toBe('inst:2');
    expect(m.nextToken()).toBe('inst:3');
    expect((await take(m, 'b')).token).toBe('inst:4');
  });

  it('a random instance id is url-safe and differs per manager', async () => {
    const a = manager({ instanceId: undefined });
    const b = manager({ instanceId: undefined });
    expect(a.instanceId).toMatch(/^[A-Za-z0-9_-]{12}$/);
    expect(a.instanceId).not.toBe(b.instanceId);
    expect((await take(a, 'x')).token).toBe(`${a.instanceId}:1`);
  });

  it('localCount tracks this instance’s live leases per channel', async () => {
    const m = manager();
    const a1 = await take(m, 'a', 2);
    await take(m, 'a', 2);
    await take(m, 'b', 2);
    expect([m.localCount('a'), m.localCount('b'), m.localCount('c'), m.size]).toEqual([2, 1, 0, 3]);
    // a full reply changes nothing
    expect(await m.acquireFirst(one('a', 2), true)).toEqual({ replies: ['full'] });
    expect(m.localCount('a')).toBe(2);
    await m.release(a1)?.done;
    expect([m.localCount('a'), m.localCount('b'), m.size]).toEqual([1, 1, 2]);
    expect(await activeIn('a')).toBe(1);
  });

  it('a multi-target acquire tracks the lease on the channel that admitted it', async () => {
    const m = manager();
    await take(m, 'full', 1);
    const outcome = await m.acquireFirst(
      [
        { channelId: 'full', max: 1 },
        { channelId: 'free', max: 1 },
      ],
      true,
    );
    expect(outcome.replies).toEqual(['full', 'acquired']);
    expect(outcome.lease).toMatchObject({ channelId: 'free', token: 'inst:2' });
    expect(outcome.lease!.expiresAt).toBe(clock.now() + 60_000);
    expect([m.localCount('full'), m.localCount('free')]).toEqual([1, 1]);
  });
});

describe('lease deadline', () => {
  it('runs from before the call, not from its reply: never past the lease in the store', async () => {
    // a store that builds the call 300 ms after it was asked (a reconnect's check, say) and answers 700 ms later
    const slow = stub({
      acquireFirst: async (t, o) => {
        await clock.advance(300);
        const reply = inner.acquireFirst(t, o);
        await clock.advance(700);
        return reply;
      },
    });
    const m = manager({ store: slow });
    const start = clock.now();
    const outcome = await m.acquireFirst([{ channelId: 'a', max: 1 }], true);
    expect(clock.now()).toBe(start + 1000);
    expect(outcome.lease!.expiresAt).toBe(start + 60_000);
    expect(outcome.lease!.acquiredAt).toBe(start + 1000);
  });

  it('a grant taken over from its own release runs from when that release was sent', async () => {
    const m = manager();
    const start = clock.now();
    await clock.advance(400);
    const lease = m.adopt('a', 'inst:w', 1, 60_000, start);
    expect(lease.expiresAt).toBe(start + 60_000);
    expect(m.adopt('b', 'inst:v', 1, 60_000, clock.now()).expiresAt).toBe(clock.now() + 60_000);
  });
});

describe('release', () => {
  it('releases exactly once: a second call is a no-op', async () => {
    const m = manager();
    const lease = await take(m, 'a');
    const before = inner.commands.release;
    await m.release(lease)?.done;
    await m.release(lease)?.done;
    await m.release({ channelId: 'a', token: 'never:1' })?.done;
    expect(inner.commands.release - before).toBe(1);
    expect(m.localCount('a')).toBe(0);
    expect(await activeIn('a')).toBe(0);
  });

  it('a second call while the first is in flight sends nothing more', async () => {
    const m = manager();
    const lease = await take(m, 'a');
    await take(m, 'a');
    const before = inner.commands.release;
    const first = m.release(lease);
    expect(first).toBeDefined();
    expect(m.release({ channelId: lease.channelId, token: lease.token })).toBeUndefined();
    await first!.done;
    expect(inner.commands.release - before).toBe(1);
    expect(m.localCount('a')).toBe(1);
  });

  it('a failing release is retried with doubling backoff until it succeeds', async () => {
    let calls = 0;
    const store = stub({
      release: async (l) => {
        calls++;
        if (calls <= 3) throw new Error(`boom ${calls}`);
        return inner.release(l).done;
      },
    });
    const m = manager({ store });
    const lease = await take(m, 'a');
    let settled = false;
    const done = m.release(lease)!.done.then(() => (settled = true));
    await flush();
    // it stopped renewing at once: the lease is no longer this instance's
    expect([m.size, m.localCount('a')]).toEqual([0, 0]);
    expect(calls).toBe(1);
    await clock.advance(49);
    await flush();
    expect(calls).toBe(1);
    await clock.advance(1); // +50
    await flush();
    expect(calls).toBe(2);
    await clock.advance(99);
    await flush();
    expect(calls).toBe(2);
    await clock.advance(1); // +100
    await flush();
    expect(calls).toBe(3);
    await clock.advance(200); // +200
    await flush();
    await done;
    expect(settled).toBe(true);
    expect(calls).toBe(4);
    expect(await activeIn('a')).toBe(0);
    expect(events.map((e) => e.type)).toEqual(['release_retry', 'release_retry', 'release_retry']);
    expect(events.map((e) => (e.type === 'release_retry' ? e.attempt : 0))).toEqual([1, 2, 3]);
  });

  it('gives up once the lease would have expired anyway (release_abandoned) and resolves', async () => {
    let calls = 0;
    const store = stub({
      release: async () => {
        calls++;
        throw new Error('redis down');
      },
    });
    const m = manager({ store, leaseTtlMs: () => 1_000 });
    const lease = await take(m, 'a');
    const done = m.release(lease)!.done;
    // attempts at +0, +50, +150, +350, +750; the next wait (800 ms) would end past the expiry at +1000
    for (const step of [50, 100, 200, 400]) {
      await flush();
      expect(events.some((e) => e.type === 'release_abandoned')).toBe(false);
      await clock.advance(step);
    }
    await flush();
    await done;
    expect(calls).toBe(5);
    expect(clock.now() - lease.acquiredAt).toBe(750);
    expect(events.map((e) => e.type)).toEqual([...Array(4).fill('release_retry'), 'release_abandoned']);
    expect(events.at(-1)).toMatchObject({ channelId: 'a', token: lease.token });
    await clock.advance(10_000);
    await flush();
    expect(calls).toBe(5);
  });
});

describe('uncertain acquire', () => {
  it('fires exactly one cleanup release per target and emits acquire_uncertain', async () => {
    const released: LeaseRef[] = [];
    const cause = new Error('socket closed after write');
    const store = stub({
      acquireFirst: async () => {
        throw cause;
      },
      release: async (l) => {
        released.push(l);
        return false;
      },
    });
    const m = manager({ store });
    const targets = [
      { channelId: 'a', max: 1 },
      { channelId: 'b', max: 1 },
      { channelId: 'c', max: 1 },
    ];
    const error = await m.acquireFirst(targets, true).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as StoreUnavailableError).operation).toBe('acquire');
    expect((error as StoreUnavailableError).cause).toBe(cause);
    await flush();
    expect(released).toEqual([
      { channelId: 'a', token: 'inst:1' },
      { channelId: 'b', token: 'inst:1' },
      { channelId: 'c', token: 'inst:1' },
    ]);
    expect(events).toEqual([
      { type: 'acquire_uncertain', channelIds: ['a', 'b', 'c'], token: 'inst:1', cleaned: true },
    ]);
    expect([m.size, m.localCount('a')]).toEqual([0, 0]);
  });

  it('a StoreUnavailableError from the store passes through unchanged', async () => {
    const original = new StoreUnavailableError('acquire', 'redis acquire timed out after 1000 ms');
    const store = stub({
      acquireFirst: async () => {
        throw original;
      },
    });
    const m = manager({ store });
    await expect(m.acquireFirst(one('a'), true)).rejects.toBe(original);
  });

  it('the cleanup is never retried: a failing removal is tried once and reported not cleaned', async () => {
    let calls = 0;
    const store = stub({
      acquireFirst: async () => {
        throw new Error('timeout');
      },
      release: async () => {
        calls++;
        throw new Error('still down');
      },
    });
    const m = manager({ store });
    await expect(m.acquireFirst(one('a'), true)).rejects.toBeInstanceOf(StoreUnavailableError);
    await flush();
    await clock.advance(65_000);
    expect(calls).toBe(1);
    expect(events).toEqual([
      { type: 'acquire_uncertain', channelIds: ['a'], token: 'inst:1', cleaned: false },
    ]);
  });

  it('a cleanup that does not answer is abandoned after the cap', async () => {
    let calls = 0;
    const store = stub({
      acquireFirst: async () => {
        throw new Error('timeout');
      },
      release: () => {
        calls++;
        return new Promise<boolean>(() => {}); // never settles
      },
    });
    const m = manager({ store });
    await expect(m.acquireFirst(one('a'), true)).rejects.toBeInstanceOf(StoreUnavailableError);
    await clock.advance(499);
    expect(events).toEqual([]);
    await clock.advance(1);
    expect(events).toEqual([
      { type: 'acquire_uncertain', channelIds: ['a'], token: 'inst:1', cleaned: false },
    ]);
    expect(calls).toBe(1);
  });
});

describe('renewal', () => {
  it('renewAll extends every live lease in one batched store call', async () => {
    const m = manager();
    const leases = [await take(m, 'a'), await take(m, 'a'), await take(m, 'b')];
    await clock.advance(20_000);
    const before = inner.commands.renew;
    await m.renewAll();
    expect(inner.commands.renew - before).toBe(1);
    for (const lease of leases) expect(lease.expiresAt).toBe(clock.now() + 60_000);
    // past the original expiry, the leases still hold in the store
    await clock.advance(50_000);
    expect(await activeIn('a')).toBe(2);
    expect(events).toEqual([]);
  });

  it('a lease the store lost is taken back while its channel has a free slot (lease_reclaimed)', async () => {
    const m = manager();
    const kept = await take(m, 'a', 2);
    const removed = await take(m, 'a', 2);
    await inner.release(removed); // gone behind the manager's back (a flushed or restarted store)
    await m.renewAll();
    expect(events).toEqual([{ type: 'lease_reclaimed', channelId: 'a', token: removed.token }]);
    expect(await activeIn('a')).toBe(2);
    expect(removed.expiresAt).toBe(clock.now() + 60_000);
    expect([removed.lost.aborted, kept.lost.aborted, m.size]).toEqual([false, false, 2]);
  });

  it('a lost lease whose channel is full is lost for good: dropped, reported, and its signal fires', async () => {
    const m = manager();
    const kept = await take(m, 'a', 1);
    const other = await take(m, 'b', 1);
    await inner.release(kept);
    // another instance took the free place meanwhile
    const newcomer = { token: 'other:1', leaseTtlMs: 60_000, checkCooldown: true };
    expect(await inner.acquireFirst(one('a', 1), newcomer)).toEqual(['acquired']);
    await m.renewAll();
    expect(events).toEqual([{ type: 'lease_lost', channelId: 'a', token: kept.token, reason: 'missing' }]);
    expect(kept.lost.aborted).toBe(true);
    expect(kept.lost.reason).toBeInstanceOf(LeaseLostError);
    expect(kept.lost.reason).toMatchObject({ code: 'lease_lost', channelId: 'a', reason: 'missing' });
    expect([other.lost.aborted, m.size, m.localCount('a')]).toEqual([false, 1, 0]);
    // a dropped lease is not released again, and the newcomer keeps its slot
    const before = inner.commands.release;
    expect(m.release(kept)).toBeUndefined();
    expect(inner.commands.release).toBe(before);
    expect(await activeIn('a')).toBe(1);
  });

  it('with reclaim off a lost lease ends at once; with fencing off it is only reported', async () => {
    let fencing = { enabled: true, reclaim: false };
    const m = manager({ fencing: () => fencing });
    const a = await take(m, 'a');
    await inner.release(a);
    await m.renewAll();
    expect(events).toEqual([{ type: 'lease_lost', channelId: 'a', token: a.token, reason: 'missing' }]);
    expect(a.lost.aborted).toBe(true);
    expect(await activeIn('a')).toBe(0); // not taken back, though there was room

    fencing = { enabled: false, reclaim: true };
    events.length = 0;
    const b = await take(m, 'b');
    await inner.release(b);
    await m.renewAll();
    expect(events).toEqual([{ type: 'lease_lost', channelId: 'b', token: b.token, reason: 'missing' }]);
    expect(b.lost.aborted).toBe(false);
  });

  it('a lease that expired in the store and whose place was taken is lost', async () => {
    // the manager's own timers stand still (its renewal never came in time); the store's time moves on
    const m = manager({ leaseTtlMs: () => 1_000, clock: new ManualClock(clock.now()) });
    const lease = await take(m, 'a', 1);
    await clock.advance(1_001);
    // another instance took the free place, which drops the expired member
    expect(
      await inner.acquireFirst(one('a', 1), { token: 'other:1', leaseTtlMs: 1_000, checkCooldown: true }),
    ).toEqual(['acquired']);
    await m.renewAll();
    expect(events).toEqual([{ type: 'lease_lost', channelId: 'a', token: lease.token, reason: 'missing' }]);
    expect([m.size, lease.lost.aborted]).toEqual([0, true]);
  });

  it('a reclaim the store cannot confirm loses the lease (its slot may be taken)', async () => {
    const store = stub({
      reclaim: async () => {
        throw new StoreUnavailableError('renew', 'redis down');
      },
    });
    const m = manager({ store });
    const lease = await take(m, 'a');
    await inner.release(lease);
    await m.renewAll();
    expect(events).toEqual([{ type: 'lease_lost', channelId: 'a', token: lease.token, reason: 'missing' }]);
    expect(lease.lost.aborted).toBe(true);
  });

  it('with no renewal confirmed, a lease is fenced a margin before its local expiry (expired)', async () => {
    let down = false;
    const store = stub({
      renew: async (l, ttl) => {
        if (down) throw new Error('redis down');
        return inner.renew(l, ttl);
      },
    });
    const m = manager({ store, leaseTtlMs: () => 6_000 }); // renewed every 2 s; margin 600 ms
    const t0 = clock.now();
    const lease = await take(m, 'a');
    await clock.advance(2_000); // renewed: expires at 8 s
    expect(lease.expiresAt - t0).toBe(8_000);
    down = true;
    await clock.advance(3_000); // 4 s failed; the retries come every second from then on
    expect(events.map((e) => e.type)).toEqual(['renew_failed', 'renew_failed']);
    await clock.advance(2_399); // 7,399 ms: still live
    expect([lease.lost.aborted, m.size]).toEqual([false, 1]);
    await clock.advance(1); // 7,400 = 8,000 - 600
    expect(lease.lost.aborted).toBe(true);
    expect(lease.lost.reason).toMatchObject({ reason: 'expired', channelId: 'a' });
    expect(events.at(-1)).toEqual({
      type: 'lease_lost',
      channelId: 'a',
      token: lease.token,
      reason: 'expired',
    });
    expect(m.size).toBe(0);
    expect(m.release(lease)).toBeUndefined();
  });

  it('a renewal confirmed in time pushes the fence back', async () => {
    const m = manager({ leaseTtlMs: () => 6_000 });
    const lease = await take(m, 'a');
    await clock.advance(30_000);
    expect([lease.lost.aborted, m.size, events]).toEqual([false, 1, []]);
  });

  it('after a restart of the store every live lease is registered again, even past a lowered max', async () => {
    let restart: ((info: { first: boolean }) => Promise<void>) | undefined;
    const store: SlotStore = {
      ...stub({}),
      onRestart: (listener) => {
        restart = listener;
        return () => (restart = undefined);
      },
    };
    const m = manager({ store });
    const a1 = await take(m, 'a', 2);
    const a2 = await take(m, 'a', 2);
    await inner.release(a1);
    await inner.release(a2);
    const newcomer = { token: 'other:1', leaseTtlMs: 60_000, checkCooldown: true };
    expect(await inner.acquireFirst(one('a', 2), newcomer)).toEqual(['acquired']);
    await restart!({ first: false });
    expect(await activeIn('a')).toBe(3); // in flight all along: registered whatever the load
    expect(events).toEqual([{ type: 'leases_restored', leases: 2 }]);
    expect([a1.lost.aborted, a2.lost.aborted]).toEqual([false, false]);
    await m.close();
    expect(restart).toBeUndefined();
  });

  it('a failed renewal emits renew_failed and keeps the leases and their expiry', async () => {
    const store = stub({
      renew: async () => {
        throw new Error('redis down');
      },
    });
    const m = manager({ store });
    const lease = await take(m, 'a');
    await take(m, 'b');
    const expiresAt = lease.expiresAt;
    await clock.advance(20_000); // the renewal timer fires at TTL / 3
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ type: 'renew_failed', leases: 2 });
    expect(m.size).toBe(2);
    expect(lease.expiresAt).toBe(expiresAt);
  });

  it('concurrent renewAll calls share one store call', async () => {
    let calls = 0;
    let finish: () => void = () => {};
    const store = stub({
      renew: async (l, ttl) => {
        calls++;
        await new Promise<void>((r) => (finish = r));
        return inner.renew(l, ttl);
      },
    });
    const m = manager({ store });
    await take(m, 'a');
    const p1 = m.renewAll();
    const p2 = m.renewAll();
    finish();
    await Promise.all([p1, p2]);
    expect(calls).toBe(1);
  });

  it('the timer renews every TTL / 3 while leases live, reading the TTL at every tick', async () => {
    let ttl = 300;
    const m = manager({ leaseTtlMs: () => ttl });
    const before = inner.commands.renew;
    const lease = await take(m, 'a');
    await clock.advance(99);
    expect(inner.commands.renew - before).toBe(0);
    await clock.advance(1);
    expect(inner.commands.renew - before).toBe(1);
    ttl = 600; // a settings change: the next tick comes after 200 ms and renews for 600
    await clock.advance(100);
    expect(inner.commands.renew - before).toBe(2);
    expect(lease.expiresAt).toBe(clock.now() + 600);
    await clock.advance(199);
    expect(inner.commands.renew - before).toBe(2);
    await clock.advance(1);
    expect(inner.commands.renew - before).toBe(3);
    // no live lease, no timer
    await m.release(lease)?.done;
    await clock.advance(10_000);
    expect(inner.commands.renew - before).toBe(3);
    expect(clock.pending).toBe(0);
  });
});

describe('claim', () => {
  const queueOptions = { maxWaiting: 10, ttlMs: 60_000, leaseTtlMs: 60_000 };

  /** Queues a waiter of the manager behind the slot it holds on `channelId` (max 1), then releases that slot. */
  async function granted(m: LeaseManager, channelId: string): Promise<string> {
    const holder = await take(m, channelId, 1);
    const token = m.nextToken();
    expect(await inner.enqueue({ channelId, token, max: 1 }, queueOptions)).toBe('queued');
    await m.release(holder)!.done; // the store grants the slot to the waiter, until the claim deadline (5 s)
    expect(await inner.pollWaiter({ channelId, token, max: 1 })).toBe('granted');
    return token;
  }

  it('renews a granted slot to a full lease with one store call and tracks it like an acquired one', async () => {
    const m = manager();
    const token = await granted(m, 'g');
    await clock.advance(1_000);
    const renewals = inner.commands.renew;
    const lease = await m.claim('g', token, 1);
    const now = clock.now();
    expect(lease).toEqual({
      channelId: 'g',
      token,
      acquiredAt: now,
      max: 1,
      expiresAt: now + 60_000,
      ttlMs: 60_000,
      local: false,
      lost: expect.any(AbortSignal),
    });
    expect(inner.commands.renew - renewals).toBe(1);
    expect([m.size, m.localCount('g'), [...m.leases()]]).toEqual([1, 1, [lease]]);
    // Past the claim deadline the slot is still its own: a newcomer finds the channel full.
    await clock.advance(10_000);
    const newcomer = { token: 'other:1', leaseTtlMs: 60_000, checkCooldown: true };
    expect(await inner.acquireFirst(one('g', 1), newcomer)).toEqual(['full']);
    // The manager's renewal timer (every TTL / 3, set at the first acquire: 20 s from the start) renews it.
    await clock.advance(8_999);
    expect(inner.commands.renew - renewals).toBe(1);
    await clock.advance(1);
    expect(inner.commands.renew - renewals).toBe(2);
    expect(lease!.expiresAt).toBe(clock.now() + 60_000);
    await m.release(lease!)!.done;
    expect(await activeIn('g')).toBe(0);
    expect(events).toEqual([]);
  });

  it('is undefined when the grant is gone: its claim deadline passed and a newcomer took the slot', async () => {
    const m = manager();
    const token = await granted(m, 'g');
    const newcomer = (n: number) => ({ token: `other:${n}`, leaseTtlMs: 60_000, checkCooldown: true });
    await clock.advance(4_999);
    expect(await inner.acquireFirst(one('g', 1), newcomer(1))).toEqual(['full']); // the grant holds until then
    await clock.advance(1);
    expect(await inner.acquireFirst(one('g', 1), newcomer(2))).toEqual(['acquired']);
    expect(await m.claim('g', token, 1)).toBeUndefined();
    expect([m.size, m.localCount('g')]).toEqual([0, 0]);
    expect(events).toEqual([]);
  });

  it('is undefined when the grant was given back (the waiter left the queue)', async () => {
    const m = manager();
    const token = await granted(m, 'h');
    expect(await inner.leaveQueue({ channelId: 'h', token, max: 1 })).toBe(true);
    expect(await m.claim('h', token, 1)).toBeUndefined();
    expect([m.size, m.localCount('h')]).toEqual([0, 0]);
    expect(await activeIn('h')).toBe(0);
  });

  it('a closed manager claims nothing', async () => {
    const m = manager();
    const token = await granted(m, 'c');
    await m.close();
    await expect(m.claim('c', token, 1)).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(m.size).toBe(0);
  });
});

describe('close', () => {
  it('releases every live lease, stops the timer and refuses new acquires', async () => {
    const m = manager();
    await take(m, 'a');
    await take(m, 'a');
    await take(m, 'b');
    const before = inner.commands.release;
    await m.close();
    expect(inner.commands.release - before).toBe(3);
    expect(await activeIn('a')).toBe(0);
    expect(await activeIn('b')).toBe(0);
    expect([m.size, m.localCount('a'), m.localCount('b')]).toEqual([0, 0, 0]);
    expect(clock.pending).toBe(0);
    await expect(m.acquireFirst(one('a'), true)).rejects.toBeInstanceOf(StoreUnavailableError);
  });

  it('waits for releases already in flight', async () => {
    let finish: () => void = () => {};
    const store = stub({
      release: async (l) => {
        await new Promise<void>((r) => (finish = r));
        return inner.release(l).done;
      },
    });
    const m = manager({ store });
    const lease = await take(m, 'a');
    void m.release(lease);
    let closed = false;
    const closing = m.close().then(() => (closed = true));
    await flush();
    expect(closed).toBe(false);
    finish();
    await closing;
    expect(closed).toBe(true);
    expect(await activeIn('a')).toBe(0);
  });
});
