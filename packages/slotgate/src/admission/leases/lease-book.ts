/**
 * The leases this instance holds, and their fencing. A lease's local deadline counts from the send of the call that
 * took or last renewed it, so it never passes after its expiry in the store; unrenewed at the deadline less a margin,
 * the lease is lost and its `lost` signal fires (unless kept as a local slot).
 */
import type { Clock, Timer } from '../../core/clock.js';
import { LeaseLostError, type LeaseLostReason } from '../../core/errors.js';
import type { LeaseRef, ReclaimRef } from '../../store/store.js';

export interface Lease extends LeaseRef {
  acquiredAt: number;
  /** The channel's max when the slot was taken (a handoff never carries it past a lowered max). */
  max: number;
  ttlMs: number;
  /** The local deadline: send time of the call that took or last renewed it, plus its TTL (Infinity: local). */
  expiresAt: number;
  /** Held in this process only while the store is unreachable (local share): not renewed, not fenced. */
  local: boolean;
  readonly lost: AbortSignal;
}

export type LeaseEvent =
  | { type: 'lease_lost'; channelId: string; token: string; reason: LeaseLostReason }
  | { type: 'lease_reclaimed'; channelId: string; token: string }
  | { type: 'leases_restored'; leases: number }
  | { type: 'lease_kept_local'; channelId: string; token: string }
  | { type: 'local_registered'; leases: number }
  | { type: 'renew_failed'; leases: number; error: Error }
  | { type: 'release_retry'; channelId: string; token: string; attempt: number; error: Error }
  | { type: 'release_abandoned'; channelId: string; token: string; error: Error }
  | { type: 'acquire_uncertain'; channelIds: string[]; token: string; cleaned: boolean };

/** A lease is fenced this long before its deadline: a tenth of its TTL, at most a second. */
export function fenceMarginMs(ttlMs: number): number {
  return Math.min(1000, Math.floor(ttlMs / 10));
}

export const refsOf = (leases: readonly Lease[]): ReclaimRef[] =>
  leases.map((l) => ({ channelId: l.channelId, token: l.token, max: l.max }));

interface LeaseBookOptions {
  clock: Clock;
  emit: (event: LeaseEvent) => void;
  /** Read at every loss: false only reports a lost lease (its signal never fires). */
  fencingEnabled: () => boolean;
  /** Asked for a lease past its deadline, with the local slots on its channel: true keeps it local. */
  keepAsLocal: (lease: Lease, localOnChannel: number) => boolean;
  /** A lease lost: its token still goes from the store (lease-manager.ts). */
  onLost: (lease: Lease) => void;
}

export class LeaseBook {
  private readonly live = new Map<string, Lease>();
  private readonly perChannel = new Map<string, number>();
  private readonly fences = new WeakMap<Lease, AbortController>();
  private fenceTimer: Timer | undefined;
  private fenceAt = Infinity;
  private closed = false;

  constructor(private readonly opts: LeaseBookOptions) {}

  get size(): number {
    return this.live.size;
  }

  all(): IterableIterator<Lease> {
    return this.live.values();
  }

  get(token: string): Lease | undefined {
    return this.live.get(token);
  }

  /** Live leases on a channel, local slots included. */
  count(channelId: string): number {
    return this.perChannel.get(channelId) ?? 0;
  }

  localSlots(channelId: string): number {
    let n = 0;
    for (const lease of this.live.values()) if (lease.local && lease.channelId === channelId) n++;
    return n;
  }

  /** A new lease the store says `token` holds, its deadline `ttlMs` after `sentAt` (Infinity: a local slot). */
  hold(channelId: string, token: string, max: number, ttlMs: number, sentAt: number): Lease {
    const fence = new AbortController();
    const now = this.opts.clock.now();
    const local = sentAt === Infinity;
    const lease: Lease = {
      channelId,
      token,
      acquiredAt: now,
      max,
      ttlMs,
      expiresAt: local ? Infinity : Math.min(now, sentAt) + ttlMs,
      local,
      lost: fence.signal,
    };
    this.fences.set(lease, fence);
    this.track(lease);
    return lease;
  }

  track(lease: Lease): void {
    this.live.set(lease.token, lease);
    this.perChannel.set(lease.channelId, this.count(lease.channelId) + 1);
    this.scheduleFence(lease.expiresAt - fenceMarginMs(lease.ttlMs));
  }

  forget(lease: Lease): void {
    this.live.delete(lease.token);
    const n = this.count(lease.channelId) - 1;
    if (n > 0) this.perChannel.set(lease.channelId, n);
    else this.perChannel.delete(lease.channelId);
  }

  /** The store confirmed the lease until `sentAt + ttl`. */
  confirmed(lease: Lease, sentAt: number, ttl: number): void {
    lease.expiresAt = sentAt + ttl;
    lease.ttlMs = ttl;
    lease.local = false;
  }

  lose(lease: Lease, reason: LeaseLostReason): void {
    this.forget(lease);
    this.opts.onLost(lease);
    this.opts.emit({ type: 'lease_lost', channelId: lease.channelId, token: lease.token, reason });
    if (this.opts.fencingEnabled())
      this.fences.get(lease)?.abort(new LeaseLostError(lease.channelId, reason));
  }

  /** Re-arms the fence timer after deadlines moved. */
  refence(): void {
    let at = Infinity;
    for (const lease of this.live.values()) at = Math.min(at, lease.expiresAt - fenceMarginMs(lease.ttlMs));
    this.scheduleFence(at);
  }

  /** One timer for the earliest deadline; it fences (or keeps local) every lease past its own. */
  private scheduleFence(at: number): void {
    if (this.closed || at === Infinity || (this.fenceTimer && this.fenceAt <= at)) return;
    this.fenceTimer?.cancel();
    this.fenceAt = at;
    this.fenceTimer = this.opts.clock.setTimer(
      () => {
        this.fenceTimer = undefined;
        this.fenceAt = Infinity;
        if (this.opts.fencingEnabled()) this.fenceDue();
        this.refence();
      },
      Math.max(1, at - this.opts.clock.now()),
    );
  }

  private fenceDue(): void {
    const now = this.opts.clock.now();
    for (const lease of [...this.live.values()]) {
      if (lease.expiresAt - fenceMarginMs(lease.ttlMs) > now) continue;
      if (this.opts.keepAsLocal(lease, this.localSlots(lease.channelId))) {
        lease.local = true;
        lease.expiresAt = Infinity;
        this.opts.emit({ type: 'lease_kept_local', channelId: lease.channelId, token: lease.token });
      } else this.lose(lease, 'expired');
    }
  }

  close(): void {
    this.closed = true;
    this.fenceTimer?.cancel();
  }
}
