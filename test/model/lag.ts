/**
 * How late this process's timers ran during a step: an event-loop stall longer than a lease's fence margin delays its
 * abort by the stall (docs/redis.md, "Failure bounds"), the one over-max at the upstream a pause past the TTL allows.
 */
import { fenceMarginMs } from '../../packages/slotgate/src/admission/leases/lease-manager.js';

const TICK_MS = 10;

export class LagMonitor {
  private timer: NodeJS.Timeout | undefined;
  private last = 0;
  private worst = 0;

  start(): void {
    this.last = performance.now();
    this.timer = setInterval(() => {
      const now = performance.now();
      this.worst = Math.max(this.worst, now - this.last - TICK_MS);
      this.last = now;
    }, TICK_MS);
  }

  /** A new step: the worst lag counts from here. */
  reset(): void {
    this.worst = 0;
  }

  /** Whether a stall in this step was longer than the fence margin of a lease of `leaseTtlMs`. */
  stalledPast(leaseTtlMs: number): boolean {
    return this.worst > fenceMarginMs(leaseTtlMs);
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
