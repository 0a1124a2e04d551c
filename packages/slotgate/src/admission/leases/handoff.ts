/**
 * Slot handoff: a slot released in this turn, whose removal has not gone out, passes to a pass of this instance with
 * no store command (safe: the removal would have preceded that pass's acquire in the same pipeline). Never onto a
 * cooling channel, past a lowered max, with under half a TTL left, over an unseen tier, to another client, or twice
 * per turn (the store's withdraw refuses).
 */
import { suffixOfToken } from '../../core/ids.js';
import type { Clock } from '../../core/clock.js';
import type { Candidate } from '../../core/channel.js';
import type { Lease, LeaseManager, LeaseRelease } from './lease-manager.js';
import type { Prepared } from '../pass/candidates.js';

interface Parked {
  lease: Lease;
  release: LeaseRelease;
}

interface HandedOff<C extends Candidate> {
  channel: C;
  lease: Lease;
}

export class Handoff {
  private readonly parked = new Map<string, Set<Parked>>();
  /** Slots taken over so far. */
  count = 0;

  constructor(
    private readonly leases: LeaseManager,
    private readonly clock: Clock,
  ) {}

  /** Offers a released slot for the rest of this turn; false when its removal cannot be withdrawn. */
  park(lease: Lease, release: LeaseRelease): boolean {
    if (!release.withdrawable) return false;
    const entry: Parked = { lease, release };
    let set = this.parked.get(lease.channelId);
    if (!set) this.parked.set(lease.channelId, (set = new Set()));
    set.add(entry);
    void release.done.then(() => this.unpark(entry)); // never rejects
    return true;
  }

  get available(): boolean {
    return this.parked.size > 0;
  }

  /** Takes over a parked slot of a channel in the set, in a tier `inTier` accepts, `usable`, of the same client. */
  take<C extends Candidate>(
    prepared: Prepared<C>,
    inTier: (tier: number) => boolean,
    usable: (channel: C) => boolean,
    share = '',
  ): HandedOff<C> | undefined {
    for (const [id, set] of this.parked) {
      const entry = prepared.tierOf.get(id);
      if (!entry || !inTier(entry.tier) || !usable(entry.channel)) continue;
      const lease = this.withdrawFrom(set, entry.channel.maxConcurrency!, share);
      if (set.size === 0) this.parked.delete(id);
      if (!lease) continue;
      this.count++;
      return { channel: entry.channel, lease };
    }
    return undefined;
  }

  private withdrawFrom(set: Set<Parked>, max: number, share: string): Lease | undefined {
    const now = this.clock.now();
    const healthy = this.leases.leaseTtlMs / 2;
    for (const parked of set) {
      const { lease } = parked;
      if (lease.expiresAt - now < healthy || max < lease.max) continue;
      // the token names its client, and the fair share counts a client's slots by their tokens
      if (suffixOfToken(lease.token) !== share) continue;
      set.delete(parked);
      if (parked.release.withdraw()) return lease;
    }
    return undefined;
  }

  private unpark(entry: Parked): void {
    const set = this.parked.get(entry.lease.channelId);
    if (set?.delete(entry) && set.size === 0) this.parked.delete(entry.lease.channelId);
  }
}
