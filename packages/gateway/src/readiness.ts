/**
 * Readiness: whether this instance should get traffic now (GET /readyz). Probes come every few seconds from every load
 * balancer and kubelet, so concurrent probes share one answer, kept for a moment.
 */
import type { SlotStore } from 'slotgate';
import { sharedRead } from './shared-read.js';

export interface Readiness {
  ready: boolean;
  /** Why not (or what is degraded), for the probe's answer and the operator. */
  reason?: string;
}

export type ReadinessCheck = () => Promise<Readiness>;

/** The admission store answers: a bounded channel cannot be admitted while it does not. */
export async function storeReadiness(store: SlotStore): Promise<Readiness> {
  const health = await store.health();
  return health.healthy
    ? { ready: true }
    : {
        ready: false,
        reason: `the admission store (${store.kind}) does not answer: ${health.error ?? 'unknown'}`,
      };
}

/** `check` asked at most once per `ttlMs` after it settled, its call shared; a check that throws is not ready. */
export function cachedReadiness(check: ReadinessCheck, ttlMs: number, now?: () => number): ReadinessCheck {
  const guarded = () =>
    check().catch((err: unknown): Readiness => ({
      ready: false,
      reason: `readiness check failed: ${String(err)}`,
    }));
  return sharedRead(guarded, ttlMs, now);
}
