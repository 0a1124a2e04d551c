/**
 * The lease manager: owns this instance's leases on top of a SlotStore.
 * - tokens `<instanceId>:<seq>`;
 * - one renewal timer every `lease_ttl_ms / 3` that renews all live leases in batched store calls;
 * - release detached from the request's cancellation, retried with backoff until confirmed or the lease has expired;
 * - the uncertain-acquire rule: an acquire that errored after it may have been sent gets one detached removal of its
 *   token (500 ms cap, no retry) and surfaces as StoreUnavailableError. The lease TTL is the final backstop;
 * - fencing: a lease the store no longer holds is taken back when its channel has room, else it is lost for good and
 *   its `lost` signal fires; so does a lease whose local expiry (last confirmed renewal + TTL, less a margin) passes
 *   with no renewal confirmed, since the store may have given its slot away by then. After a Redis restart (the
 *   store's restart listener), every live lease is registered again before the store admits anything.
 */
import { systemClock, within, type Clock, type Timer } from '../core/clock.js';
import { LeaseLostError, StoreUnavailableError, type LeaseLostReason } from '../core/errors.js';
import { randomInstanceId, tokenOf } from '../core/ids.js';
import type { AcquireReply, AcquireTarget, LeaseRef, ReclaimRef, SlotStore } from './store.js';

export interface Lease extends LeaseRef {
  acquiredAt: number;
  /** The channel's max concurrency when the slot was acquired (a handoff never carries a slot past a lowered max). */
  max: number;
  /**
   * Local estimate of the lease expiry, never later than Redis's: when the last successful renewal (or the acquire,
   * claim or granting release) was sent + TTL.
   */
  expiresAt: number;
  /** Fires (with a LeaseLostError) when the lease is lost for good: the work it guards must end. */
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

export interface LeaseManagerOptions {
  store: SlotStore;
  instanceId?: string;
  clock?: Clock;
  /** Read at every acquire and renewal tick, so a settings change applies without a restart. */
  leaseTtlMs: () => number;
  onEvent?: (event: LeaseEvent) => void;
  /** Cap on the one cleanup removal after an uncertain acquire. @default 500 */
  cleanupTimeoutMs?: number;
  /**
   * Fencing, read at every loss: `enabled` false only reports a lost lease (its signal never fires); `reclaim` false
   * ends a lease the store lost without trying to take it back. @default both true
   */
  fencing?: () => { enabled: boolean; reclaim: boolean };
  /**
   * Asked when a lease reaches its local expiry with no renewal confirmed: true keeps it as a local slot (the store
   * unreachable, `store_failure_mode: local_share`, within this instance's share) instead of losing it.
   */
  keepExpired?: (lease: Lease) => boolean;
  /** Told of every store call's fate (acquire, renewal): true when it answered, false when it failed. */
  onStore?: (answered: boolean) => void;
}

/** What a claim's round trip may take, at the least, before a lease held ahead of its claim is fenced. */
const CLAIM_BUDGET_MS = 1000;

/** The margin before a lease's local expiry at which it is fenced: a tenth of its TTL, at most a second. */
export function fenceMarginMs(ttlMs: number): number {
  return Math.min(1000, Math.floor(ttlMs / 10));
}

export interface AcquireOutcome {
  /** One reply per target tried; the last is 'acquired' when `lease` is set. */
  replies: AcquireReply[];
  lease?: Lease;
}

/** A lease on its way out: it no longer renews, and its removal is retried until confirmed or expired. */
export interface LeaseRelease {
  /** Settles (never rejects) when the removal is confirmed, withdrawn or given up. */
  readonly done: Promise<void>;
  /** Whether the removal waits for the end of this event-loop turn, and can be withdrawn until then. */
  readonly held: boolean;
  /** Takes the removal back while it is held: the lease is live again (same token, expiry and renewal). */
  withdraw(): boolean;
}

export class LeaseManager {
  readonly instanceId: string;
  private readonly store: SlotStore;
  private readonly clock: Clock;
  private readonly ttl: () => number;
  private readonly emit: (event: LeaseEvent) => void;
  private readonly cleanupTimeoutMs: number;
  private seq = 0;
  private readonly live = new Map<string, Lease>();
  private readonly perChannel = new Map<string, number>();
  /** Removals in flight, so close() can wait for them. */
  private readonly releasing = new Set<Promise<void>>();
  private timer: Timer | undefined;
  private renewing: Promise<void> | undefined;
  private closed = false;
  private readonly fencing: () => { enabled: boolean; reclaim: boolean };
  private readonly fences = new WeakMap<Lease, AbortController>();
  private fenceTimer: Timer | undefined;
  /**
   * The claims of leases held ahead of them (claimAhead), not due yet. Left running when the lease is released (a
   * release withdrawn for a handoff tracks it again, still to be claimed): a claim due finds out whether it is live.
   */
  private readonly claimTimers = new Map<Lease, Timer>();
  /** Leases held ahead of a claim not sent yet: the hold's end, and the TTL to claim with (claimDue). */
  private readonly unclaimed = new WeakMap<Lease, { heldUntil: number; leaseTtlMs: number }>();
  private fenceAt = Infinity;
  /** Whether the last renewal failed: the next one comes sooner. */
  private renewFailed = false;
  private readonly unsubscribe: () => void;
  private readonly keepExpired: (lease: Lease) => boolean;
  private readonly onStore: (answered: boolean) => void;
  /** Tokens of the local slots: held in this process only, not in the store (yet). */
  private readonly local = new Set<string>();
  private registering: Promise<void> | undefined;

