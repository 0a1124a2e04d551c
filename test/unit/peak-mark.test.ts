/** MemoryStore's high-water mark by minute (store/peak.ts), the same rules as lua/includes/peak.lua. */
import { describe, expect, it } from 'vitest';
import { PEAK_MINUTE_MS as MINUTE, PeakMark } from '../../packages/slotgate/src/store/peak.js';

describe('PeakMark', () => {
  it('keeps the most held at once this minute and the minute before; older minutes are forgotten', () => {
    const mark = new PeakMark();
    const t = 10 * MINUTE;
    expect(mark.read(0, t)).toEqual({ peak: 0, windowMs: MINUTE });
    mark.note(3, t + 1000);
    mark.note(1, t + 2000);
    expect(mark.read(1, t + 3000).peak).toBe(3);
    // the next minute: last minute's 3 still counts, over a window reaching back to its start
    mark.note(2, t + MINUTE + 10);
    expect(mark.read(2, t + MINUTE + 500)).toEqual({ peak: 3, windowMs: MINUTE + 500 });
    // two minutes on, only the minute before counts (its 2)
    expect(mark.read(0, t + 2 * MINUTE).peak).toBe(2);
    // three minutes on, nothing noted in the window: the live slots
    expect(mark.read(1, t + 3 * MINUTE).peak).toBe(1);
    // a note after a gap does not carry a minute that is not the one before
    mark.note(1, t + 5 * MINUTE);
    expect(mark.read(0, t + 5 * MINUTE + 1).peak).toBe(1);
  });

  it('reads at least the live slots: some were taken before the window began', () => {
    const mark = new PeakMark();
    mark.note(2, 0);
    expect(mark.read(4, 30 * MINUTE).peak).toBe(4);
  });
});
