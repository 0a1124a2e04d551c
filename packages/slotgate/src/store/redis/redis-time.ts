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

export class RedisClock {
  private offset: number | undefined;
  private readAt = 0;

  constructor(private readonly clock: Clock) {}

  /** Whether no TIME was ever read: the first read needs a round trip of its own. */
  get unknown(): boolean {
    return this.offset === undefined;
  }

  /** Takes a TIME reply that just came back. */
  learn(time: readonly (string | number)[]): void {
    this.offset = redisMs(time) - this.clock.now();
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
