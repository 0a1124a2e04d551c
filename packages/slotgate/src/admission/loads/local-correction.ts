/** What this instance changed since a read went out, and what its passes try now, added to that read. */
import type { ChannelLoad, OwnCounts } from '../../store/store.js';

/** This instance's acquires minus releases, and waiter registrations minus removals, since it started. */
interface LocalNet {
  active: number;
  waiting: number;
}

const ZERO: LocalNet = Object.freeze({ active: 0, waiting: 0 });

/** A load as read, with the base it is corrected from. */
export interface Corrected {
  load: ChannelLoad;
  /** This instance's counters when the read went out. */
  base: LocalNet;
  /** The last corrected load, reused while neither the load nor the corrections changed. */
  memo?: { source: ChannelLoad; da: number; dw: number; r: number; result: ChannelLoad };
}

export class LocalCorrection {
  private readonly net = new Map<string, LocalNet>();
  /** Slots passes of this instance are trying right now, by channel. */
  private readonly reserved = new Map<string, number>();

  own(id: string): OwnCounts {
    const n = this.net.get(id) ?? ZERO;
    return { active: Math.max(0, n.active), waiting: Math.max(0, n.waiting) };
  }

  /** The counters as they stand now: the base of a read going out. */
  base(id: string): LocalNet {
    return { ...(this.net.get(id) ?? ZERO) };
  }

  noteActive(id: string, change: 1 | -1): void {
    this.localNet(id).active += change;
  }

  noteWaiter(id: string, change: 1 | -1): void {
    this.localNet(id).waiting += change;
  }

  /** A pass is about to try the channel (+1), or its try came back (-1). Never part of a read's base. */
  reserve(id: string, change: 1 | -1): void {
    const n = (this.reserved.get(id) ?? 0) + change;
    if (n > 0) this.reserved.set(id, n);
    else this.reserved.delete(id);
  }

  corrected(id: string, entry: Corrected): ChannelLoad {
    const now = this.net.get(id) ?? ZERO;
    const r = this.reserved.get(id) ?? 0;
    const da = now.active - entry.base.active;
    const dw = now.waiting - entry.base.waiting;
    if (da === 0 && dw === 0 && r === 0) return entry.load;
    const memo = entry.memo;
    if (memo && memo.source === entry.load && memo.da === da && memo.dw === dw && memo.r === r)
      return memo.result;
    const result = {
      ...entry.load,
      active: Math.max(0, entry.load.active + da) + r,
      waiting: Math.max(0, entry.load.waiting + dw),
    };
    entry.memo = { source: entry.load, da, dw, r, result };
    return result;
  }

  /** Raises the entry's load so that its corrected `field` shows at least `to`. */
  showAtLeast(id: string, entry: Corrected, field: 'active' | 'waiting', to: number): void {
    const shown = this.corrected(id, entry)[field];
    if (shown < to) entry.load = { ...entry.load, [field]: entry.load[field] + (to - shown) };
  }

  private localNet(id: string): LocalNet {
    let n = this.net.get(id);
    if (!n) this.net.set(id, (n = { active: 0, waiting: 0 }));
    return n;
  }
}
