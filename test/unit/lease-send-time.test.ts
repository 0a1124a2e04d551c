/**
 * A lease's local expiry, and so its fencing moment, runs from when the store call that confirmed it was SENT, never
 * from its reply: the store scored the lease no earlier than the send, so an expiry counted from a late reply could
 * outlive the lease in the store. Each case uses a store that answers 700 ms after the call (on a ManualClock), then
 * fails every renewal, and checks both `expiresAt` and the instant the lease's `lost` signal fires.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ManualClock } from './manual-clock.js';
import {
  fenceMarginMs,
  LeaseManager,
  type Lease,
} from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import type { RestartListener, SlotStore } from '../../packages/slotgate/src/store/store.js';
import { flush, track } from './manual-time.js';

const TTL = 6_000; // renewed every 2 s; fenced 600 ms before the local expiry
const LATE_MS = 700;

let clock: ManualClock;
let inner: MemoryStore;
const managers: LeaseManager[] = [];

beforeEach(() => {
  clock = new ManualClock();
  inner = new MemoryStore({ clock });
});

afterEach(async () => {
  for (const m of managers.splice(0)) await m.close().catch(() => {});
});

type Late = 'renew' | 'reclaim';

/**
 * `inner` as an instance sees it over a slow link: the `late` operations reach the store at once (it scores them
 * then) and their reply arrives LATE_MS later; each call's send time is recorded. While `down`, renewals fail at once.
 * The restart listener is kept, so a test can play a store restart.
 */
function slowStore(late: readonly Late[]) {
  const sent: Record<Late, number[]> = { renew: [], reclaim: [] };
  const state = { down: false, restart: undefined as RestartListener | undefined };
  const store = new Proxy(inner, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== 'function') return value;
      const fn = value as (...a: unknown[]) => unknown;
      if (prop === 'onRestart') {
        return (listener: RestartListener) => {
          state.restart = listener;
          return () => (state.restart = undefined);
        };
      }
      if (prop !== 'renew' && !late.includes(prop as Late)) return fn.bind(target);
      return async (...args: unknown[]) => {
        if (state.down && prop === 'renew') throw new Error('redis down');
        const reply = fn.apply(target, args);
        if (!late.includes(prop as Late)) return reply;
        sent[prop as Late].push(clock.now());
        await clock.sleep(LATE_MS);
        return reply;
      };
    },
  }) as SlotStore;
  return { store, sent, state };
}

function manager(store: SlotStore): LeaseManager {
  const m = new LeaseManager({ store, clock, instanceId: 'inst', leaseTtlMs: () => TTL });
  managers.push(m);
  return m;
}

/** The clock's time when the lease's `lost` signal fires (undefined until then). */
function lostAt(lease: Lease): { at: number | undefined } {
  const seen = { at: undefined as number | undefined };
  lease.lost.addEventListener('abort', () => (seen.at = clock.now()), { once: true });
  return seen;
}

/**
 * The lease, last confirmed by a call sent at `sentAt`, expires TTL after that send; and with every renewal failing
 * from now on, its signal fires a fence margin before then (later, had the expiry been dated from the reply).
 */
async function expectDatedFrom(lease: Lease, sentAt: number, state: { down: boolean }): Promise<void> {
  expect(lease.expiresAt).toBe(sentAt + TTL);
  state.down = true;
  const lost = lostAt(lease);
  await clock.advance(sentAt + TTL + LATE_MS - clock.now());
  expect(lease.lost.reason).toMatchObject({ reason: 'expired' });
  expect(lost.at).toBe(sentAt + TTL - fenceMarginMs(TTL));
}

/** `work` sends one reclaim at once, done when its late reply comes in; returns when that reclaim was sent. */
async function sendsOneLateReclaim(sent: { reclaim: number[] }, work: Promise<unknown>): Promise<number> {
  const done = track(clock, work);
  await flush();
  expect(sent.reclaim).toHaveLength(1);
  const sentAt = sent.reclaim[0]!;
  await clock.advance(LATE_MS);
  expect(done.at).toBe(sentAt + LATE_MS);
  return sentAt;
}

describe('a lease’s local expiry runs from the send of the call that confirmed it, not from its reply', () => {
  it('a renewal answered 700 ms late', async () => {
    const { store, sent, state } = slowStore(['renew']);
    const m = manager(store);
    const lease = (await m.acquireFirst([{ channelId: 'a', max: 1 }], true)).lease!;
    const t0 = clock.now();
    await clock.advance(TTL / 3 + LATE_MS); // the renewal timer sends at TTL / 3; the reply comes 700 ms later
    expect(sent.renew).toEqual([t0 + TTL / 3]);
    const sentAt = sent.renew[0]!;
    await expectDatedFrom(lease, sentAt, state);
  });

  it('a reclaim of a lease the store lost, answered 700 ms late', async () => {
    const { store, sent, state } = slowStore(['reclaim']);
    const m = manager(store);
    const lease = (await m.acquireFirst([{ channelId: 'a', max: 1 }], true)).lease!;
    await inner.release(lease); // gone behind the manager's back: the next renewal finds it missing
    const sentAt = await sendsOneLateReclaim(sent, m.renewAll());
    expect(lease.lost.aborted).toBe(false);
    await expectDatedFrom(lease, sentAt, state);
  });

  it('a local slot registered by a call answered 700 ms late', async () => {
    const { store, sent, state } = slowStore(['reclaim']);
    const m = manager(store);
    const lease = m.holdLocal('a', 1);
    expect(lease.expiresAt).toBe(Infinity);
    await clock.advance(1_000); // the renewal tick (every second while local slots wait) registers it
    expect(sent.reclaim).toHaveLength(1);
    const sentAt = sent.reclaim[0]!;
    await clock.advance(LATE_MS);
    expect(lease.local).toBe(false);
    expect((await inner.readLoads(['a'])).get('a')!.active).toBe(1);
    await expectDatedFrom(lease, sentAt, state);
  });

  it('a lease restored after a store restart by a call answered 700 ms late', async () => {
    const { store, sent, state } = slowStore(['reclaim']);
    const m = manager(store);
    const lease = (await m.acquireFirst([{ channelId: 'a', max: 1 }], true)).lease!;
    await inner.release(lease); // the restarted store lost it
    const sentAt = await sendsOneLateReclaim(sent, state.restart!({ first: false }));
    await expectDatedFrom(lease, sentAt, state);
  });
});
