/**
 * The Redis clock estimated by its offset at the last TIME. Only the load summary's dates use it: the acquire script
 * alone decides, by Redis's own clock.
 */
import type { Clock } from '../../../core/clock.js';

/** Redis TIME ([seconds, microseconds]) in milliseconds. */
export function redisMs(time: readonly (string | number)[]): number {
  return Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
}

export class RedisOffset {
  private offset: number | undefined;
  private readAt = -Infinity;

  constructor(private readonly clock: Clock) {}

  get unknown(): boolean {
    return this.offset === undefined;
  }

  learn(time: readonly (string | number)[]): void {
    this.offset = redisMs(time) - this.clock.now();
  }

  /** Whether a read should carry a TIME; claims it when it says yes. */
  claimRefresh(everyMs: number): boolean {
    const now = this.clock.now();
    if (now - this.readAt < everyMs) return false;
    this.readAt = now;
    return true;
  }

  now(): number {
    return this.clock.now() + (this.offset ?? 0);
  }
}
