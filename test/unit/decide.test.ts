/**
 * The pure decisions of admission (packages/slotgate/src/admission/decide.ts) and the capacity error
 * (admission/capacity.ts), called directly with loads built by hand: no store, no clock.
 */
import { describe, expect, it } from 'vitest';
import { capacityError, type CapacityContext } from '../../packages/slotgate/src/admission/pass/capacity.js';
import {
  hasRoom,
  loadRate,
  maxWaitingOf,
  nextBatch,
  orderTier,
  waitQueues,
  type Loads,
} from '../../packages/slotgate/src/admission/pass/decide.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { CapacityError } from '../../packages/slotgate/src/core/errors.js';
import { LazyOrder, seededRandom } from '../../packages/slotgate/src/core/order.js';
import { admissionSettings } from '../../packages/slotgate/src/core/settings.js';
import type { ChannelLoad } from '../../packages/slotgate/src/store/store.js';

const ch = (id: string, maxConcurrency = 0, extra: Partial<Candidate> = {}): Candidate => ({
  id,
  maxConcurrency,
  ...extra,
});
const ids = (cs: readonly Candidate[] | undefined) => cs?.map((c) => c.id);
const cooling = new Set<string>();
const isCooling = (c: Candidate) => cooling.has(c.id);
const never = () => false;

/** Loads by id: [active, waiting] or [active, waiting, cooling]. */
function loads(entries: Record<string, [number, number] | [number, number, boolean]>): Loads {
  return new Map(
    Object.entries(entries).map(([id, [active, waiting, coolingDown = false]]): [string, ChannelLoad] => [
      id,
      { active, waiting, coolingDown, cooldownRemainingMs: coolingDown ? 1000 : 0 },
    ]),
  );
}

/** An order that hands the channels out exactly as given (rate = position: every group has one channel). */
function inOrder(items: readonly Candidate[]): LazyOrder<Candidate> {
  return new LazyOrder(
    items,
    (c) => items.indexOf(c),
    () => 0,
  );
}

const drain = (order: LazyOrder<Candidate>) => {
  const out: string[] = [];
  for (let c = order.next(); c; c = order.next()) out.push(c.id);
  return out;
};

describe('loadRate and hasRoom', () => {
  it('loadRate is (active + waiting) / max; 0 for an unlimited channel or one the view does not know', () => {
    const view = loads({ a: [3, 1], u: [7, 0] });
    expect(loadRate(ch('a', 8), view)).toBe(0.5);
    expect(loadRate(ch('a', 2), view)).toBe(2);
    expect(loadRate(ch('u'), view)).toBe(0);
    expect(loadRate(ch('unknown', 4), view)).toBe(0);
  });

  it('hasRoom: active below max (waiting does not matter); an unknown channel counts as free', () => {
    const view = loads({ a: [3, 9], b: [4, 0] });
    expect(hasRoom(ch('a', 4), view)).toBe(true);
    expect(hasRoom(ch('b', 4), view)).toBe(false);
    expect(hasRoom(ch('b', 5), view)).toBe(true);
    expect(hasRoom(ch('unknown', 1), view)).toBe(true);
  });
});

describe('orderTier', () => {
  it('drops cooling channels and puts the lowest load rate first', () => {
    cooling.clear();
    cooling.add('idle-but-cooling');
    const tier = [ch('busy', 4), ch('idle-but-cooling', 4), ch('half', 4), ch('unlimited'), ch('full', 2)];
    const view = loads({ busy: [3, 0], 'idle-but-cooling': [0, 0], half: [1, 1], full: [2, 0] });
    const order = orderTier(tier, view, isCooling, seededRandom(1));
    expect(order.size).toBe(4);
    expect(drain(order)).toEqual(['unlimited', 'half', 'busy', 'full']);
    cooling.clear();
  });

  it('draws among equal rates with the given random, by weight', () => {
    const tier = [ch('a', 2, { weight: 1 }), ch('b', 2, { weight: 3 }), ch('c', 2)];
    const view = loads({ a: [1, 0], b: [1, 0], c: [2, 0] });
    // random() = 0 takes the first of the lightest group, just under 1 its last; c is busier and always last
    expect(drain(orderTier(tier, view, never, () => 0))).toEqual(['a', 'b', 'c']);
    expect(drain(orderTier(tier, view, never, () => 0.999))).toEqual(['b', 'a', 'c']);
    // a fixed seed gives a fixed order, and the same seed again gives it again
    const seeded = (seed: number) => drain(orderTier(tier, view, never, seededRandom(seed)));
    expect(seeded(5)).toEqual(seeded(5));
    let bFirst = 0;
    const random = seededRandom(9);
    for (let i = 0; i < 4000; i++) if (orderTier(tier, view, never, random).next()!.id === 'b') bFirst++;
    // 3:1 gives b the first place 3 times in 4; one fixed sequence, so this is a number, not a sample
    expect(bFirst / 4000).toBeGreaterThan(0.72);
    expect(bFirst / 4000).toBeLessThan(0.78);
  });
});

