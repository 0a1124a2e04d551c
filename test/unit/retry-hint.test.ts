/**
 * The Retry-After hint of a capacity 429 (core/retry-hint.ts): (waiters ÷ max concurrency + 1) × a recent hold time,
 * clamped to [100 ms, 30 s], jittered 0.5-1.5x per answer; the engine's own hint from its hold times and queue counts
 * with no store command; the gateway's retry-after-ms and Retry-After headers.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  HoldTimes,
  jitteredHint,
  RETRY_HINT,
  slotLikelyInMs,
} from '../../packages/slotgate/src/core/retry-hint.js';
import { seededRandom } from '../../packages/slotgate/src/core/order.js';
import {
  CapacityError,
  ClientLimitError,
  StoreUnavailableError,
} from '../../packages/slotgate/src/core/errors.js';
import { PURPOSES } from '../../packages/slotgate/src/store/store.js';
import { toHttpError } from '../../packages/gateway/src/http-errors.js';
import { capacityError, closeEngines, hold, setup } from './admission-fixture.js';
import { elapse, flush, track } from './manual-time.js';

afterEach(closeEngines);

describe('slotLikelyInMs', () => {
  it('is (waiters ÷ max concurrency + 1) × the hold time', () => {
    expect(slotLikelyInMs({ waiting: 0, maxConcurrency: 1, holdMs: 300 })).toBe(300);
    expect(slotLikelyInMs({ waiting: 4, maxConcurrency: 1, holdMs: 200 })).toBe(1000);
    expect(slotLikelyInMs({ waiting: 4, maxConcurrency: 2, holdMs: 200 })).toBe(600);
    expect(slotLikelyInMs({ waiting: 8, maxConcurrency: 4, holdMs: 1500 })).toBe(4500);
  });

  it('grows with the queue and with the hold time', () => {
    const byDepth = [0, 1, 2, 4, 8].map((waiting) =>
      slotLikelyInMs({ waiting, maxConcurrency: 2, holdMs: 250 }),
    );
    const byHold = [100, 200, 400, 800].map((holdMs) =>
      slotLikelyInMs({ waiting: 3, maxConcurrency: 1, holdMs }),
    );
    for (const list of [byDepth, byHold])
      for (let i = 1; i < list.length; i++) expect(list[i]).toBeGreaterThan(list[i - 1]!);
  });

  it('is bounded to [100 ms, 30 s], and bad numbers fall back to the defaults', () => {
    expect(slotLikelyInMs({ waiting: 0, maxConcurrency: 1, holdMs: 1 })).toBe(RETRY_HINT.floorMs);
    expect(slotLikelyInMs({ waiting: 10_000, maxConcurrency: 1, holdMs: 60_000 })).toBe(RETRY_HINT.capMs);
    expect(slotLikelyInMs({ waiting: NaN, maxConcurrency: 0, holdMs: -5 })).toBe(RETRY_HINT.defaultHoldMs);
    expect(slotLikelyInMs({ waiting: Infinity, maxConcurrency: NaN, holdMs: Infinity })).toBe(1000);
  });
});

describe('jitteredHint', () => {
  it('multiplies by a factor in [0.5, 1.5), in whole ms, never outside the bounds', () => {
    expect(jitteredHint(1000, () => 0)).toBe(500);
    expect(jitteredHint(1000, () => 0.5)).toBe(1000);
    expect(jitteredHint(1000, () => 0.999)).toBe(1499);
    expect(jitteredHint(150, () => 0)).toBe(RETRY_HINT.floorMs);
    expect(jitteredHint(30_000, () => 0.99)).toBe(RETRY_HINT.capMs);
  });

  it('spreads: 1,000 hints of 2 s cover most of [1 s, 3 s) evenly, no 100 ms band holding more than a tenth', () => {
    const random = seededRandom(34);
    const hints = Array.from({ length: 1000 }, () => jitteredHint(2000, random));
    expect(Math.min(...hints)).toBeGreaterThanOrEqual(1000);
    expect(Math.max(...hints)).toBeLessThan(3000);
    expect(Math.max(...hints) - Math.min(...hints)).toBeGreaterThan(1900);
    const bands = new Map<number, number>();
    for (const h of hints) bands.set(Math.floor(h / 100), (bands.get(Math.floor(h / 100)) ?? 0) + 1);
    expect(bands.size).toBe(20);
    expect(Math.max(...bands.values())).toBeLessThan(100);
  });
});

describe('HoldTimes', () => {
  it('the median of the recent holds of the given channels; the oldest samples age out', () => {
    const holds = new HoldTimes();
    expect(holds.median(['a'])).toBeUndefined();
    for (const ms of [300, 100, 200]) holds.record('a', ms);
    expect(holds.median(['a'])).toBe(200);
    holds.record('b', 1000);
    expect(holds.median(['a', 'b'])).toBe(250);
    expect(holds.median(['b'])).toBe(1000);
    for (let i = 0; i < RETRY_HINT.samplesPerChannel; i++) holds.record('a', 5000);
    expect(holds.median(['a'])).toBe(5000);
    holds.record('a', NaN);
    holds.record('a', -1);
    expect(holds.median(['a'])).toBe(5000);
  });

  it('tracks at most maxChannels channels (one per limited client could be many)', () => {
    const holds = new HoldTimes();
    for (let i = 0; i <= RETRY_HINT.maxChannels; i++) holds.record(`c${i}`, i);
    expect(holds.median(['c0'])).toBeUndefined();
    expect(holds.median([`c${RETRY_HINT.maxChannels}`])).toBe(RETRY_HINT.maxChannels);
  });
});

describe("the engine's hint", () => {
  it('1 s before any hold, then the median hold of the channel, jittered by the injected random, no store command', async () => {
    let draw = 0.5; // factor 1.0
    const { clock, store, admission } = setup({ wait_enabled: false }, { random: () => draw });
    const channel = { id: 'h', maxConcurrency: 1 };
    const full = () => capacityError(admission.acquire({ candidates: [channel] }));
    let [ticket] = await hold(admission, channel);
    expect((await full()).retryAfterMs).toBe(1000);
    for (const ms of [300, 500, 700]) {
      await clock.advance(ms);
      await ticket!.release();
      [ticket] = await hold(admission, channel);
    }
    const commands = PURPOSES.reduce((n, p) => n + store.commands[p], 0);
    expect((await full()).retryAfterMs).toBe(500);
    draw = 0;
    expect((await full()).retryAfterMs).toBe(250);
    draw = 0.99;
    expect((await full()).retryAfterMs).toBe(745);
    // the three refusals cost the acquire script each, nothing more for the hint
    expect(PURPOSES.reduce((n, p) => n + store.commands[p], 0) - commands).toBe(3);
    await ticket!.release();
  });

  it('a full queue counts: (max_waiting ÷ max + 1) × hold, for a refusal and for a wait that timed out', async () => {
    const { clock, admission } = setup({ wait_timeout_ms: 400, safety_poll_ms: 5000 }, { random: () => 0.5 });
    const channel = { id: 'q', maxConcurrency: 1, maxWaiting: 2 };
    let [ticket] = await hold(admission, channel);
    await clock.advance(200);
    await ticket!.release();
    [ticket] = await hold(admission, channel);
    const waiters = [0, 1].map(() => track(clock, admission.acquire({ candidates: [channel] })));
    await flush();
    const refused = await capacityError(admission.acquire({ candidates: [channel] }));
    expect(refused.reason).toBe('queue_full');
    expect(refused.retryAfterMs).toBe((2 / 1 + 1) * 200);
    await elapse(clock, 400);
    const timedOut = waiters.map((w) => w.error as CapacityError);
    expect(timedOut.map((e) => e.reason)).toEqual(['wait_timeout', 'wait_timeout']);
    // each saw itself and the other still queued, or itself alone: between 2 and 3 turns of 200 ms
    for (const e of timedOut) expect([400, 600]).toContain(e.retryAfterMs);
    await ticket!.release();
  });
});

describe("the gateway's headers", () => {
  const capacity = (ms: number) =>
    new CapacityError('queue_full', 'full', { retryAfterMs: ms, channels: ['a'] });

  it('retry-after-ms in whole ms and Retry-After in seconds rounded up, at least 1', () => {
    expect(toHttpError(capacity(1234)).headers).toEqual({ 'retry-after-ms': '1234', 'retry-after': '2' });
    expect(toHttpError(capacity(100)).headers).toEqual({ 'retry-after-ms': '100', 'retry-after': '1' });
    expect(toHttpError(capacity(30_000)).headers).toEqual({ 'retry-after-ms': '30000', 'retry-after': '30' });
    expect(toHttpError(capacity(2000.2)).headers).toEqual({ 'retry-after-ms': '2001', 'retry-after': '3' });
    expect(toHttpError(capacity(NaN)).headers).toEqual({ 'retry-after-ms': '1000', 'retry-after': '1' });
    const client = new ClientLimitError('full', 'busy', { retryAfterMs: 750, clientId: 'c' });
    expect(toHttpError(client).headers).toEqual({ 'retry-after-ms': '750', 'retry-after': '1' });
  });

  it('a store outage keeps its plain Retry-After: 1', () => {
    expect(toHttpError(new StoreUnavailableError('acquire', 'down')).headers).toEqual({ 'retry-after': '1' });
  });
});
