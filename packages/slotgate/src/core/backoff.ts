/**
 * Jittered exponential backoff for waiters: sleep k is uniform in [I_k / 2, I_k), I_0 = the base
 * interval, I_{k+1} = min(2 I_k, cap) with cap = min(8 × base, 1000 ms). Waiters of different instances therefore
 * never poll in lock-step.
 */
import type { Random } from './order.js';

export function backoffCap(baseMs: number): number {
  return Math.max(1, Math.min(8 * baseMs, 1000));
}

/** A uniform sample in [interval / 2, interval). */
export function jitter(intervalMs: number, random: Random): number {
  return intervalMs / 2 + random() * (intervalMs / 2);
}

/** The interval after a miss. */
export function nextInterval(intervalMs: number, baseMs: number): number {
  return Math.min(intervalMs * 2, backoffCap(baseMs));
}