describe('nextBatch', () => {
  const roomy = (id: string) => ch(id, 2);
  const full = (id: string) => ch(id, 1);
  const view = loads({ f1: [1, 0], f2: [1, 0], f3: [1, 0], f4: [1, 0], r1: [0, 0], r2: [1, 0], r3: [0, 0] });

  it('stops after the second channel the view shows room on; expected is the first of them', () => {
    const [first, ...rest] = [full('f1'), full('f2'), roomy('r1'), full('f3'), roomy('r2'), roomy('r3')];
    const order = inOrder(rest);
    const batch = nextBatch(first!, order, 8, view);
    expect(ids(batch.channels)).toEqual(['f1', 'f2', 'r1', 'f3', 'r2']);
    expect(batch.expected?.id).toBe('r1');
    expect(batch.after).toBeUndefined();
    expect(drain(order)).toEqual(['r3']); // left for the next batch
  });

  it('a first channel with room counts: it and one more', () => {
    const order = inOrder([roomy('r2'), roomy('r3')]);
    const batch = nextBatch(roomy('r1'), order, 8, view);
    expect(ids(batch.channels)).toEqual(['r1', 'r2']);
    expect(batch.expected?.id).toBe('r1');
  });

  it('with every channel full by the view, carries the whole remaining budget', () => {
    const order = inOrder([full('f2'), full('f3'), full('f4')]);
    const batch = nextBatch(full('f1'), order, 3, view);
    expect(ids(batch.channels)).toEqual(['f1', 'f2', 'f3']);
    expect(batch.expected).toBeUndefined();
    expect(batch.after).toBeUndefined();
    expect(drain(order)).toEqual(['f4']);
  });

  it('ends at the end of the tier, and a budget of 1 tries the first channel alone', () => {
    const order = inOrder([full('f2')]);
    expect(ids(nextBatch(full('f1'), order, 8, view).channels)).toEqual(['f1', 'f2']);
    const untouched = inOrder([roomy('r1')]);
    const alone = nextBatch(full('f1'), untouched, 1, view);
    expect(ids(alone.channels)).toEqual(['f1']);
    expect(alone.expected).toBeUndefined();
    expect(untouched.size).toBe(1);
  });

  it('stops at an unlimited channel and hands it back as `after`', () => {
    const order = inOrder([full('f2'), ch('u'), roomy('r1')]);
    const batch = nextBatch(full('f1'), order, 8, view);
    expect(ids(batch.channels)).toEqual(['f1', 'f2']);
    expect(batch.after?.id).toBe('u');
    expect(batch.expected).toBeUndefined();
    expect(drain(order)).toEqual(['r1']);
  });
});

