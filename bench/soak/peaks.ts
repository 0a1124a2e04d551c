/**
 * The upstream's in-flight peaks per channel against the max in force. After a reload lowers a max, the slots taken
 * under the old one drain: from the reload's start until both gateways run the new config and the upstream has no
 * more than the new max in flight, the bound is the higher of the two ("transition"); otherwise it is the max.
 */
import type { FakeUpstream } from '../../test/helpers/fake-upstream.js';

export interface ChannelPeaks {
  /** Highest in flight while one max was in force, and the highest such max. */
  steady: number;
  steadyMax: number;
  /** Highest in flight during reload transitions, and the highest bound of those. */
  transition: number;
  transitionBound: number;
}

/** One interval in which the upstream had more in flight than the bound in force. */
export interface Excess {
  atS: number;
  channel: string;
  peak: number;
  bound: number;
}

export class Peaks {
  readonly byChannel: Record<string, ChannelPeaks> = {};
  readonly excess: Excess[] = [];
  private readonly max = new Map<string, number>();
  /** The bound of a channel in transition. */
  private readonly draining = new Map<string, number>();

  constructor(
    private readonly upstream: FakeUpstream,
    initial: Readonly<Record<string, number>>,
    private readonly clock: () => number,
  ) {
    for (const [id, max] of Object.entries(initial)) {
      this.max.set(id, max);
      this.byChannel[id] = { steady: 0, steadyMax: max, transition: 0, transitionBound: 0 };
      upstream.record(id);
    }
  }

  /** Closes the interval since the last fold on every channel: its peak goes to the phase in force. */
  fold(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const id of this.max.keys()) out[id] = this.foldOne(id);
    return out;
  }

  /** A reload to `next` maxes starts: until `settle`, each changed channel is bounded by the higher max. */
  begin(next: Readonly<Record<string, number>>): void {
    for (const [id, max] of Object.entries(next)) {
      const old = this.max.get(id)!;
      if (old === max) continue;
      this.foldOne(id);
      this.draining.set(id, Math.max(old, max));
      this.max.set(id, max);
    }
  }

  /** Both gateways run the new config: resolves once each channel in transition has drained to its new max. */
  async settle(pollMs = 20): Promise<void> {
    while (this.draining.size) {
      for (const id of [...this.draining.keys()]) {
        if (this.upstream.record(id).current > this.max.get(id)!) continue;
        this.foldOne(id);
        this.draining.delete(id);
      }
      if (this.draining.size) await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  private foldOne(id: string): number {
    const record = this.upstream.record(id);
    const peak = record.max;
    record.max = record.current; // the next interval starts from what is in flight now
    const p = this.byChannel[id]!;
    const transit = this.draining.get(id);
    const bound = transit ?? this.max.get(id)!;
    if (transit === undefined) {
      p.steady = Math.max(p.steady, peak);
      p.steadyMax = Math.max(p.steadyMax, bound);
    } else {
      p.transition = Math.max(p.transition, peak);
      p.transitionBound = Math.max(p.transitionBound, bound);
    }
    if (peak > bound) this.excess.push({ atS: this.clock(), channel: id, peak, bound });
    return peak;
  }
}
