/**
 * The time bound of every store operation, one watchdog timer for all (a timer each would cost more than the
 * command). Time-outs and every failure become StoreUnavailableError: admission fails closed on any Redis trouble.
 */
import type { Clock, Timer } from '../../../core/clock.js';
import { StoreUnavailableError } from '../../../core/errors.js';

interface Pending {
  deadline: number;
  operation: string;
  reject: (err: Error) => void;
}

export class Deadlines {
  private readonly pending = new Set<Pending>();
  private timer: Timer | undefined;
  private readonly period: number;

  constructor(
    private readonly clock: Clock,
    readonly timeoutMs: number,
  ) {
    this.period = Math.max(5, Math.min(100, Math.floor(timeoutMs / 4)));
  }

  /** Not an async function: on the hot path every promise layer costs. */
  run<T>(operation: string, work: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const op: Pending = { deadline: this.clock.now() + this.timeoutMs, operation, reject };
      this.pending.add(op);
      this.watch();
      let started: Promise<T>;
      try {
        started = work();
      } catch (err) {
        started = Promise.reject(err as Error);
      }
      started.then(
        (value) => {
          if (this.pending.delete(op)) resolve(value);
        },
        (err: unknown) => {
          if (!this.pending.delete(op)) return; // timed out already
          reject(err instanceof StoreUnavailableError ? err : failure(operation, err));
        },
      );
    });
  }

  private watch(): void {
    if (this.timer) return;
    this.timer = this.clock.setTimer(() => {
      this.timer = undefined;
      const now = this.clock.now();
      for (const op of this.pending) {
        if (op.deadline > now) continue;
        this.pending.delete(op);
        op.reject(
          new StoreUnavailableError(
            op.operation,
            `redis ${op.operation} timed out after ${this.timeoutMs} ms`,
          ),
        );
      }
      if (this.pending.size > 0) this.watch();
    }, this.period);
  }

  close(): void {
    this.timer?.cancel();
    this.timer = undefined;
  }
}

export function failure(operation: string, err: unknown): StoreUnavailableError {
  const message = err instanceof Error ? err.message : String(err);
  return new StoreUnavailableError(operation, `redis ${operation} failed: ${message}`, { cause: err });
}