  constructor(options: LeaseManagerOptions) {
    this.store = options.store;
    this.instanceId = options.instanceId ?? randomInstanceId();
    this.clock = options.clock ?? systemClock;
    this.ttl = options.leaseTtlMs;
    this.emit = options.onEvent ?? (() => {});
    this.cleanupTimeoutMs = options.cleanupTimeoutMs ?? 500;
    this.fencing = options.fencing ?? (() => ({ enabled: true, reclaim: true }));
    this.unsubscribe = this.store.onRestart(() => this.restore());
    this.keepExpired = options.keepExpired ?? (() => false);
    this.onStore = options.onStore ?? (() => {});
  }

  /** This instance's local slots on a channel (not in the store). */
  localSlots(channelId: string): number {
    let n = 0;
    for (const token of this.local) if (this.live.get(token)?.channelId === channelId) n++;
    return n;
  }

  /** Whether local slots wait to be registered in the store. */
  get hasLocal(): boolean {
    return this.local.size > 0;
  }

  /**
   * A slot held in this process only, while the store is unreachable (`store_failure_mode: local_share`; the caller
   * keeps within its share). It is registered in the store by `registerLocal` once the store answers again.
   */
  holdLocal(channelId: string, max: number): Lease {
    if (this.closed) throw new StoreUnavailableError('acquire', 'the lease manager is closed');
    const lease = this.hold(channelId, this.nextToken(), max, this.ttl());
    this.local.add(lease.token);
    lease.expiresAt = Infinity;
    // the renewal tick is when local slots try to get registered: every second while the store fails
    this.renewFailed = true;
    this.timer?.cancel();
    this.timer = undefined;
    this.schedule();
    return lease;
  }

  /**
   * Registers the local slots in the store, into free slots only (one that does not fit is lost, and its signal
   * fires), so they are leases like any other from now on. After a Redis restart the restore listener has registered
   * them already, whatever the load. Coalesced; rejects with the store's error.
   */
  registerLocal(): Promise<void> {
    if (this.local.size === 0) return Promise.resolve();
    return (this.registering ??= this.sendLocal().finally(() => {
      this.registering = undefined;
    }));
  }

