/**
 * The Redis clock as seen from this process. Lease scores live on the Redis clock (scripts read TIME), so a load
 * read that counts live members needs "now" on that clock: it comes from the offset to the local clock measured at
 * the last TIME read, refreshed at most once a second — the offset only decides whether a lease expiring this very
 * second still counts, an ordering hint.
 */
import type { Clock } from '../../core/clock.js';

/** Redis TIME ([seconds, microseconds]) in milliseconds. */
export function redisMs(time: readonly (string | number)[]): number {
  return Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
}

/** How often the offset is refreshed. */
const REFRESH_MS = 1000;

/** An upper bound older than this is not used for lease scores (the clocks' drift stays far below a millisecond). */
const UPPER_MAX_AGE_MS = 10_000;
/** A TIME answered later than this after it was sent (queued while reconnecting, say) gives no upper bound. */
const UPPER_MAX_RTT_MS = 1000;

export class RedisClock {
  private offset: number | undefined;
  private readAt = 0;
  /** The offset's upper bound (from a TIME whose send time is known), and when it was learned. */
  private upper: { offset: number; at: number } | undefined;

  constructor(private readonly clock: Clock) {}

  /** Whether no TIME was ever read: the first read needs a round trip of its own. */
  get unknown(): boolean {
    return this.offset === undefined;
  }

  /**
   * Takes a TIME reply that just came back; `sentAt` (this clock) is when its command went out. Redis read its clock
   * between the two, so the offset from the reply's arrival errs late (behind), and the one from its sending errs
   * early (ahead): the latter, plus the millisecond TIME's rounding down drops, is an upper bound.
   */
  learn(time: readonly (string | number)[], sentAt?: number): void {
    const now = this.clock.now();
    const redis = redisMs(time);
    this.offset = redis - now;
    if (sentAt !== undefined && sentAt <= now && now - sentAt <= UPPER_MAX_RTT_MS)
      this.upper = { offset: redis + 1 - sentAt, at: now };
  }

  /**
   * Now on the Redis clock, never earlier than Redis's own (by a TIME sent and answered less than 10 s ago); undefined
   * when there is none. A lease scored from it expires no earlier than one scored by TIME in the script.
   */
  upperNow(): number | undefined {
    const now = this.clock.now();
    if (!this.upper || now - this.upper.at > UPPER_MAX_AGE_MS) return undefined;
    return now + this.upper.offset;
  }

  /**
   * Whether the next read should carry a TIME (the offset is `everyMs` old, a second by default); claims the refresh
   * when it says yes.
   */
  claimRefresh(everyMs = REFRESH_MS): boolean {
    const now = this.clock.now();
    if (now - this.readAt < everyMs) return false;
    this.readAt = now;
    return true;
  }

  /** Now on the local clock this one is measured against. */
  localNow(): number {
    return this.clock.now();
  }

  /** Now on the Redis clock, by the last offset (0 offset before any TIME). */
  now(): number {
    return this.clock.now() + (this.offset ?? 0);
  }
}
