/**
 * A channel's high-water mark: the most slots it held at once, by minute of the store's clock, read over the previous
 * minute and this one. The count is noted just before slots go (between two removals it only rises), and a read takes
 * the live count too (lua/includes/peak.lua says why that is exact). RedisStore keeps it in Redis, shared by the
 * fleet; MemoryStore here.
 */

/** The mark's unit of time: a read covers the minute before the current one and the current one so far. */
export const PEAK_MINUTE_MS = 60_000;

export interface ChannelPeak {
  /** The most slots held at once over the window, at least the live ones now. */
  peak: number;
  /** How far back the window reaches from the read: one to two minutes. */
  windowMs: number;
}

/** One channel's mark in one process, as lua/includes/peak.lua keeps it in Redis. */
export class PeakMark {
  private minute = -Infinity;
  private current = 0;
  private previous = 0;

  note(held: number, now: number): void {
    const minute = Math.floor(now / PEAK_MINUTE_MS);
    if (minute !== this.minute) {
      this.previous = minute === this.minute + 1 ? this.current : 0;
      this.minute = minute;
      this.current = 0;
    }
    this.current = Math.max(this.current, held);
  }

  read(live: number, now: number): ChannelPeak {
    const minute = Math.floor(now / PEAK_MINUTE_MS);
    const noted =
      minute === this.minute
        ? Math.max(this.current, this.previous)
        : minute === this.minute + 1
          ? this.current
          : 0;
    return { peak: Math.max(noted, live), windowMs: now - (minute - 1) * PEAK_MINUTE_MS };
  }
}
