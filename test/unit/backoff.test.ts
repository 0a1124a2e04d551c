/**
 * Jittered exponential backoff of waiters.
 */
import { describe, expect, it } from 'vitest';
import { backoffCap, jitter, nextInterval } from '../../packages/slotgate/src/core/backoff.js';
import { seededRandom } from '../../packages/slotgate/src/core/order.js';

describe('jitter()', () => {
  it('200 samples for interval 100 ms from a seeded random all lie in [50, 100)', () => {
    const random = seededRandom(31);
    const samples = Array.from({ length: 200 }, () => jitter(100, random));
    for (const s of samples) {
      expect(s).toBeGreaterThanOrEqual(50);
      expect(s).toBeLessThan(100);
    }
    // Jitter, not a constant: 200 draws are not all equal.
    expect(new Set(samples).size).toBeGreaterThan(1);
  });

  it('maps random() = 0 to exactly half the interval and random() → 1 to just under the interval', () => {
    expect(jitter(100, () => 0)).toBe(50);
    const top = jitter(100, () => 0.999999);
    expect(top).toBeGreaterThanOrEqual(50);
    expect(top).toBeLessThan(100);
    expect(top).toBeGreaterThan(99.99);
    expect(jitter(100, () => 1 - Number.EPSILON)).toBeLessThan(100);
  });

  it('scales with the interval: [I/2, I) for other intervals too', () => {
    for (const interval of [1, 7, 250, 1000]) {
      for (const r of [0, 0.25, 0.5, 0.999999]) {
        const s = jitter(interval, () => r);
        expect(s).toBeGreaterThanOrEqual(interval / 2);
        expect(s).toBeLessThan(interval);
        expect(s).toBeCloseTo(interval / 2 + (r * interval) / 2, 9);
      }
    }
  });
});

describe('nextInterval() / backoffCap()', () => {
  it('doubles from the default base 100 and caps at min(8 × 100, 1000) = 800', () => {
    const seq = [100];
    for (let i = 0; i < 6; i++) seq.push(nextInterval(seq[seq.length - 1]!, 100));
    expect(seq).toEqual([100, 200, 400, 800, 800, 800, 800]);
    expect(backoffCap(100)).toBe(800);
  });

  it('caps at 1000 ms when 8 × base exceeds it', () => {
    const seq = [200];
    for (let i = 0; i < 5; i++) seq.push(nextInterval(seq[seq.length - 1]!, 200));
    expect(seq).toEqual([200, 400, 800, 1000, 1000, 1000]);
    expect(backoffCap(200)).toBe(1000);
    expect(backoffCap(125)).toBe(1000);
    expect(backoffCap(5000)).toBe(1000);
  });

  it('caps at 8 × base for small bases', () => {
    const seq = [10];
    for (let i = 0; i < 6; i++) seq.push(nextInterval(seq[seq.length - 1]!, 10));
    expect(seq).toEqual([10, 20, 40, 80, 80, 80, 80]);
    expect(backoffCap(1)).toBe(8);
    expect(nextInterval(8, 1)).toBe(8);
  });
});

describe('polls in a 5 s window with the default settings', () => {
  /** Times of the polls a waiter makes within `windowMs`, sleeping jitter(interval) before each poll. */
  function pollTimes(baseMs: number, windowMs: number, random: () => number): number[] {
    const times: number[] = [];
    let t = 0;
    let interval = baseMs;
    for (;;) {
      t += jitter(interval, random);
      if (t > windowMs || times.length >= 1000) return times; // the bound keeps a zero-sleep bug from hanging
      times.push(t);
      interval = nextInterval(interval, baseMs);
    }
  }

  // "At most about 12 polls in 5 s" holds for the typical draw; the formula (first sleep in [I/2, I), doubling,
  // cap min(8 × 100, 1000) = 800) gives 14 polls in the worst case (every random() = 0), which is what is asserted.
  it('worst case (every sleep as short as possible, random() = 0) follows the formula: 14 polls', () => {
    const base = 100;
    const times = pollTimes(base, 5000, () => 0);
    // Sleeps 50, 100, 200, 400, then 400 each (half of the 800 cap).
    expect(times.slice(0, 6)).toEqual([50, 150, 350, 750, 1150, 1550]);
    expect(times).toHaveLength(14);
  });

  it('typical jitter stays within 12 polls; no random sequence exceeds the worst case', () => {
    const worst = pollTimes(100, 5000, () => 0).length;
    // random() = 0.5: sleeps of 3/4 of each interval.
    expect(pollTimes(100, 5000, () => 0.5).length).toBeLessThanOrEqual(12);
    // A seeded random: the mean below is one fixed number, not a sample that could land past 12 by chance.
    const random = seededRandom(47);
    let total = 0;
    for (let n = 0; n < 500; n++) {
      const count = pollTimes(100, 5000, random).length;
      expect(count).toBeLessThanOrEqual(worst);
      total += count;
    }
    expect(total / 500).toBeLessThanOrEqual(12);
    expect(pollTimes(100, 5000, () => 0.999999).length).toBeLessThanOrEqual(worst);
  });
});