describe('waitQueues and maxWaitingOf', () => {
  it('emptiest queue relative to its size first, stable for ties, at most 3', () => {
    const pool = [
      ch('half', 4), // 2 of 4
      ch('tie-1', 2, { maxWaiting: 10 }), // 1 of 10
      ch('quarter', 4), // 1 of 4
      ch('tie-2', 1, { maxWaiting: 10 }), // 1 of 10
      ch('empty', 1), // unknown to the view: 0
    ];
    const view = loads({ half: [4, 2], 'tie-1': [2, 1], quarter: [4, 1], 'tie-2': [1, 1] });
    expect(ids(waitQueues(pool, view))).toEqual(['empty', 'tie-1', 'tie-2']);
    expect(ids(waitQueues([...pool].reverse(), view))).toEqual(['empty', 'tie-2', 'tie-1']);
    expect(ids(waitQueues(pool.slice(0, 3), view))).toEqual(['tie-1', 'quarter', 'half']);
    expect(ids(pool)).toEqual(['half', 'tie-1', 'quarter', 'tie-2', 'empty']); // the pool is not reordered
  });

  it('with a random source, ties go in a random order: the emptiest still first', () => {
    const pool = ['a', 'b', 'c', 'd', 'e', 'f'].map((id) => ch(id, 2));
    const view = loads({ a: [2, 1], b: [2, 1], c: [2, 1], d: [2, 1], e: [2, 1] }); // f: empty
    const firsts = new Set<string>();
    for (let seed = 1; seed <= 20; seed++) {
      const picked = waitQueues(pool, view, seededRandom(seed)).map((c) => c.id);
      expect(picked[0]).toBe('f');
      expect(picked).toHaveLength(3);
      firsts.add(picked[1]!);
    }
    expect(firsts.size).toBeGreaterThan(2); // without the shuffle it is always 'a'
  });

  it('maxWaitingOf: the channel own bound, else max_waiting_per_channel when > 0, else max(32, 8 × max)', () => {
    const base = admissionSettings.defaults;
    const withSetting = admissionSettings.merge(base, { max_waiting_per_channel: 7 });
    expect(maxWaitingOf(ch('a', 3, { maxWaiting: 2 }), withSetting)).toBe(2);
    expect(maxWaitingOf(ch('a', 3), withSetting)).toBe(7);
    expect(maxWaitingOf(ch('a', 3), base)).toBe(32);
    expect(maxWaitingOf(ch('a', 10), base)).toBe(80);
  });
});

describe('capacityError', () => {
  const a = ch('a', 1);
  const b = ch('b', 1);
  const c = ch('c', 1);
  const context = (over: Partial<CapacityContext> = {}): CapacityContext => ({
    candidates: [a, b, c],
    saturated: [a, b],
    waitTimeoutMs: 5000,
    coolingMs: () => 0,
    ...over,
  });

  it('names the saturated channels and the rest, with Retry-After 1 s when something was full and no retry hint is given', () => {
    const err = capacityError('full', context({ coolingMs: (id) => (id === 'c' ? 30_000 : 0) }));
    expect(err).toBeInstanceOf(CapacityError);
    expect(err.code).toBe('channel_capacity_exhausted');
    expect(err.reason).toBe('full');
    expect(err.message).toBe(
      'every candidate channel is at capacity (channels at max concurrency: a, b; cooling down or skipped: c)',
    );
    expect(err.channels).toEqual(['a', 'b']);
    expect(err.retryAfterMs).toBe(1000);
  });

  it('says which queue was full, which wait ran out, and that the caller aborted', () => {
    const queue = capacityError('queue_full', context({ waitedOn: b, saturated: [a, b, c] }));
    expect(queue.message).toBe('wait queue of channel b is full (channels at max concurrency: a, b, c)');
    const timeout = capacityError('wait_timeout', context({ waitedOn: c }));
    expect(timeout.message).toBe(
      'no slot came free on channel c within 5000 ms (channels at max concurrency: a, b; cooling down or skipped: c)',
    );
    const aborted = capacityError('aborted', context({ candidates: [], saturated: [] }));
    expect(aborted.message).toBe('the request was aborted while waiting for a channel slot');
    expect(aborted.channels).toEqual([]);
    expect(capacityError('queue_full', context()).message).toMatch(/^wait queue of channel \? is full/);
  });

  it('with nothing full, Retry-After is the longest local cooldown, and never under 1 s', () => {
    const coolingMs = (ms: Record<string, number>) => (id: string) => ms[id] ?? 0;
    const none = context({ saturated: [] });
    expect(
      capacityError('full', { ...none, coolingMs: coolingMs({ a: 2500, b: 40_000 }) }).retryAfterMs,
    ).toBe(40_000);
    expect(capacityError('full', { ...none, coolingMs: coolingMs({ c: 300 }) }).retryAfterMs).toBe(1000);
    expect(capacityError('full', none).retryAfterMs).toBe(1000);
    const err = capacityError('full', { ...none, coolingMs: coolingMs({ a: 2500 }) });
    expect(err.message).toBe('every candidate channel is at capacity (cooling down or skipped: a, b, c)');
    expect(err.channels).toEqual([]);
  });
});
