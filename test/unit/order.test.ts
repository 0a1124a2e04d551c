/**
 * Tier ordering, weighted picks and the lazy order of a tier (lowest load first, a weighted shuffle among equal
 * loads), drained whole here to check its distribution. Randomness is a seeded PRNG, so every
 * statistical bound below is checked against one fixed sequence: it cannot flake, and each bound is tight enough
 * (many standard deviations narrower than the gap to a wrong answer) that a broken weighting fails it.
 */
import { describe, expect, it } from 'vitest';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import {
  LazyOrder,
  seededRandom as mulberry32,
  tiers,
  weightedPick,
  type Random,
} from '../../packages/slotgate/src/core/order.js';

const ch = (id: string, extra: Partial<Candidate> = {}): Candidate => ({ id, ...extra });

/** A tier's whole order: its LazyOrder drained. */
function orderByLoad<C extends Candidate>(
  items: readonly C[],
  loadRate: (c: C) => number,
  random: Random,
): C[] {
  const order = new LazyOrder(items, loadRate, random);
  const out: C[] = [];
  for (let c = order.next(); c; c = order.next()) out.push(c);
  return out;
}

/** Equal loads: a weighted random order without replacement, weight-0 channels last. */
const weightedShuffle = <C extends Candidate>(items: readonly C[], random: Random) =>
  orderByLoad(items, () => 0, random);
const ids = (cs: readonly Candidate[]) => cs.map((c) => c.id);

function shares(draws: readonly (string | undefined)[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const d of draws) out[String(d)] = (out[String(d)] ?? 0) + 1 / draws.length;
  return out;
}

describe('tiers()', () => {
  it('groups by priority, highest first, keeping the input order inside each tier', () => {
    const cs = [
      ch('a', { priority: 1 }),
      ch('b', { priority: 10 }),
      ch('c'), // priority defaults to 0
      ch('d', { priority: 1 }),
      ch('e', { priority: -5 }),
      ch('f', { priority: 10 }),
      ch('g', { priority: 0 }),
    ];
    expect(tiers(cs).map(ids)).toEqual([['b', 'f'], ['a', 'd'], ['c', 'g'], ['e']]);
  });

  it('sorts priorities numerically, not as strings', () => {
    const cs = [ch('p9', { priority: 9 }), ch('p10', { priority: 10 }), ch('p100', { priority: 100 })];
    expect(tiers(cs).map(ids)).toEqual([['p100'], ['p10'], ['p9']]);
  });

  it('returns no tiers for no candidates and one tier for equal priorities', () => {
    expect(tiers([])).toEqual([]);
    expect(tiers([ch('x'), ch('y'), ch('z')]).map(ids)).toEqual([['x', 'y', 'z']]);
  });
});

describe('weightedPick()', () => {
  it('handles empty and single-item inputs without drawing', () => {
    const never: Random = () => {
      throw new Error('must not draw');
    };
    expect(weightedPick([], never)).toBeUndefined();
    expect(weightedPick([ch('only', { weight: 0 })], never)?.id).toBe('only');
  });

  it('draws in proportion to weight: 3:1 over 20,000 draws gives a share of 0.72–0.78', () => {
    const random = mulberry32(1);
    const items = [ch('heavy', { weight: 3 }), ch('light', { weight: 1 })];
    const draws = Array.from({ length: 20_000 }, () => weightedPick(items, random)?.id);
    const s = shares(draws);
    expect(s.heavy).toBeGreaterThan(0.72);
    expect(s.heavy).toBeLessThan(0.78);
    expect(s.light).toBeGreaterThan(0.22);
    expect(s.light).toBeLessThan(0.28);
  });

  it('weights 1:2:7 over 20,000 draws land within ±0.02 of 0.1/0.2/0.7 (default weight is 1)', () => {
    const random = mulberry32(42);
    const items = [ch('one'), ch('two', { weight: 2 }), ch('seven', { weight: 7 })];
    const s = shares(Array.from({ length: 20_000 }, () => weightedPick(items, random)?.id));
    expect(s.one).toBeGreaterThan(0.08);
    expect(s.one).toBeLessThan(0.12);
    expect(s.two).toBeGreaterThan(0.18);
    expect(s.two).toBeLessThan(0.22);
    expect(s.seven).toBeGreaterThan(0.68);
    expect(s.seven).toBeLessThan(0.72);
  });

  it('never picks a weight-0 channel while a positive weight exists, even at the edges of random()', () => {
    const items = [ch('zero-a', { weight: 0 }), ch('w', { weight: 1 }), ch('zero-b', { weight: 0 })];
    for (const r of [0, 0.5, 0.999999, 1 - Number.EPSILON])
      expect(weightedPick(items, () => r)?.id).toBe('w');
    const random = mulberry32(7);
    for (let i = 0; i < 5000; i++) expect(weightedPick(items, random)?.id).toBe('w');
  });

  it('draws uniformly when every weight is 0', () => {
    const random = mulberry32(3);
    const items = [
      ch('a', { weight: 0 }),
      ch('b', { weight: 0 }),
      ch('c', { weight: 0 }),
      ch('d', { weight: 0 }),
    ];
    const s = shares(Array.from({ length: 20_000 }, () => weightedPick(items, random)?.id));
    for (const id of ['a', 'b', 'c', 'd']) {
      expect(s[id]).toBeGreaterThan(0.23);
      expect(s[id]).toBeLessThan(0.27);
    }
  });

  it('treats a negative weight as 0', () => {
    const items = [ch('neg', { weight: -5 }), ch('pos', { weight: 1 })];
    const random = mulberry32(11);
    for (let i = 0; i < 2000; i++) expect(weightedPick(items, random)?.id).toBe('pos');
  });
});

