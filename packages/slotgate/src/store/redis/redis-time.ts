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
  /**
   * The upper bound: Redis's clock (ms, + 1 for TIME's rounding) when a TIME command was sent, by the monotonic clock,
   * and when it was learned. Kept on the monotonic clock: a step of the wall clock after it was learned would
   * otherwise move the bound below Redis's own.
   */
  private upper: { redisMs: number; sentAt: number; at: number } | undefined;

  constructor(
    private readonly clock: Clock,
    /** A clock that never steps (performance.now by default): the upper bound is carried on it. */
    private readonly monotonic: () => number = () => performance.now(),
  ) {}

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
    const redis = redisMs(time);
    this.offset = redis - this.clock.now();
    const now = this.monotonic();
    if (sentAt !== undefined && sentAt <= now && now - sentAt <= UPPER_MAX_RTT_MS) {
      this.upper = { redisMs: redis + 1, sentAt, at: now };
    }
  }

  /** A time to pass to `learn` as the send time of a TIME command: now on the monotonic clock. */
  sending(): number {
    return this.monotonic();
  }

  /** Forgets the upper bound (the connection was re-established: it may reach another server, with its own clock). */
  forgetUpper(): void {
    this.upper = undefined;
    this.readAt = 0; // and the next read that may carry a TIME does
  }

  /**
   * Now on the Redis clock, never earlier than Redis's own (by a TIME sent and answered less than 10 s ago); undefined
   * when there is none. A lease scored from it expires no earlier than one scored by TIME in the script.
   */
  upperNow(): number | undefined {
    const now = this.monotonic();
    if (!this.upper || now - this.upper.at > UPPER_MAX_AGE_MS) return undefined;
    return this.upper.redisMs + (now - this.upper.sentAt);
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

  /** Now on the Redis clock, by the last offset (0 offset before any TIME). */
  now(): number {
    return this.clock.now() + (this.offset ?? 0);
  }
}

/** A script's "now" argument: the store's bound of the Redis clock rounded up, or '' for the script to read TIME. */
export function ceilOrEmpty(ms: number | undefined): number | string {
  return ms === undefined ? '' : Math.ceil(ms);
}
