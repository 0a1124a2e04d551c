/**
 * The Redis clock as the load summary estimates it: the offset to this process's clock at the last TIME read. The
 * summary dates its counts' lapse and the cooldowns' ends with it; both only order candidates, and the acquire
 * script alone decides by Redis's own clock.
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

  /** Whether no TIME was read yet. */
  get unknown(): boolean {
    return this.offset === undefined;
  }

  learn(time: readonly (string | number)[]): void {
    this.offset = redisMs(time) - this.clock.now();
  }

  /** Whether a read should carry a TIME (the last is `everyMs` old); claims it when it says yes. */
  claimRefresh(everyMs: number): boolean {
    const now = this.clock.now();
    if (now - this.readAt < everyMs) return false;
    this.readAt = now;
    return true;
  }

  /** Now on the Redis clock, by the last offset. */
  now(): number {
    return this.clock.now() + (this.offset ?? 0);
  }
}
