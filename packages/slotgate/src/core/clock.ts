/**
 * Time, injected all the way down: reading it, sleeping and timers. Production code uses `systemClock`; unit tests use
 * `ManualClock`, so TTLs, back-off, time-outs and expiry run instantly and deterministically.
 */

/** A pending timer; `cancel` is idempotent. */
export interface Timer {
  cancel(): void;
}

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /**
   * Milliseconds on a monotonic clock with sub-millisecond precision, for short durations only (how long ago a request
   * arrived); not comparable with `now()`. Optional: where a clock has none, `now()` stands in (preciseNow).
   */
  precise?(): number;
  /** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /**
   * Calls `fn` once after `ms`. The library's timers never keep a process alive on their own: whatever they guard
   * (a store call, a lease) has I/O or a caller of its own.
   */
  setTimer(fn: () => void, ms: number): Timer;
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new Error('aborted');
}

/** The clock's precise reading (Clock.precise), or its `now()` where it has none. */
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

/**
 * Resolves with the value, or with `undefined` when `ms` passes first (the work goes on, detached). A failure of the
 * work rejects.
 */
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

interface Due {
  at: number;
  /** Order of creation, so timers due at the same instant fire in the order they were set. */
  seq: number;
  fire: () => void;
}

/** A clock that only moves when told to. Timers and sleepers fire in order of their deadline as `advance` passes it. */
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

/**
 * Lets everything queued run before the clock moves on: one macrotask turn drains every promise continuation,
 * however many hops deep (code on a ManualClock does no real I/O, so nothing else is waited for).
 */
function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
