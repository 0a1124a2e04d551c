/**
 * How many slots a channel may have in flight, and in the store, at a given moment of a schedule: its max, with
 * exactly the excess docs/redis.md ("Failure bounds") documents for the faults that happened, and no other.
 *
 * - A lowered max applies to every admission after the reload; slots admitted before keep going (docs/api.md,
 *   `configChanged`). So an admission during the reload's own step may still count under the old max, and the store
 *   may hold up to the highest max under which any live lease or registration was made.
 * - An empty restart: an instance that reconnects later than `restart_grace_ms` after the new epoch's creation
 *   leaves its leases uncounted meanwhile: up to its leases on the channel, for at most `lease_ttl_ms`. An admitting
 *   command in flight at the restart may be resent by ioredis before the epoch check: the store fails it and gives
 *   its slot back, so none reaches the upstream, but the store may count one slot per such call until that many
 *   requests on the channel have ended.
 * - Redis paused past the lease TTL: a lease is fenced by its holder before it expires in Redis; only an event-loop
 *   stall longer than the fence margin delays that abort (the runner checks this with the lag it measured).
 */
import type { Instance } from './fleet.js';

/** A request as the bounds see it. */
export interface Holder {
  readonly inst: Instance;
  readonly ch: string;
  /** Held by the caller now (admitted, not released or lost). */
  readonly holding: boolean;
}

export interface Restart {
  at: number;
  /** Epoch creation + grace: when the others may admit again. Unknown until read. */
  graceEnd?: number;
  /** Per instance, the holders it had at the restart. */
  held: Map<Instance, Holder[]>;
  /** Per channel, admitting calls in flight at the restart, and requests ended on it since. */
  resent: Map<string, { calls: number; ended: number }>;
}

interface MaxSpan {
  from: number;
  max: number;
}

export class Bounds {
  private readonly history = new Map<string, MaxSpan[]>();
  private readonly restarts: Restart[] = [];
  /** The maxes in force during the current step, per channel. */
  private readonly stepMaxes = new Map<string, Set<number>>();

  constructor(
    maxes: ReadonlyMap<string, number>,
    private readonly leaseTtlMs: number,
  ) {
    const now = Date.now();
    for (const [ch, max] of maxes) {
      this.history.set(ch, [{ from: now, max }]);
      this.stepMaxes.set(ch, new Set([max]));
    }
  }

  maxOf(ch: string): number {
    return this.history.get(ch)!.at(-1)!.max;
  }

  setMax(ch: string, max: number): void {
    this.history.get(ch)!.push({ from: Date.now(), max });
    this.stepMaxes.get(ch)!.add(max);
  }

  /** A new step: only the max in force now counts for its admissions. */
  nextStep(): void {
    for (const [ch, set] of this.stepMaxes) {
      set.clear();
      set.add(this.maxOf(ch));
    }
  }

  /** In flight at the upstream, as seen right after an admission. */
  upstream(ch: string, holders: readonly Holder[]): number {
    return Math.max(...this.stepMaxes.get(ch)!) + this.excess(ch, holders, false);
  }

  /** Live leases in the store, where `since` is when the oldest live lease or registration on the channel began. */
  store(ch: string, since: number, holders: readonly Holder[]): number {
    const spans = this.history.get(ch)!;
    let highest = 0;
    spans.forEach((span, i) => {
      const until = spans[i + 1]?.from ?? Infinity;
      if (until > since) highest = Math.max(highest, span.max);
    });
    return highest + this.excess(ch, holders, true);
  }

  noteRestart(held: Map<Instance, Holder[]>, inFlight: (ch: string) => number): Restart {
    const resent = new Map<string, { calls: number; ended: number }>();
    for (const ch of this.history.keys()) resent.set(ch, { calls: inFlight(ch), ended: 0 });
    const restart: Restart = { at: Date.now(), held, resent };
    this.restarts.push(restart);
    return restart;
  }

  /** A request on the channel ended (released or lost): the resend allowance shrinks. */
  noteEnded(ch: string): void {
    for (const r of this.restarts) r.resent.get(ch)!.ended++;
  }

  /** The documented excess over the max on this channel right now; `resent`: the store's, which counts resent calls. */
  excess(ch: string, holders: readonly Holder[], resent: boolean): number {
    const now = Date.now();
    let excess = 0;
    for (const r of this.restarts) {
      const resend = r.resent.get(ch)!;
      if (resent) excess += Math.max(0, resend.calls - resend.ended);
      if (r.graceEnd === undefined || now > r.at + this.leaseTtlMs) continue;
      for (const [inst, held] of r.held) {
        const back = inst.reconnects.find((at) => at >= r.at);
        if ((back ?? now) <= r.graceEnd) continue;
        excess += held.filter((h) => h.ch === ch && h.holding && holders.includes(h)).length;
      }
    }
    return excess;
  }
}
