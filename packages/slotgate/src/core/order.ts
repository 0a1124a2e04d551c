/** Ordering for the admission pass: priority tiers, weighted picks, a tier by load rate. Randomness is injected. */
import { priorityOf, weightOf, type Candidate } from './channel.js';
import { pushTo } from './collections.js';

export type Random = () => number;

/** mulberry32: a small seeded PRNG, for reproducible orders. */
export function seededRandom(seed: number): Random {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Groups candidates into tiers of equal priority, highest first; order inside a tier is kept. */
export function tiers<C extends Candidate>(candidates: readonly C[]): C[][] {
  const byPriority = new Map<number, C[]>();
  for (const c of candidates) pushTo(byPriority, priorityOf(c), c);
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

/**
 * A tier's order, one channel per `next()` (an O(n) scan, so a pass admitted early never sorts the tier): lowest load
 * rate first, a weighted random pick among equal rates (weight 0 last).
 */
export class LazyOrder<C extends Candidate> {
  private readonly rates: number[];
  private readonly taken: boolean[];
  private left: number;

  /**
   * `spread`: while some channel shows room, draw among those by (1 − rate) × weight: with loads every instance reads
   * alike, the lowest rate would send every instance to the same channel.
   */
  constructor(
    private readonly items: readonly C[],
    loadRate: (c: C) => number,
    private readonly random: Random,
    private readonly spread = false,
  ) {
    this.rates = items.map(loadRate);
    this.taken = new Array<boolean>(items.length).fill(false);
    this.left = items.length;
  }

  /** Channels not handed out yet. */
  get size(): number {
    return this.left;
  }

  next(): C | undefined {
    if (this.left === 0) return undefined;
    if (this.spread) {
      const free = (i: number) => (this.rates[i]! < 1 ? (1 - this.rates[i]!) * weightOf(this.items[i]!) : 0);
      let total = 0;
      for (let i = 0; i < this.items.length; i++) if (!this.taken[i]) total += free(i);
      if (total > 0) return this.take(this.drawAt(this.random() * total, free));
    }
    let min = Infinity;
    let total = 0;
    let count = 0;
    for (let i = 0; i < this.items.length; i++) {
      if (this.taken[i]) continue;
      const rate = this.rates[i]!;
      if (rate < min) {
        min = rate;
        total = 0;
        count = 0;
      }
      if (rate === min) {
        total += weightOf(this.items[i]!);
        count++;
      }
    }
    // all-zero weights in the group: a uniform pick among them
    const r = total > 0 ? this.random() * total : Math.floor(this.random() * count);
    const weight = (i: number) => (this.rates[i] !== min ? 0 : total > 0 ? weightOf(this.items[i]!) : 1);
    return this.take(this.drawAt(r, weight));
  }

  /** The untaken index `r` falls on, walking the weights in order (the last with weight if `r` overshoots). */
  private drawAt(r: number, weight: (i: number) => number): number {
    let pick = -1;
    for (let i = 0; i < this.items.length; i++) {
      const w = this.taken[i] ? 0 : weight(i);
      if (w <= 0) continue;
      pick = i;
      r -= w;
      if (r < 0) break;
    }
    return pick;
  }

  private take(i: number): C | undefined {
    this.taken[i] = true;
    this.left--;
    return this.items[i];
  }
}