describe('weightedShuffle()', () => {
  it('returns a permutation of its input and does not modify it', () => {
    const random = mulberry32(5);
    const items = Array.from({ length: 12 }, (_, i) => ch(`c${i}`, { weight: i % 4 }));
    const before = ids(items);
    for (let n = 0; n < 200; n++) {
      const out = weightedShuffle(items, random);
      expect([...ids(out)].sort()).toEqual([...before].sort());
    }
    expect(ids(items)).toEqual(before);
  });

  it('puts the 3:1 channel first in 0.72–0.78 of 20,000 shuffles', () => {
    const random = mulberry32(2024);
    const items = [ch('light', { weight: 1 }), ch('heavy', { weight: 3 })];
    const s = shares(Array.from({ length: 20_000 }, () => weightedShuffle(items, random)[0]?.id));
    expect(s.heavy).toBeGreaterThan(0.72);
    expect(s.heavy).toBeLessThan(0.78);
  });

  it('draws without replacement: with weights 1:2:3 the first place follows 1/6:2/6:3/6 and the second place follows the renormalised weights', () => {
    const random = mulberry32(99);
    const items = [ch('w1', { weight: 1 }), ch('w2', { weight: 2 }), ch('w3', { weight: 3 })];
    const runs = Array.from({ length: 30_000 }, () => ids(weightedShuffle(items, random)));
    const first = shares(runs.map((r) => r[0]));
    expect(first.w1).toBeGreaterThan(1 / 6 - 0.015);
    expect(first.w1).toBeLessThan(1 / 6 + 0.015);
    expect(first.w2).toBeGreaterThan(2 / 6 - 0.015);
    expect(first.w2).toBeLessThan(2 / 6 + 0.015);
    expect(first.w3).toBeGreaterThan(3 / 6 - 0.015);
    expect(first.w3).toBeLessThan(3 / 6 + 0.015);
    // P(w1 second) = P(w2 first)·1/4 + P(w3 first)·1/3 = 1/12 + 1/6 = 0.25 (a plain "sort by weight" gives 0).
    const second = shares(runs.map((r) => r[1]));
    expect(second.w1).toBeGreaterThan(0.235);
    expect(second.w1).toBeLessThan(0.265);
  });

  it('always puts weight-0 channels last, in any order among themselves', () => {
    const random = mulberry32(8);
    const items = [
      ch('z1', { weight: 0 }),
      ch('a', { weight: 1 }),
      ch('z2', { weight: 0 }),
      ch('b', { weight: 100 }),
      ch('z3', { weight: 0 }),
    ];
    const lastPairs = new Set<string>();
    for (let n = 0; n < 2000; n++) {
      const out = ids(weightedShuffle(items, random));
      expect(new Set(out.slice(0, 2))).toEqual(new Set(['a', 'b']));
      expect(new Set(out.slice(2))).toEqual(new Set(['z1', 'z2', 'z3']));
      lastPairs.add(out.slice(2).join(','));
    }
    // The weight-0 tail is shuffled, not a fixed order.
    expect(lastPairs.size).toBe(6);
  });

  it('keeps weight-0 channels last when random() returns its extremes', () => {
    for (const r of [0, 0.999999]) {
      const out = ids(weightedShuffle([ch('z', { weight: 0 }), ch('a', { weight: 1 })], () => r));
      expect(out).toEqual(['a', 'z']);
    }
  });
});

