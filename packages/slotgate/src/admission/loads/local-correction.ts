/**
 * The load view's local correction: between two reads of the fleet's loads, what this instance itself changed (its
 * acquires and releases, its waiter registrations and removals) and what its passes are trying right now is added to
 * the last read, so its own work shows at once. A read's base is where these counters stood when it went out: only
 * what changed since is added to it.
 */
import type { ChannelLoad, OwnCounts } from '../../store/store.js';

/** This instance's acquires minus releases, and waiter registrations minus removals, since it started. */
export interface LocalNet {
  active: number;
  waiting: number;
}

export const ZERO: LocalNet = Object.freeze({ active: 0, waiting: 0 });

/** A load as read, with the base it is corrected from. */
export interface Corrected {
  load: ChannelLoad;
  /** This instance's running counters when the read went out: what changed since is added to the fetched load. */
  base: LocalNet;
  /** The last corrected load handed out, reused while neither the load nor the corrections changed. */
  memo?: { source: ChannelLoad; da: number; dw: number; r: number; result: ChannelLoad };
}

export class LocalCorrection {
  private readonly net = new Map<string, LocalNet>();
  /** Slots passes of this instance are trying right now, by channel. */
  private readonly reserved = new Map<string, number>();

  /** This instance's own counts on the channel (never negative). */
  own(id: string): OwnCounts {
    const n = this.net.get(id) ?? ZERO;
    return { active: Math.max(0, n.active), waiting: Math.max(0, n.waiting) };
  }

  /** The counters as they stand now: the base of a read going out. */
  base(id: string): LocalNet {
    return { ...(this.net.get(id) ?? ZERO) };
  }

  /** This instance took (+1, when the store admitted it) or gave back (-1) a slot on the channel. */
  noteActive(id: string, change: 1 | -1): void {
    this.localNet(id).active += change;
  }

  /** This instance registered (+1) or removed (-1) a waiter on the channel. */
  noteWaiter(id: string, change: 1 | -1): void {
    this.localNet(id).waiting += change;
  }

  /** A pass is about to try the channel (+1), or its try came back (-1). Never part of a read's base. */
  reserve(id: string, change: 1 | -1): void {
    const n = (this.reserved.get(id) ?? 0) + change;
    if (n > 0) this.reserved.set(id, n);
    else this.reserved.delete(id);
  }

  /** The load as read plus what this instance changed since the read went out, plus its reservations. */
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

  /** Raises the entry's load so that its corrected `field` shows at least `to` (until the next read replaces it). */
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
