import { describe, expect, it } from 'vitest';
import type { Clock } from '../../packages/slotgate/src/core/clock.js';
import { ManualClock } from '../unit/manual-clock.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import { CLAIM_MS, runStoreContract } from './store-contract.js';

runStoreContract('MemoryStore', async () => {
  const clock = new ManualClock();
  const store = new MemoryStore({ clock, claimMs: CLAIM_MS });
  return { store, sleep: (ms) => clock.advance(ms), close: () => store.close() };
});

describe('MemoryStore: where a registration stands', () => {
  it('registrations within one millisecond of now() stand in the order of their arrivals on the precise clock', async () => {
    const manual = new ManualClock();
    let precise = 10.2;
    const clock: Clock = {
      now: () => manual.now(),
      precise: () => precise,
      sleep: (ms, signal) => manual.sleep(ms, signal),
      setTimer: (fn, ms) => manual.setTimer(fn, ms),
    };
    const store = new MemoryStore({ clock, claimMs: CLAIM_MS });
    const grants: string[] = [];
    const listening = store.listen('m', {
      grant: ({ token }) => void grants.push(token),
      queued: () => {},
      resync: () => {},
    });
    await listening.ready;
    const opts = { maxWaiting: 5, ttlMs: 60_000, leaseTtlMs: 60_000 };
    expect(
      await store.acquireFirst([{ channelId: 'p', max: 1 }], {
        token: 'm:h',
        leaseTtlMs: 60_000,
        checkCooldown: true,
      }),
    ).toEqual(['acquired']);
    // the same now(): 'm:1' arrived at 10.2, 'm:2' at 10.9 − 0.5 = 10.4 (by now() alone it would stand 0.5 ms ahead)
    expect(await store.enqueue({ channelId: 'p', token: 'm:1', max: 1 }, opts)).toBe('queued');
    precise = 10.9;
    expect(
      await store.enqueue({ channelId: 'p', token: 'm:2', max: 1 }, { ...opts, arrivedMsAgo: 0.5 }),
    ).toBe('queued');
    expect(await store.release({ channelId: 'p', token: 'm:h' }, 60_000).done).toBe(true);
    expect(grants).toEqual(['m:1']);
    await listening.stop();
    await store.close();
  });
});