describe('orderByLoad()', () => {
  it('puts a lightly loaded channel first whatever the weights (1000 at 0.5 vs 1 at 0.25)', () => {
    const random = mulberry32(13);
    const busy = ch('busy-heavy', { weight: 1000 });
    const idle = ch('idle-light', { weight: 1 });
    const load = new Map([
      [busy.id, 0.5],
      [idle.id, 0.25],
    ]);
    for (let n = 0; n < 2000; n++) {
      expect(ids(orderByLoad([busy, idle], (c) => load.get(c.id)!, random))).toEqual([
        'idle-light',
        'busy-heavy',
      ]);
    }
  });

  it('sorts by load rate ascending across several groups, including rates above 1', () => {
    const random = mulberry32(17);
    const rate: Record<string, number> = { a: 1.5, b: 0, c: 0.75, d: 1, e: 0.1 };
    const items = Object.keys(rate).map((id) => ch(id, { weight: 1 }));
    expect(ids(orderByLoad(items, (c) => rate[c.id]!, random))).toEqual(['b', 'e', 'c', 'd', 'a']);
  });

  it('shuffles by weight among channels of equal load (3:1 first in 0.72–0.78 of 20,000), after lighter ones', () => {
    const random = mulberry32(21);
    const items = [ch('x', { weight: 1 }), ch('y', { weight: 3 }), ch('lighter', { weight: 0 }), ch('busy')];
    const rate: Record<string, number> = { x: 0.5, y: 0.5, lighter: 0.1, busy: 0.9 };
    const runs = Array.from({ length: 20_000 }, () => ids(orderByLoad(items, (c) => rate[c.id]!, random)));
    // weight 0 still goes first when it is the least loaded; the most loaded is last every time
    expect(runs.filter((r) => r[0] !== 'lighter' || r[3] !== 'busy')).toEqual([]);
    const s = shares(runs.map((r) => r[1]));
    expect(s.y).toBeGreaterThan(0.72);
    expect(s.y).toBeLessThan(0.78);
  });

  it('puts weight-0 channels after positive weights within one load group', () => {
    const random = mulberry32(23);
    const items = [ch('z', { weight: 0 }), ch('p', { weight: 1 }), ch('q', { weight: 5 })];
    for (let n = 0; n < 1000; n++) {
      expect(ids(orderByLoad(items, () => 0, random))[2]).toBe('z');
    }
  });
});

describe('LazyOrder with spread (loads every instance reads alike)', () => {
  const rates: Record<string, number> = { full: 1, over: 1.25, half: 0.5, quarter: 0.75, empty: 0 };
  const items = Object.keys(rates).map((id) => ch(id));
  const first = (random: Random) => new LazyOrder(items, (c) => rates[c.id]!, random, true).next()!.id;

  it('first picks a channel shown with room, drawn by free share, never a full one', () => {
    const random = mulberry32(7);
    const counts: Record<string, number> = {};
    const n = 20_000;
    for (let i = 0; i < n; i++) {
      const id = first(random);
      counts[id] = (counts[id] ?? 0) + 1;
    }
    expect(counts.full ?? 0).toBe(0);
    expect(counts.over ?? 0).toBe(0);
    // free shares 1 : 0.5 : 0.25 of 1.75
    expect(counts.empty! / n).toBeCloseTo(1 / 1.75, 1);
    expect(counts.half! / n).toBeCloseTo(0.5 / 1.75, 1);
    expect(counts.quarter! / n).toBeCloseTo(0.25 / 1.75, 1);
  });

  it('once no channel shows room, the rest come lowest rate first', () => {
    const order = new LazyOrder(items, (c) => rates[c.id]!, mulberry32(3), true);
    const drained = Array.from({ length: items.length }, () => order.next()!.id);
    expect(new Set(drained.slice(0, 3))).toEqual(new Set(['empty', 'half', 'quarter']));
    expect(drained.slice(3)).toEqual(['full', 'over']);
    expect(order.next()).toBeUndefined();
  });

  it('without spread the lowest rate always comes first', () => {
    const random = mulberry32(11);
    for (let i = 0; i < 100; i++)
      expect(new LazyOrder(items, (c) => rates[c.id]!, random).next()!.id).toBe('empty');
  });
});
