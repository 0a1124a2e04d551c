/**
 * storeFailureMode 'local_share' on a ManualClock: three engines ("instances") share one MemoryStore behind a switch
 * that makes every store call fail, as a Redis down for the whole fleet would.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import type { Admission, AdmissionEvent, Ticket } from '../../packages/slotgate/src/admission/types.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { ManualClock } from './manual-clock.js';
import { StoreUnavailableError } from '../../packages/slotgate/src/core/errors.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import type { SlotStore } from '../../packages/slotgate/src/store/store.js';
import { elapse } from './manual-time.js';

const FAILING = new Set([
  'acquireFirst',
  'release',
  'renew',
  'reclaim',
  'enqueue',
  'pollWaiter',
  'leaveQueue',
  'readLoads',
  'exchangeLoads',
  'setCooldown',
  'clearCooldown',
]);

/** The store as one instance sees it: every call fails while `down.value` is true. */
function behind(store: MemoryStore, down: { value: boolean }): SlotStore {
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== 'function') return value;
      const fn = value as (...a: unknown[]) => unknown;
      return (...args: unknown[]) => {
        if (prop === 'health')
          return Promise.resolve(down.value ? { healthy: false, error: 'down' } : { healthy: true });
        if (down.value && prop === 'release') {
          const done = Promise.reject(new StoreUnavailableError('release', 'down'));
          return { done, withdrawable: false, withdraw: () => false };
        }
        if (down.value && FAILING.has(String(prop))) {
          return Promise.reject(new StoreUnavailableError(String(prop), 'redis down'));
        }
        return fn.apply(target, args);
      };
    },
  });
}

const TTL = 6_000; // renewed every 2 s, fenced 600 ms before expiry
const channel: Candidate = { id: 'c', maxConcurrency: 3 };
const engines: Admission[] = [];

afterEach(async () => {
  await Promise.all(engines.splice(0).map((a) => a.close()));
});

function fleet(mode: 'fail_closed' | 'local_share', size = 3, seen = size) {
  const clock = new ManualClock();
  const store = new MemoryStore({ clock });
  const down = { value: false };
  const events: AdmissionEvent[] = [];
  const instances = Array.from({ length: size }, () => {
    const a = createAdmission({
      store: behind(store, down),
      clock,
      settings: { lease_ttl_ms: TTL, wait_enabled: false },
      storeFailureMode: mode,
      fleetSize: () => seen,
      onEvent: (e) => events.push(e),
    });
    engines.push(a);
    return a;
  });
  return { clock, store, down, instances, events };
}

const attempt = (a: Admission) => a.acquire({ candidates: [channel] }).catch((e: unknown) => e as Error);
const running = (tickets: Ticket<Candidate>[]) => tickets.filter((t) => !t.lost.aborted);

describe("storeFailureMode 'local_share'", () => {
  it('keeps the fleet within max while the store is down, and registers local slots when it is back', async () => {
    const { clock, store, down, instances, events } = fleet('local_share');
    const [a, b, c] = instances as [Admission, Admission, Admission];
    const held = [await a.acquire({ candidates: [channel] })];
    held.push(await a.acquire({ candidates: [channel] }), await a.acquire({ candidates: [channel] }));

    down.value = true;
    await elapse(clock, 1_000);
    // the store has not failed for a lease TTL yet (each instance counts from its own first failed call): the
    // others fail closed
    expect(await attempt(b)).toBeInstanceOf(StoreUnavailableError);
    expect(await attempt(c)).toBeInstanceOf(StoreUnavailableError);

    // a's leases reach their local expiry unrenewed: one stays as a local slot (its share, ⌊3 ÷ 3⌋), two are fenced
    await elapse(clock, TTL);
    expect(running(held)).toHaveLength(1);
    expect(events.filter((e) => e.type === 'lease_kept_local')).toHaveLength(1);
    expect(events.filter((e) => e.type === 'lease_lost')).toHaveLength(2);

    // one store failure ago was more than a lease TTL ago: b and c admit on their shares, a has used its own
    const local = [await b.acquire({ candidates: [channel] }), await c.acquire({ candidates: [channel] })];
    expect(await attempt(a)).toBeInstanceOf(StoreUnavailableError);
    expect(await attempt(b)).toBeInstanceOf(StoreUnavailableError);
    expect(running(held).length + running(local).length).toBe(3);
    expect(store.commands.acquire).toBe(3); // nothing reached the store while it was down

    // back up: each instance registers its local slots at its next store call (a renewal retry, within a second),
    // and one that ran on its share keeps to it meanwhile
    down.value = false;
    await elapse(clock, 1_000);
    expect(await attempt(b)).toBeInstanceOf(StoreUnavailableError); // still on its share, which is used
    await elapse(clock, 2_500); // RECOVERY_MS after the last registration
    expect(events.filter((e) => e.type === 'local_registered')).toHaveLength(3);
    expect((await store.readLoads(['c'])).get('c')!.active).toBe(3);
    expect(await attempt(c)).toMatchObject({ code: 'channel_capacity_exhausted' });

    // the registered slots are leases like any other: released through the store
    for (const t of [...running(held), ...local]) await t.release();
    expect((await store.readLoads(['c'])).get('c')!.active).toBe(0);
  });

  it('an instance that sends the store nothing learns of the outage from its probe, and admits on its share', async () => {
    const { clock, down, instances } = fleet('local_share');
    down.value = true;
    await elapse(clock, TTL + 1_100); // a probe failed over a lease TTL ago
    const ticket = await instances[2]!.acquire({ candidates: [channel] });
    expect(ticket.lost.aborted).toBe(false);
    expect(instances[2]!.stats().localShare).toEqual({ mode: 'local_share', active: true, admitted: 1 });
  });

  it('a local slot that no longer fits when the store is back is lost, never registered past max', async () => {
    const { clock, store, down, instances, events } = fleet('local_share');
    down.value = true;
    await elapse(clock, TTL + 1_100);
    const local = await instances[1]!.acquire({ candidates: [channel] });
    down.value = false;
    // before b's probe sees the store back, the channel fills up through the store
    for (let i = 1; i <= 3; i++) {
      const opts = { token: `other:${i}`, leaseTtlMs: TTL, checkCooldown: false };
      expect(await store.acquireFirst([{ channelId: 'c', max: 3 }], opts)).toEqual(['acquired']);
    }
    await elapse(clock, 1_100);
    expect(local.lost.aborted).toBe(true);
    expect(local.lost.reason).toMatchObject({ code: 'lease_lost', reason: 'missing' });
    expect(events).toContainEqual({ type: 'local_registered', leases: 0 });
    expect((await store.readLoads(['c'])).get('c')!.active).toBe(3);
  });

  it('admits nothing on its own when it has seen no instance (a share of 0)', async () => {
    const { clock, down, instances } = fleet('local_share', 1, 0);
    down.value = true;
    await attempt(instances[0]!); // the first failure starts the clock
    await elapse(clock, TTL + 1);
    expect(await attempt(instances[0]!)).toBeInstanceOf(StoreUnavailableError);
  });

  it('fail_closed (the default) admits nothing while the store is down, however long', async () => {
    const { clock, down, instances } = fleet('fail_closed');
    const held = await instances[0]!.acquire({ candidates: [channel] });
    down.value = true;
    await elapse(clock, TTL * 2);
    expect(held.lost.aborted).toBe(true); // fenced at its local expiry
    expect(await attempt(instances[1]!)).toBeInstanceOf(StoreUnavailableError);
  });
});
