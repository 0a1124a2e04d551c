/**
 * Time, injected. Production code uses `systemClock`; unit tests use `ManualClock` so TTLs, backoff and expiry run
 * instantly and deterministically.
 */

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`, or rejects with the signal's reason when it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new Error('aborted');
}

export const systemClock: Clock = {
  now: () => Date.now(),
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
};

interface Sleeper {
  at: number;
  resolve: () => void;
}

/** A clock that only moves when told to. Sleepers wake in order of their deadline as `advance` passes it. */
export class ManualClock implements Clock {
  private t: number;
  private sleepers: Sleeper[] = [];

  constructor(start = 1_700_000_000_000) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(abortReason(signal));
      const sleeper: Sleeper = { at: this.t + Math.max(0, ms), resolve };
      this.sleepers.push(sleeper);
      signal?.addEventListener(
        'abort',
        () => {
          this.sleepers = this.sleepers.filter((s) => s !== sleeper);
          reject(abortReason(signal));
        },
        { once: true },
      );
    });
  }

  /** Moves time forward by `ms`, waking every sleeper whose deadline is reached (awaiting their continuations). */
  async advance(ms: number): Promise<void> {
    const target = this.t + ms;
    for (;;) {
      this.sleepers.sort((a, b) => a.at - b.at);
      const next = this.sleepers[0];
      if (!next || next.at > target) break;
      this.sleepers.shift();
      this.t = next.at;
      next.resolve();
      // Let the woken continuation run (and maybe sleep again) before moving on.
      for (let i = 0; i < 10; i++) await Promise.resolve();
    }
    this.t = target;
  }

  get pendingSleepers(): number {
    return this.sleepers.length;
  }
}
