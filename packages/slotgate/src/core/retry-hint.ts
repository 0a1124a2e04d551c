/**
 * The Retry-After hint of a capacity error: when a slot is likely to come free for a caller that tries again, from
 * what this instance already knows (no store command): the waiters queued on the saturated channels, their total max
 * concurrency and the recent hold times of this instance's own slots. Jittered per answer, so callers told to come
 * back (the SDKs' automatic retries honour `retry-after-ms` to the millisecond, with no jitter of their own) do not
 * all come back in the same instant.
 */
import type { Random } from './order.js';

export const RETRY_HINT = {
  /** The shortest and longest hint, jitter included. */
  floorMs: 100,
  capMs: 30_000,
  /** The hold time assumed before this instance has seen one released. */
  defaultHoldMs: 1000,
  /** The jitter factor is uniform in [low, high). */
  jitterLow: 0.5,
  jitterHigh: 1.5,
  /** Recent holds kept per channel, and channels tracked (the oldest tracked goes first). */
  samplesPerChannel: 32,
  maxChannels: 1024,
} as const;

const clamp = (ms: number) => Math.min(RETRY_HINT.capMs, Math.max(RETRY_HINT.floorMs, ms));

/**
 * The expected wait, unjittered: every waiter ahead is served before the caller, `maxConcurrency` at a time, each
 * turn lasting about one hold: (waiting ÷ maxConcurrency + 1) × holdMs, clamped to [floorMs, capMs].
 */
export function slotLikelyInMs(load: { waiting: number; maxConcurrency: number; holdMs: number }): number {
  const waiting = Number.isFinite(load.waiting) && load.waiting > 0 ? load.waiting : 0;
  const max = Number.isFinite(load.maxConcurrency) && load.maxConcurrency >= 1 ? load.maxConcurrency : 1;
  const hold = Number.isFinite(load.holdMs) && load.holdMs > 0 ? load.holdMs : RETRY_HINT.defaultHoldMs;
  return clamp((waiting / max + 1) * hold);
}

/** `ms` times a factor uniform in [jitterLow, jitterHigh), clamped again, in whole milliseconds. */
export function jitteredHint(ms: number, random: Random): number {
  const factor = RETRY_HINT.jitterLow + random() * (RETRY_HINT.jitterHigh - RETRY_HINT.jitterLow);
  return Math.round(clamp(ms * factor));
}

/** The recent hold times (ms) of this instance's slots, per channel: a small ring each. */
export class HoldTimes {
  private readonly rings = new Map<string, { values: number[]; next: number }>();

  record(channelId: string, ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return;
    let ring = this.rings.get(channelId);
    if (!ring) {
      if (this.rings.size >= RETRY_HINT.maxChannels) this.rings.delete(this.rings.keys().next().value!);
      ring = { values: [], next: 0 };
      this.rings.set(channelId, ring);
    }
    if (ring.values.length < RETRY_HINT.samplesPerChannel) ring.values.push(ms);
    else ring.values[ring.next] = ms;
    ring.next = (ring.next + 1) % RETRY_HINT.samplesPerChannel;
  }

  /** The median of the recent holds on these channels together; undefined when none was seen. */
  median(channelIds: readonly string[]): number | undefined {
    const all = channelIds.flatMap((id) => this.rings.get(id)?.values ?? []);
    if (all.length === 0) return undefined;
    all.sort((a, b) => a - b);
    const mid = all.length >> 1;
    return all.length % 2 ? all[mid]! : (all[mid - 1]! + all[mid]!) / 2;
  }
}
