/**
 * Slot handoff (packages/slotgate/src/admission/handoff.ts) with a LeaseManager on MemoryStore and a ManualClock, behind
 * a store that holds releases until `send()`, like RedisStore holds the releases of one event-loop turn.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { CandidateSets } from '../../packages/slotgate/src/admission/pass/candidates.js';
import { Handoff } from '../../packages/slotgate/src/admission/leases/handoff.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { ManualClock } from './manual-clock.js';
import { LeaseManager, type Lease } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import type { LeaseRef, PendingRelease, SlotStore } from '../../packages/slotgate/src/store/store.js';

let clock: ManualClock;
let inner: MemoryStore;
const managers: LeaseManager[] = [];
/** The `send` of every holding store of the test: close() gives leases back through them. */
const senders: (() => Promise<void>)[] = [];

beforeEach(() => {
  clock = new ManualClock();
  inner = new MemoryStore({ clock });
});

afterEach(async () => {
  for (const m of managers.splice(0)) {
    const closing = m.close();
    for (const send of senders) await send();
    await closing;
  }
  senders.length = 0;
});

/** MemoryStore, except that releases wait for `send()` and can be withdrawn until then. */
function holding() {
  const queued = new Map<string, { lease: LeaseRef; resolve: (v: boolean) => void }>();
  const store: SlotStore = Object.create(inner) as SlotStore;
  store.release = (lease): PendingRelease => {
    let resolve!: (v: boolean) => void;
    const done = new Promise<boolean>((r) => (resolve = r));
    queued.set(lease.token, { lease: { ...lease }, resolve });
    return {
      done,
      withdrawable: true,
      withdraw: () => {
        const q = queued.get(lease.token);
        if (!q) return false;
        queued.delete(lease.token);
        q.resolve(true);
        return true;
      },
    };
  };
  const send = async () => {
    for (const [token, q] of [...queued]) {
      queued.delete(token);
      q.resolve(await inner.release(q.lease).done);
    }
  };
  senders.push(send);
  return { store, send, queued };
}

function setup(store: SlotStore, ttl = 60_000) {
  const leases = new LeaseManager({ store, clock, instanceId: 'inst', leaseTtlMs: () => ttl });
  managers.push(leases);
  return { leases, handoff: new Handoff(leases, clock) };
}

async function take(leases: LeaseManager, channelId: string, max = 2): Promise<Lease> {
  const { lease } = await leases.acquireFirst([{ channelId, max }], true);
  expect(lease).toBeDefined();
  return lease!;
}

const sets = new CandidateSets();
const candidates = (...list: Candidate[]) => sets.prepare(list);
const activeIn = async (id: string) => (await inner.readLoads([id])).get(id)!.active;
const any = () => true;

describe('Handoff', () => {
  it('takes over a released slot whose removal was not sent: same token, live again, nothing sent', async () => {
    const { store, queued, send } = holding();
    const { leases, handoff } = setup(store);
    const lease = await take(leases, 'a');
    const release = leases.release(lease)!;
    expect(handoff.park(lease, release)).toBe(true);
    expect(handoff.available).toBe(true);
    expect(leases.localCount('a')).toBe(0);
    const set = candidates({ id: 'a', maxConcurrency: 2 });
    const taken = handoff.take(set, any, any);
    expect(taken?.lease.token).toBe(lease.token);
    expect(taken?.channel.id).toBe('a');
    await release.done;
    expect(queued.size).toBe(0);
    expect(leases.localCount('a')).toBe(1);
    expect(handoff.available).toBe(false);
    expect(handoff.count).toBe(1);
    expect(await activeIn('a')).toBe(1);
    // the new holder's release is a real one, and its removal goes to the store
    const last = leases.release(taken!.lease)!;
    expect(queued.size).toBe(1);
    await send();
    await last.done;
    expect(await activeIn('a')).toBe(0);
    expect(leases.size).toBe(0);
  });

  it('nothing to take for a channel outside the set, past a lowered max, in another tier or not usable', async () => {
    const { store, send } = holding();
    const { leases, handoff } = setup(store);
    const lease = await take(leases, 'a', 2);
    const release = leases.release(lease)!;
    handoff.park(lease, release);
    expect(handoff.take(candidates({ id: 'b', maxConcurrency: 2 }), any, any)).toBeUndefined();
    // acquired under max 2: never carried past max 1
    expect(handoff.take(candidates({ id: 'a', maxConcurrency: 1 }), any, any)).toBeUndefined();
    const tiered = candidates({ id: 'b', maxConcurrency: 2, priority: 5 }, { id: 'a', maxConcurrency: 2 });
    expect(handoff.take(tiered, (t) => t === 0, any)).toBeUndefined(); // a is in the second tier
    expect(handoff.take(tiered, any, (c) => c.id !== 'a')).toBeUndefined(); // cooling, say
    expect(handoff.available).toBe(true);
    expect(handoff.take(tiered, (t) => t === 1, any)?.lease.token).toBe(lease.token);
    await send();
  });

  it('nothing to take once the removal is on its way', async () => {
    const { store, send } = holding();
    const { leases, handoff } = setup(store);
    const lease = await take(leases, 'a');
    const release = leases.release(lease)!;
    handoff.park(lease, release);
    await send();
    await release.done;
    expect(handoff.available).toBe(false);
    expect(handoff.take(candidates({ id: 'a', maxConcurrency: 2 }), any, any)).toBeUndefined();
    expect(await activeIn('a')).toBe(0);
  });

  it('never hands off a lease with less than half a TTL left by the local estimate', async () => {
    const { store, send } = holding();
    store.renew = async () => {
      throw new Error('redis down'); // renewals fail: the local estimate of the expiry stays where it was
    };
    const { leases, handoff } = setup(store, 60_000);
    const lease = await take(leases, 'a');
    await clock.advance(31_000); // 29 s of 60 s left
    const release = leases.release(lease)!;
    handoff.park(lease, release);
    expect(handoff.take(candidates({ id: 'a', maxConcurrency: 2 }), any, any)).toBeUndefined();
    await send();
    await release.done;
    expect(await activeIn('a')).toBe(0);
  });

  it('a store that sends every release at once offers nothing to park', async () => {
    const { leases, handoff } = setup(inner);
    const lease = await take(leases, 'a');
    const release = leases.release(lease)!;
    expect(release.withdrawable).toBe(false);
    expect(handoff.park(lease, release)).toBe(false);
    expect(handoff.available).toBe(false);
    await release.done;
    expect(await activeIn('a')).toBe(0);
  });
});