  private async sendLocal(): Promise<void> {
    const leases = [...this.local].map((t) => this.live.get(t)).filter((l): l is Lease => l !== undefined);
    const ttl = this.ttl();
    const started = this.clock.now();
    const refs: ReclaimRef[] = leases.map((l) => ({ channelId: l.channelId, token: l.token, max: l.max }));
    let notHeld: Set<string>;
    try {
      // into free slots only: a slot admitted locally that no longer fits (the others admitted through the store
      // meanwhile) is lost, and its request ended, rather than registered past the max
      notHeld = new Set((await this.store.reclaim(refs, ttl, false)).map((l) => l.token));
    } catch (err) {
      this.onStore(false);
      throw err;
    }
    this.onStore(true);
    let registered = 0;
    for (const lease of leases) {
      if (!this.local.has(lease.token) || this.live.get(lease.token) !== lease) continue;
      if (notHeld.has(lease.token)) this.lose(lease, 'missing');
      else {
        this.local.delete(lease.token);
        this.renewed(lease, started, ttl);
        registered++;
      }
    }
    this.scheduleFence(this.earliestFence());
    this.emit({ type: 'local_registered', leases: registered });
  }

  /** A new token, with the share of the request's client when it has one (core/ids.ts). */
  nextToken(share = ''): string {
    return tokenOf(this.instanceId, ++this.seq, share);
  }

  /** This instance's live leases on a channel (the in-memory fallback of the load view). */
  localCount(channelId: string): number {
    return this.perChannel.get(channelId) ?? 0;
  }

  /** Whether this instance holds the token's lease on the channel (claimed, not yet released). */
  holds(channelId: string, token: string): boolean {
    return this.live.get(token)?.channelId === channelId;
  }

