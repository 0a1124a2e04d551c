/** A counting semaphore whose acquire gives up after a time-out (the bound on concurrent load fetches). */
import type { Clock } from '../../core/clock.js';

export class Semaphore {
  private available: number;
  private readonly queue: Array<(ok: boolean) => void> = [];

  constructor(
    permits: number,
    private readonly clock: Clock,
  ) {
    this.available = permits;
  }

  /** Resolves true with a permit, or false when none came free within `timeoutMs`. */
  acquire(timeoutMs: number): Promise<boolean> {
    if (this.available > 0) {
      this.available--;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const grant = (ok: boolean) => {
        timer.cancel();
        resolve(ok);
      };
      const timer = this.clock.setTimer(() => {
        const i = this.queue.indexOf(grant);
        if (i >= 0) this.queue.splice(i, 1);
        resolve(false);
      }, timeoutMs);
      this.queue.push(grant);
    });
  }

  release(): void {
    const next = this.queue.shift();
    if (next) next(true);
    else this.available++;
  }
}
