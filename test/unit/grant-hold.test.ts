/**
 * A slot granted to a waiter by another instance's release holds it for the claim deadline from the grant, and the
 * grant came after the waiter's registration was sent: the waiter holds it from that send, with no claim, and the
 * renewal claims it in time for its fence. A request that ends first never makes the claim's store call.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { fenceMarginMs } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { RENEW_BUDGET_MS } from '../../packages/slotgate/src/admission/leases/renewal.js';
import type { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import { closeEngines, hold, load, setup } from './admission-fixture.js';
import { elapse, flush, track } from './manual-time.js';

const CLAIM_MS = 5_000; // MemoryStore's default claim deadline
const RENEW_BY = CLAIM_MS - fenceMarginMs(CLAIM_MS) - RENEW_BUDGET_MS; // after the registration's send

afterEach(closeEngines);

/** The instants `store.renew` was called at (a claim is a renewal of one lease). */
function renewals(store: MemoryStore, now: () => number): number[] {
  const at: number[] = [];
  const renew = store.renew.bind(store);
  store.renew = (leases, ttlMs) => {
    at.push(now());
    return renew(leases, ttlMs);
  };
  return at;
}

/** A slot of `channel` held by the other instance, and this instance's request queued for it at `sentAt`. */
async function queuedBehindOther(settings = {}) {
  const { clock, store, admission, other } = setup(
    { wait_timeout_ms: 20_000, ...settings },
    { random: () => 0 },
  );
  const channel = { id: 'g', maxConcurrency: 1, maxWaiting: 4 };
  const [holder] = await hold(other, channel);
  const calls = renewals(store, () => clock.now());
  const sentAt = clock.now();
  const waiting = track(clock, admission.acquire({ candidates: [channel] }));
  await flush();
  /** The other instance releases `afterMs` after the registration went out: the waiter is granted its slot. */
  const grantAfter = async (afterMs: number) => {
    await elapse(clock, afterMs);
    await holder!.release();
    await flush();
    return waiting.value!;
  };
  return { clock, store, waiting, sentAt, calls, grantAfter };
}

describe('a grant held from its registration, with no claim', () => {
  it('a request granted and done well inside the claim deadline never calls the store to claim', async () => {
    const { clock, waiting, sentAt, calls, grantAfter } = await queuedBehindOther();
    const ticket = await grantAfter(1_000);
    expect(waiting.at).toBe(sentAt + 1_000);
    await elapse(clock, 1_000);
    await ticket.release();
    await elapse(clock, CLAIM_MS);
    expect(calls).toEqual([]);
  });

  it('a longer hold is renewed before its fence, once, and then runs on the lease TTL', async () => {
    const { clock, store, sentAt, calls, grantAfter } = await queuedBehindOther();
    const ticket = await grantAfter(1_000);
    await elapse(clock, CLAIM_MS + 1_000);
    // dated from the registration's send (1 s before the grant), not from the grant
    expect(calls).toEqual([sentAt + RENEW_BY]);
    expect(ticket.lost.aborted).toBe(false);
    expect((await load(store, 'g')).active).toBe(1); // the renewal made the grant a lease: it did not pass on
    await elapse(clock, 20_000); // then every third of the lease TTL
    expect(calls).toEqual([sentAt + RENEW_BY, sentAt + RENEW_BY + 20_000]);
    await ticket.release();
  });

  it('a grant with too little of its deadline left is claimed before the request is admitted', async () => {
    const { clock, waiting, sentAt, calls, grantAfter } = await queuedBehindOther();
    const late = RENEW_BY + fenceMarginMs(CLAIM_MS); // less than a margin and a round trip left
    await grantAfter(late);
    expect(calls).toEqual([sentAt + late]);
    expect(waiting.at).toBe(sentAt + late);
    await elapse(clock, CLAIM_MS);
    expect(calls).toEqual([sentAt + late]); // a full lease since the claim: nothing more before its period
    await waiting.value!.release();
  });

  it('while the store fails, the claim is retried at most every 100 ms until the fence ends the request', async () => {
    const { clock, store, sentAt, calls, grantAfter } = await queuedBehindOther();
    const ticket = await grantAfter(1_000);
    store.renew = (leases) => {
      calls.push(clock.now());
      return Promise.reject(new Error(`redis down (${leases.length})`));
    };
    await elapse(clock, CLAIM_MS);
    const fence = sentAt + CLAIM_MS - fenceMarginMs(CLAIM_MS);
    expect(calls[0]).toBe(sentAt + RENEW_BY);
    expect(calls.length).toBeLessThanOrEqual((fence - calls[0]!) / 100 + 1);
    expect(ticket.lost.aborted).toBe(true); // fenced, never past the grant's deadline
    await ticket.release();
  });

  it('with fencing off nothing would end a request whose grant passed on: it claims at once', async () => {
    const { waiting, sentAt, calls, grantAfter } = await queuedBehindOther({
      lease_fencing_enabled: false,
    });
    await grantAfter(1_000);
    expect(calls).toEqual([sentAt + 1_000]);
    await waiting.value!.release();
  });
});
