/**
 * The jitter of a waiter's safety polls.
 */
import { describe, expect, it } from 'vitest';
import { jitter } from '../../packages/slotgate/src/core/jitter.js';
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
