/**
 * Pure ordering logic of the admission pass: tiers by priority, weighted random picks and shuffles, and ordering a
 * tier by load rate. No I/O; randomness is injected.
 */
import { priorityOf, weightOf, type Candidate } from './channel.js';

export type Random = () => number;

/** mulberry32: a small, well-mixed seeded PRNG (the same seed gives the same sequence), for reproducible orders. */
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

/**
 * The order of a tier, produced one channel at a time: lowest load rate first, and among equal rates a weighted
 * random pick without replacement (weight-0 channels last). Each `next()` is one O(n) scan, so a pass that admits
 * on its first or second channel never pays for sorting the whole tier. Drained, it is the same distribution as
 * sorting by rate with a weighted shuffle among equal rates.
 */
export class LazyOrder<C extends Candidate> {
  private readonly rates: number[];
  private readonly taken: boolean[];
  private left: number;

  /**
   * `spread`: the first picks go to a channel shown with room, drawn with probability proportional to its free share
   * (1 − rate) × weight, instead of the lowest rate: for loads every instance reads alike (the load summary), where
   * the lowest rate would send every instance to the same channel. Once none shows room, lowest rate first as above.
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
      const pick = this.spreadPick();
      if (pick >= 0) return this.take(pick);
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
    let r = total > 0 ? this.random() * total : Math.floor(this.random() * count);
    let pick = -1;
    for (let i = 0; i < this.items.length; i++) {
      if (this.taken[i] || this.rates[i] !== min) continue;
      const w = total > 0 ? weightOf(this.items[i]!) : 1;
      if (w <= 0) continue;
      pick = i;
      r -= w;
      if (r < 0) break;
    }
    return this.take(pick);
  }

  /** A channel shown with room, drawn by free share × weight; -1 when none. */
  private spreadPick(): number {
    let total = 0;
    for (let i = 0; i < this.items.length; i++) {
      if (!this.taken[i] && this.rates[i]! < 1) total += (1 - this.rates[i]!) * weightOf(this.items[i]!);
    }
    if (!(total > 0)) return -1;
    let r = this.random() * total;
    let pick = -1;
    for (let i = 0; i < this.items.length; i++) {
      if (this.taken[i] || this.rates[i]! >= 1) continue;
      const w = (1 - this.rates[i]!) * weightOf(this.items[i]!);
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
