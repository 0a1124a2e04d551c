/**
 * RedisClock on a ManualClock: the estimate of Redis's clock from TIME replies, and its upper bound (the one lease
 * scores are taken from when the acquire script reads no TIME).
 */
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../packages/slotgate/src/core/clock.js';
import { RedisClock } from '../../packages/slotgate/src/store/redis/redis-time.js';

/** A TIME reply for `ms` on the Redis clock (seconds, microseconds). */
const time = (ms: number): string[] => [String(Math.floor(ms / 1000)), String((ms % 1000) * 1000 + 999)];

/** A RedisClock whose wall and monotonic clocks are one ManualClock. */
function manual(): { clock: ManualClock; redis: RedisClock } {
  const clock = new ManualClock(1_000);
  return { clock, redis: new RedisClock(clock, () => clock.now()) };
}

describe('RedisClock', () => {
  it('has no upper bound before a TIME whose send time is known', async () => {
    const { redis } = manual();
    expect(redis.unknown).toBe(true);
    expect(redis.upperNow()).toBeUndefined();
    redis.learn(time(50_000));
    expect(redis.now()).toBe(50_000);
    expect(redis.upperNow()).toBeUndefined();
  });

  it("bounds Redis's clock from above by the send time: never behind it, ahead by at most the round trip", async () => {
    const { clock, redis } = manual();
    const sentAt = redis.sending();
    await clock.advance(30);
    // Redis read its clock 10 ms after the send, when it read 50 000: now (1 030 locally) it reads 50 020
    redis.learn(time(50_000), sentAt);
    expect(redis.now()).toBe(50_000); // from the arrival: 20 ms behind
    const upper = redis.upperNow()!;
    expect(upper).toBeGreaterThanOrEqual(50_020);
    expect(upper).toBeLessThanOrEqual(50_020 + 30 + 1);
    await clock.advance(500);
    expect(redis.upperNow()).toBe(upper + 500);
  });

  it('gives no upper bound from a TIME answered more than a second after it was sent, nor one older than 10 s', async () => {
    const { clock, redis } = manual();
    const sentAt = redis.sending();
    await clock.advance(1_500);
    redis.learn(time(50_000), sentAt);
    expect(redis.upperNow()).toBeUndefined();
    redis.learn(time(50_001), redis.sending());
    expect(redis.upperNow()).toBeDefined();
    await clock.advance(10_001);
    expect(redis.upperNow()).toBeUndefined();
    // and none once forgotten (a new connection)
    redis.learn(time(60_000), redis.sending());
    redis.forgetUpper();
    expect(redis.upperNow()).toBeUndefined();
  });

  it('carries the upper bound on the monotonic clock: a step of the wall clock does not move it', () => {
    let wall = 1_000;
    let mono = 500;
    const redis = new RedisClock({ now: () => wall } as unknown as ManualClock, () => mono);
    const sentAt = redis.sending();
    mono += 4;
    wall += 4;
    redis.learn(time(50_000), sentAt);
    const upper = redis.upperNow()!;
    wall -= 60_000; // the wall clock is set back a minute
    mono += 10;
    expect(redis.upperNow()).toBe(upper + 10);
  });
});
