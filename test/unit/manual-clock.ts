/** A Clock for tests that only moves when told to, so TTLs, back-off, time-outs and expiry run instantly. */
import { abortReason } from '../../packages/slotgate/src/core/abort.js';
import type { Clock, Timer } from '../../packages/slotgate/src/core/clock.js';

interface Due {
  at: number;
  /** Order of creation, so timers due at the same instant fire in the order they were set. */
  seq: number;
  fire: () => void;
}

/** Timers and sleepers fire in order of their deadline as `advance` passes it. */
export class ManualClock implements Clock {
  private t: number;
  private seq = 0;
  private due: Due[] = [];

  constructor(start = 1_700_000_000_000) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimer(fn: () => void, ms: number): Timer {
    const entry: Due = { at: this.t + Math.max(0, ms), seq: this.seq++, fire: fn };
    this.due.push(entry);
    return { cancel: () => (this.due = this.due.filter((d) => d !== entry)) };
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(abortReason(signal));
      const onAbort = () => {
        timer.cancel();
        reject(abortReason(signal!));
      };
      const timer = this.setTimer(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /**
   * Moves time forward by `ms`, firing every timer whose deadline is reached, in order, and letting the continuations
   * of each run (they may set new timers, which fire too if they fall within the window).
   */
  async advance(ms: number): Promise<void> {
    const target = this.t + ms;
    for (;;) {
      this.due.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const next = this.due[0];
      if (!next || next.at > target) break;
      this.due.shift();
      this.t = next.at;
      next.fire();
      await settle();
    }
    this.t = target;
    await settle();
  }

  /** Timers not fired or cancelled yet. */
  get pending(): number {
    return this.due.length;
  }
}

/** One macrotask turn drains every promise continuation (code on a ManualClock does no real I/O). */
function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
