/**
 * Pure ordering logic of the admission pass: tiers by priority, weighted random picks and shuffles, and ordering a
 * tier by load rate. No I/O; randomness is injected.
 */
import { priorityOf, weightOf, type Candidate } from './channel.js';

export type Random = () => number;

/** Groups candidates into tiers of equal priority, highest first; order inside a tier is kept. */
export function tiers<C extends Candidate>(candidates: readonly C[]): C[][] {
  const byPriority = new Map<number, C[]>();
  for (const c of candidates) {
    const p = priorityOf(c);
    const tier = byPriority.get(p);
    if (tier) tier.push(c);
    else byPriority.set(p, [c]);
  }
  return [...byPriority.entries()].sort((a, b) => b[0] - a[0]).map(([, tier]) => tier);
}

/** One channel drawn with probability proportional to its weight; all-zero weights draw uniformly. */
export function weightedPick<C extends Candidate>(items: readonly C[], random: Random): C | undefined {
  if (items.length <= 1) return items[0];
  const total = items.reduce((sum, c) => sum + weightOf(c), 0);
  if (total <= 0) return items[Math.floor(random() * items.length)];
  let r = random() * total;
  for (const c of items) {
    r -= weightOf(c);
    if (r < 0) return c;
  }
  return items.findLast((c) => weightOf(c) > 0);
}

/** Efraimidis–Spirakis key: sorting by it descending is a weighted random order without replacement. */
function shuffleKey(weight: number, u: number): number {
  return weight > 0 ? Math.log(Math.max(u, Number.MIN_VALUE)) / weight : -Infinity;
}

interface Keyed<C> {
  c: C;
  rate: number;
  key: number;
  tie: number;
}

function byRateThenKey<C>(a: Keyed<C>, b: Keyed<C>): number {
  if (a.rate !== b.rate) return a.rate - b.rate;
  if (a.key !== b.key) return b.key > a.key ? 1 : -1;
  return b.tie - a.tie;
}

function keyed<C extends Candidate>(items: readonly C[], rate: (c: C) => number, random: Random): Keyed<C>[] {
  return items.map((c) => {
    const u = random();
    return { c, rate: rate(c), key: shuffleKey(weightOf(c), u), tie: u };
  });
}

/** Weighted random order without replacement; weight-0 channels last, in random order. */
export function weightedShuffle<C extends Candidate>(items: readonly C[], random: Random): C[] {
  if (items.length <= 1) return [...items];
  return keyed(items, () => 0, random)
    .sort(byRateThenKey)
    .map((x) => x.c);
}

/** Sorts by load rate ascending, with a weighted shuffle among channels of equal load. One sort, no grouping. */
export function orderByLoad<C extends Candidate>(
  items: readonly C[],
  loadRate: (c: C) => number,
  random: Random,
): C[] {
  if (items.length <= 1) return [...items];
  return keyed(items, loadRate, random)
    .sort(byRateThenKey)
    .map((x) => x.c);
}
