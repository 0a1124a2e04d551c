/** Time, injected all the way down (tests drive a manual clock): TTLs, back-off and time-outs are deterministic. */
import { abortReason } from './abort.js';

/** A pending timer; `cancel` is idempotent. */
export interface Timer {
  cancel(): void;
}

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /**
   * Milliseconds on a monotonic clock with sub-millisecond precision, for short durations only; not comparable with
   * `now()`. Optional: `now()` stands in where a clock has none (preciseNow).
   */
  precise?(): number;
  /** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Calls `fn` once after `ms`. Never keeps a process alive on its own (what it guards has I/O of its own). */
  setTimer(fn: () => void, ms: number): Timer;
}

export function preciseNow(clock: Clock): number {
  return clock.precise ? clock.precise() : clock.now();
}

export const systemClock: Clock = {
  now: () => Date.now(),
  precise: () => performance.now(),
  sleep(ms, signal) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(abortReason(signal));
      const onAbort = () => {
        clearTimeout(timer);
        reject(abortReason(signal!));
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  },
  setTimer(fn, ms) {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return { cancel: () => clearTimeout(timer) };
  },
};

/** Resolves with the value, or with `undefined` when `ms` passes first (the work goes on, detached). */
export function within<T>(clock: Clock, work: Promise<T>, ms: number): Promise<T | undefined> {
  return new Promise((resolve, reject) => {
    const timer = clock.setTimer(() => resolve(undefined), ms);
    work.then(
      (value) => {
        timer.cancel();
        resolve(value);
      },
      (err: unknown) => {
        timer.cancel();
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}