  get size(): number {
    return this.live.size;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  leases(): IterableIterator<Lease> {
    return this.live.values();
  }

  /** The lease TTL in force (leases acquired from now on get it). */
  get leaseTtlMs(): number {
    return this.ttl();
  }

  /** Tries the targets in one store call; tracks the lease that admitted it. */
  async acquireFirst(
    targets: readonly AcquireTarget[],
    checkCooldown: boolean,
    share = '',
  ): Promise<AcquireOutcome> {
    if (this.closed) throw new StoreUnavailableError('acquire', 'the lease manager is closed');
    const token = this.nextToken(share);
    const leaseTtlMs = this.ttl();
    // the lease runs from when the call was built (or, for a store that does not say, from before the call): the store
    // scores it no earlier (by Redis TIME in the script, or its upper bound of the Redis clock taken when it builds
    // the call), so this deadline never passes after its expiry in Redis
    let sentAt = this.clock.now();
    let replies: AcquireReply[];
    try {
      const onSent = () => (sentAt = this.clock.now());
      replies = await this.store.acquireFirst(targets, { token, leaseTtlMs, checkCooldown, onSent });
      this.onStore(true);
    } catch (err) {
      this.onStore(false);
      this.cleanupUncertain(targets, token);
      if (err instanceof StoreUnavailableError) throw err;
      throw new StoreUnavailableError('acquire', `acquire failed: ${(err as Error).message}`, { cause: err });
    }
    if (replies[replies.length - 1] !== 'acquired') return { replies };
    const target = targets[replies.length - 1]!;
    return { replies, lease: this.hold(target.channelId, token, target.max, leaseTtlMs, sentAt) };
  }

  /**
   * A slot the store says this token holds, from now on a tracked lease expiring `leaseTtlMs` after `from` (when the
   * call that took it was sent; now by default).
   */
  private hold(channelId: string, token: string, max: number, leaseTtlMs: number, from?: number): Lease {
    const now = this.clock.now();
    const fence = new AbortController();
    const lease: Lease = {
      channelId,
      token,
      acquiredAt: now,
      max,
      expiresAt: Math.min(now, from ?? now) + leaseTtlMs,
      ttlMs: leaseTtlMs,
      lost: fence.signal,
    };
    this.fences.set(lease, fence);
    this.track(lease);
    return lease;
  }

  /**
   * Claims a slot the store granted to a waiter (the token holds it only until a short claim deadline): one store
   * call extends it to a full lease, and from then on it is a lease like any other. Undefined when the grant was gone (its
   * deadline passed first); a store failure throws StoreUnavailableError.
   */
  async claim(channelId: string, token: string, max: number): Promise<Lease | undefined> {
    if (this.closed) throw new StoreUnavailableError('acquire', 'the lease manager is closed');
    const leaseTtlMs = this.ttl();
    // (from before the call: the claim scores the lease no earlier, by Redis TIME or the store's bound of its clock)
    const sentAt = this.clock.now();
    if (!(await this.store.claim({ channelId, token }, leaseTtlMs))) return undefined;
    return this.hold(channelId, token, max, leaseTtlMs, sentAt);
  }

  /**
   * Holds a slot granted to a waiter at once, before its claim: the grant is known to hold the slot for `heldForMs`
   * without one (its claim deadline, a margin taken off), so the lease starts out expiring then. The claim goes out
   * only once the hold has run long enough that the fence margin and two claims' round trips are all that is left of
   * it (at once for a hold that short): a request that gives its slot back before then, as most short ones do, never
   * claims it, and its release takes the grant out as it would a lease. Confirmed, it is a full lease; a grant found
   * gone is lost (its signal fires). A claim that fails is tried again at once as a renewal of that lease alone, then
   * by the renewals a second apart, and the lease is fenced a margin before its short expiry if nothing confirms it.
   * A token whose lease ended before its claim said it holds (fenced, or lost to a restore race) is removed, so no
   * confirmed slot is left with nobody to release it.
   *
   * Undefined, and the caller claims first: with fencing off (nothing would end a request whose grant was gone), or
   * when the hold would not outlast the fence margin and a claim's round trip (CLAIM_BUDGET_MS).
   */
  claimAhead(channelId: string, token: string, max: number, heldForMs: number): Lease | undefined {
    if (this.closed) throw new StoreUnavailableError('acquire', 'the lease manager is closed');
    const leaseTtlMs = this.ttl();
    const margin = fenceMarginMs(leaseTtlMs);
    if (!this.fencing().enabled || heldForMs < margin + CLAIM_BUDGET_MS) return undefined;
    const lease = this.hold(channelId, token, max, leaseTtlMs);
    // until a claim or a renewal confirms it, it expires with the grant (and is fenced a margin before, as any lease)
    const heldUntil = this.clock.now() + heldForMs;
    lease.expiresAt = heldUntil;
    this.scheduleFence(lease.expiresAt - margin);
    const claimIn = heldForMs - margin - 2 * CLAIM_BUDGET_MS;
    if (claimIn <= 0) this.sendClaim(lease, leaseTtlMs);
    else {
      this.unclaimed.set(lease, { heldUntil, leaseTtlMs });
      const timer = this.clock.setTimer(() => {
        this.claimTimers.delete(lease);
        // released meanwhile: claimed if a handoff tracks it again (withdraw); lost, or confirmed by a renewal: never
        if (this.live.get(token) === lease) this.claimDue(lease);
      }, claimIn);
      this.claimTimers.set(lease, timer);
    }
    return lease;
  }

  /** Claims a lease held ahead whose claim is due, unless a renewal (or a restore) confirmed it meanwhile. */
  private claimDue(lease: Lease): void {
    const ahead = this.unclaimed.get(lease);
    if (!ahead || this.claimTimers.has(lease)) return;
    this.unclaimed.delete(lease);
    if (lease.expiresAt === ahead.heldUntil) this.sendClaim(lease, ahead.leaseTtlMs);
  }

  /** Claims a lease held ahead of its claim (claimAhead): a full lease once confirmed, lost when the grant is gone. */
  private sendClaim(lease: Lease, leaseTtlMs: number, again = false): void {
    const { channelId, token } = lease;
    const sentAt = this.clock.now();
    const removeToken = () =>
      void this.store.release({ channelId, token, ttlMs: leaseTtlMs }).catch(() => {
        // the token expires with the grant, or with the lease TTL if the claim extended it
      });
    // a second try renews the token as any lease (the renewal script says whether it is still there)
    const call = again
      ? this.store.renew([lease], leaseTtlMs).then((lost) => lost.length === 0)
      : this.store.claim({ channelId, token }, leaseTtlMs);
    void call.then(
      (held) => {
        this.onStore(true);
        if (this.live.get(token) !== lease) {
          // released meanwhile: that release went out after this claim and removed the token; lost meanwhile: the
          // claim may just have made it a full lease that nobody holds
          if (held && lease.lost.aborted) removeToken();
          return;
        }
        if (held) this.renewed(lease, sentAt, leaseTtlMs);
        else {
          this.lose(lease, 'missing');
          removeToken(); // (a restore that re-registered it after this claim ran on an empty Redis)
        }
      },
      () => {
        this.onStore(false);
        if (!again && this.live.get(token) === lease) {
          // one more try at once, of this lease alone (a renewal already on its way may predate it): the hold has
          // room for it
          this.sendClaim(lease, leaseTtlMs, true);
          return;
        }
        // the renewals retry it soon, as after a failed renewal
        this.renewFailed = true;
        this.timer?.cancel();
        this.timer = undefined;
        this.schedule();
      },
    );
  }

  /**
   * Takes over a grant that is a full lease already (the store granted it, with `leaseTtlMs`, in a release this
   * instance sent): no store call. Its deadline runs from `from` (when that release was sent: the store scored the
   * lease no earlier); it is renewed like any other lease from now on.
   */
  adopt(channelId: string, token: string, max: number, leaseTtlMs: number, from?: number): Lease {
    if (this.closed) throw new StoreUnavailableError('acquire', 'the lease manager is closed');
    return this.hold(channelId, token, max, leaseTtlMs, from);
  }

  /** One detached removal per channel the token may have landed in, capped, never retried. */
  private cleanupUncertain(targets: readonly AcquireTarget[], token: string): void {
    const ttlMs = this.ttl(); // a release that grants the slot keeps the key at least this long, as after an acquire
    const removals = targets.map((t) => this.store.release({ channelId: t.channelId, token, ttlMs }));
    const all = Promise.allSettled(removals).then((r) => r.every((x) => x.status === 'fulfilled'));
    void within(this.clock, all, this.cleanupTimeoutMs).then((cleaned) => {
      this.emit({
        type: 'acquire_uncertain',
        channelIds: targets.map((t) => t.channelId),
        token,
        cleaned: cleaned === true,
      });
    });
  }

  /**
   * Releases a live lease: it stops renewing at once, and the removal is retried with backoff until confirmed or the
   * lease has expired. Detached from any request cancellation. Undefined for a lease that is not live (released
   * already, lost, or released by close()).
   */
  release(lease: LeaseRef): LeaseRelease | undefined {
    const tracked = this.live.get(lease.token);
    if (!tracked) return undefined;
    const local = this.local.has(tracked.token);
    this.forget(tracked);
    // a local slot was never in the store: nothing to remove
    if (local) return { done: Promise.resolve(), held: false, withdraw: () => false };
    const first = this.store.releaseDeferred(tracked);
    let withdrawn = false;
    // One continuation on the common path (confirmed or withdrawn at once); the retries only on a failure.
    const settled = () => void this.releasing.delete(done);
    const done: Promise<void> = first.done.then(settled, (err: unknown) =>
      this.retry(tracked, err as Error).then(settled),
    );
    this.releasing.add(done);
    return {
      done,
      held: first.held,
      withdraw: () => {
        if (withdrawn || this.closed || !first.withdraw()) return false;
        withdrawn = true;
        this.track(tracked);
        this.claimDue(tracked); // (a claim that fell due while it was released)
        return true;
      },
    };
  }

  private track(lease: Lease): void {
    this.live.set(lease.token, lease);
    this.perChannel.set(lease.channelId, this.localCount(lease.channelId) + 1);
    this.schedule();
    this.scheduleFence(lease.expiresAt - fenceMarginMs(lease.ttlMs ?? this.ttl()));
  }

  private forget(lease: Lease): void {
    this.live.delete(lease.token);
    this.local.delete(lease.token);
    const n = this.localCount(lease.channelId) - 1;
    if (n > 0) this.perChannel.set(lease.channelId, n);
    else this.perChannel.delete(lease.channelId);
  }

  /** Retries a failed removal with backoff until one is confirmed or the lease has expired anyway. */
  private async retry(lease: Lease, firstError: Error): Promise<void> {
    let delay = 50;
    let error = firstError;
    for (let attempt = 1; ; attempt++) {
      if (this.clock.now() + delay >= lease.expiresAt) {
        this.emit({ type: 'release_abandoned', channelId: lease.channelId, token: lease.token, error });
        return;
      }
      this.emit({ type: 'release_retry', channelId: lease.channelId, token: lease.token, attempt, error });
      await this.clock.sleep(delay);
      delay = Math.min(delay * 2, 2000);
      try {
        await this.store.release(lease);
        return;
      } catch (err) {
        error = err as Error;
      }
    }
  }

  /**
   * Renews every live lease now (batched by the store). A lease the store no longer has is taken back into a free slot
   * (fencing on, reclaim on), else lost for good: dropped, reported, and its signal fires (fencing on).
   */
  async renewAll(): Promise<void> {
    if (this.renewing) return this.renewing;
    const leases = [...this.live.values()].filter((l) => !this.local.has(l.token));
    // only local slots: the renewal tick is when they try to get registered
    if (leases.length === 0) return this.registerLocal().catch(() => {});
    const ttl = this.ttl();
    const started = this.clock.now();
    this.renewing = (async () => {
      try {
        const lost = await this.store.renew(leases, ttl);
        this.renewFailed = false;
        this.onStore(true);
        const lostTokens = new Set(lost.map((l) => l.token));
        const missing: Lease[] = [];
        for (const lease of leases) {
          if (!lostTokens.has(lease.token)) this.renewed(lease, started, ttl);
          else if (this.live.get(lease.token) === lease) missing.push(lease);
        }
        if (missing.length > 0) await this.reclaim(missing, ttl);
      } catch (err) {
        this.renewFailed = true;
        this.onStore(false);
        this.emit({ type: 'renew_failed', leases: leases.length, error: err as Error });
      } finally {
        this.renewing = undefined;
        this.scheduleFence(this.earliestFence());
      }
    })();
    return this.renewing;
  }

  private renewed(lease: Lease, sentAt: number, ttl: number): void {
    lease.expiresAt = sentAt + ttl;
    lease.ttlMs = ttl;
  }

  /** Leases the store no longer had: taken back into free slots where fencing allows, else lost for good. */
  private async reclaim(missing: readonly Lease[], ttl: number): Promise<void> {
    const { enabled, reclaim } = this.fencing();
    if (!enabled || !reclaim) {
      for (const lease of missing) this.lose(lease, 'missing');
      return;
    }
    const started = this.clock.now();
    let notHeld: Set<string>;
    try {
      const refs: ReclaimRef[] = missing.map((l) => ({ channelId: l.channelId, token: l.token, max: l.max }));
      notHeld = new Set((await this.store.reclaim(refs, ttl, false)).map((l) => l.token));
    } catch {
      // Unconfirmed: the store does not hold them, so their slots may be taken by now.
      notHeld = new Set(missing.map((l) => l.token));
    }
    for (const lease of missing) {
      if (this.live.get(lease.token) !== lease) continue; // released meanwhile
      if (notHeld.has(lease.token)) this.lose(lease, 'missing');
      else {
        this.renewed(lease, started, ttl);
        this.emit({ type: 'lease_reclaimed', channelId: lease.channelId, token: lease.token });
      }
    }
  }

  /**
   * The store lost its data (a Redis restart) and admits nothing until this returns: every live lease is registered
   * again, whatever the load — they are requests in flight that held their slots when the store lost them.
   */
  private async restore(): Promise<void> {
    const leases = [...this.live.values()];
    if (leases.length === 0) return;
    const ttl = this.ttl();
    const started = this.clock.now();
    const refs: ReclaimRef[] = leases.map((l) => ({ channelId: l.channelId, token: l.token, max: l.max }));
    const notHeld = new Set((await this.store.reclaim(refs, ttl, true)).map((l) => l.token));
    for (const lease of leases) {
      if (this.live.get(lease.token) !== lease) continue;
      this.local.delete(lease.token); // registered now, local slots too
      if (notHeld.has(lease.token)) this.lose(lease, 'missing');
      else this.renewed(lease, started, ttl);
    }
    this.emit({ type: 'leases_restored', leases: leases.length - notHeld.size });
  }

  /** A lease lost for good: dropped, reported, and (fencing on) its signal fires so the work it guards ends. */
  private lose(lease: Lease, reason: LeaseLostReason): void {
    this.forget(lease);
    this.emit({ type: 'lease_lost', channelId: lease.channelId, token: lease.token, reason });
    if (this.fencing().enabled) this.fences.get(lease)?.abort(new LeaseLostError(lease.channelId, reason));
  }

  private earliestFence(): number {
    let at = Infinity;
    for (const lease of this.live.values()) {
      at = Math.min(at, lease.expiresAt - fenceMarginMs(lease.ttlMs ?? this.ttl()));
    }
    return at;
  }

  /** Keeps one timer for the earliest local expiry; it fences every lease past its own (no renewal confirmed). */
  private scheduleFence(at: number): void {
    if (this.closed || at === Infinity || (this.fenceTimer && this.fenceAt <= at)) return;
    this.fenceTimer?.cancel();
    this.fenceAt = at;
    this.fenceTimer = this.clock.setTimer(
      () => {
        this.fenceTimer = undefined;
        this.fenceAt = Infinity;
        if (this.fencing().enabled) {
          const now = this.clock.now();
          for (const lease of [...this.live.values()]) {
            if (lease.expiresAt - fenceMarginMs(lease.ttlMs ?? this.ttl()) > now) continue;
            if (this.keepExpired(lease)) {
              this.local.add(lease.token);
              lease.expiresAt = Infinity;
              this.emit({ type: 'lease_kept_local', channelId: lease.channelId, token: lease.token });
            } else this.lose(lease, 'expired');
          }
        }
        this.scheduleFence(this.earliestFence());
      },
      Math.max(1, at - this.clock.now()),
    );
  }

  /** Keeps one renewal timer running while leases are live; after a failed renewal the next one comes sooner. */
  private schedule(): void {
    if (this.timer || this.closed) return;
    const period = Math.max(1, Math.floor(this.ttl() / 3));
    this.timer = this.clock.setTimer(
      () => {
        this.timer = undefined;
        void this.renewAll().finally(() => {
          if (this.live.size > 0) this.schedule();
        });
      },
      this.renewFailed ? Math.min(period, 1000) : period,
    );
  }

  /**
   * Stops renewing and releases every live lease (graceful shutdown). Waits for the releases up to `timeoutMs`; past
   * that, releases still retrying (Redis down) are left to their lease TTL, the final backstop.
   */
  async close(timeoutMs = 5000): Promise<void> {
    this.closed = true;
    this.unsubscribe();
    this.timer?.cancel();
    this.timer = undefined;
    this.fenceTimer?.cancel();
    this.fenceTimer = undefined;
    for (const timer of this.claimTimers.values()) timer.cancel();
    this.claimTimers.clear();
    for (const lease of [...this.live.values()]) this.release(lease);
    await within(this.clock, Promise.allSettled([...this.releasing]), timeoutMs);
  }
}
