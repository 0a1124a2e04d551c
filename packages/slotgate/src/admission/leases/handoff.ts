/**
 * Slot handoff: a slot released in this event-loop turn, whose removal the store still holds, passes to a pass or a
 * waiter of this instance that wants its channel, with no store command: the removal is withdrawn and the lease (same
 * token, same expiry, same renewal) is live again. The removal would have gone out at the end of this turn, in the
 * same pipeline as and ahead of that pass's acquire, so the pass would have found the slot free anyway; no other
 * instance could have taken it in between. This module owns the parked slots, the rules and the takeover.
 *
 * A slot is never handed
 * - onto a channel cooling down (by the load snapshot or a cooldown this instance set),
 * - past a max lowered since it was acquired,
 * - with less than half a lease TTL left by the local estimate,
 * - over a higher tier of the candidate set that the pass has not looked at yet (the caller says which tiers count),
 * - more than once per turn (the store's withdraw refuses the second time, so a loop comes back to the event loop).
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

export interface HandedOff<C extends Candidate> {
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

  /** Offers a released slot for the rest of this turn. False when its removal cannot be withdrawn. */
  park(lease: Lease, release: LeaseRelease): boolean {
    if (!release.withdrawable) return false;
    const entry: Parked = { lease, release };
    let set = this.parked.get(lease.channelId);
    if (!set) this.parked.set(lease.channelId, (set = new Set()));
    set.add(entry);
    void release.done.then(() => this.unpark(entry)); // never rejects
    return true;
  }

  /** Whether any slot is parked: a pass that finds none pays nothing more. */
  get available(): boolean {
    return this.parked.size > 0;
  }

  /**
   * Takes a parked slot over for a channel of the candidate set in a tier `inTier` accepts whose channel `usable`
   * accepts (not cooling), from a request of the same client (`share`, core/ids.ts). Undefined when there is none.
   */
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
      // the token names its client (the fair share counts a client's slots by it): same client only
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
