/** Jittered exponential backoff: sleep k uniform in [I_k / 2, I_k), I_{k+1} = min(2 I_k, cap): no lock-step polls. */
import type { Random } from './order.js';

/** cap = min(8 × base, 1000 ms), at least 1. */
export function backoffCap(baseMs: number): number {
  return Math.max(1, Math.min(8 * baseMs, 1000));
}

export function jitter(intervalMs: number, random: Random): number {
  return intervalMs / 2 + random() * (intervalMs / 2);
}

export function nextInterval(intervalMs: number, baseMs: number): number {
  return Math.min(intervalMs * 2, backoffCap(baseMs));
}
