/** A sleep uniform in [I / 2, I): instances that started together never poll in lock-step. */
import type { Random } from './order.js';

export function jitter(intervalMs: number, random: Random): number {
  return intervalMs / 2 + random() * (intervalMs / 2);
}
