/** The counting upstream's "how far and for how long above the limit", read from a timeline of in-flight counts. */
import { describe, expect, it } from 'vitest';
import { excessOver } from '../helpers/fake-upstream.js';

describe('excessOver', () => {
  it('is zero time and the peak when the count never goes over the limit', () => {
    expect(
      excessOver(
        [
          [0, 1],
          [5, 2],
          [9, 1],
        ],
        2,
        20,
      ),
    ).toEqual({ peak: 2, msAbove: 0 });
  });

  it('adds up every spell above the limit, and counts one still open up to `until`', () => {
    const timeline: Array<[number, number]> = [
      [0, 3],
      [10, 4], // above from 10
      [12, 5],
      [15, 3], // to 15: 5 ms
      [30, 4], // above from 30 …
      [31, 3], // … to 31: 1 ms
      [40, 4], // above from 40, still open at 50: 10 ms
    ];
    expect(excessOver(timeline, 3, 50)).toEqual({ peak: 5, msAbove: 16, firstAbove: 10, lastAbove: 50 });
  });

  it('an empty timeline is no excess', () => {
    expect(excessOver([], 3, 100)).toEqual({ peak: 0, msAbove: 0 });
  });
});
