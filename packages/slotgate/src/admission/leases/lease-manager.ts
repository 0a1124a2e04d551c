/** Taking slots (acquire, claim, adoption, local) and giving them back, detached and retried. */
import { systemClock, within, type Clock } from '../../core/clock.js';
import { StoreUnavailableError } from '../../core/errors.js';
import { randomInstanceId, tokenOf } from '../../core/ids.js';
import {
  UNKNOWN_FLOOR,
  type AcquireReply,
  type AcquireTarget,
  type LeaseRef,
  type LimitRelease,
  type SlotStore,
} from '../../store/store.js';
import { fenceMarginMs, LeaseBook, type Lease, type LeaseEvent } from './lease-book.js';
import { retryRelease } from './release-retry.js';
import { RENEW_BUDGET_MS, Renewal } from './renewal.js';

/** What a release that cannot know the channel's adaptive limit sends: the stored limit caps its grant. */
const UNKNOWN: LimitRelease = { floor: UNKNOWN_FLOOR };

export { fenceMarginMs, type Lease, type LeaseEvent } from './lease-book.js';

export interface LeaseManagerOptions {
  store: SlotStore;
  instanceId?: string;
  clock?: Clock;
  /** Read at every acquire and renewal, so a settings change applies at once. */
  leaseTtlMs: () => number;
  onEvent?: (event: LeaseEvent) => void;
  /** Read at every loss: `enabled` false only reports a lost lease; `reclaim` false never takes one back. */
  fencing?: () => { enabled: boolean; reclaim: boolean };
  /** Asked for a lease past its deadline, with the local slots on its channel: true keeps it local. */
  keepAsLocal?: (lease: Lease, localOnChannel: number) => boolean;
  /** Told of every acquire's and renewal's fate: true when the store answered. */
  onStore?: (answered: boolean) => void;
}

/** Cap on the cleanup removal after an uncertain acquire. */
const CLEANUP_TIMEOUT_MS = 500;

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
  readonly withdrawable: boolean;
  /** Takes the removal back while it waits: the lease is live again (same token, deadline and renewal). */
  withdraw(): boolean;
}

export class LeaseManager {
  readonly instanceId: string;
  private readonly store: SlotStore;
  private readonly clock: Clock;
  private readonly ttl: () => number;
  private readonly emit: (event: LeaseEvent) => void;
  private readonly onStore: (answered: boolean) => void;
  private readonly fencing: () => { enabled: boolean; reclaim: boolean };
  private readonly book: LeaseBook;
  private readonly renewal: Renewal;
  private seq = 0;
  private readonly releasing = new Set<Promise<void>>();
  private closed = false;

  constructor(options: LeaseManagerOptions) {
    const store = (this.store = options.store);
    const clock = (this.clock = options.clock ?? systemClock);
    const emit = (this.emit = (event: LeaseEvent) => options.onEvent?.(event));
    const onStore = (this.onStore = options.onStore ?? (() => {}));
    const fencing = (this.fencing = options.fencing ?? (() => ({ enabled: true, reclaim: true })));
    this.instanceId = options.instanceId ?? randomInstanceId();
    this.ttl = options.leaseTtlMs;
    this.book = new LeaseBook({
      clock,
      emit,
      fencingEnabled: () => fencing().enabled,
      keepAsLocal: options.keepAsLocal ?? (() => false),
      // A renewal sent before the loss (a pause, a stall) may still run and extend the token for a lease TTL with
      // nobody holding it: the removal, sent behind it on the same connection, takes it out again.
      onLost: (lease) => void store.release(lease, lease.ttlMs, UNKNOWN).done.catch(() => {}),
    });
    this.renewal = new Renewal({ store, clock, book: this.book, ttl: this.ttl, emit, fencing, onStore });
  }

  nextToken(share = ''): string {
    return tokenOf(this.instanceId, ++this.seq, share);
  }

  /** This instance's live leases on a channel, local slots included. */
  localCount(channelId: string): number {
    return this.book.count(channelId);
  }

  holds(channelId: string, token: string): boolean {
    return this.book.get(token)?.channelId === channelId;
  }

  get size(): number {
    return this.book.size;
  }

  leases(): IterableIterator<Lease> {
    return this.book.all();
  }

  get leaseTtlMs(): number {
    return this.ttl();
  }

  renewAll(): Promise<void> {
    return this.renewal.renewAll();
  }

  /** Registers the local slots into free slots only. Coalesced; rejects with the store's error. */
  registerLocal(): Promise<void> {
    return this.renewal.registerLocal();
  }

  /**
   * Tries the targets in one store call. A call that failed (it may have been sent) gets one detached removal of its
   * token (capped, never retried), and surfaces as StoreUnavailableError.
   */
  async acquireFirst(
    targets: readonly AcquireTarget[],
    checkCooldown: boolean,
    share = '',
  ): Promise<AcquireOutcome> {
    this.open();
    const token = this.nextToken(share);
    const leaseTtlMs = this.ttl();
    const sentAt = this.clock.now();
    let replies: AcquireReply[];
    try {
      replies = await this.store.acquireFirst(targets, { token, leaseTtlMs, checkCooldown });
      this.onStore(true);
    } catch (err) {
      this.onStore(false);
      this.cleanUp(targets, token, leaseTtlMs);
      if (err instanceof StoreUnavailableError) throw err;
      throw new StoreUnavailableError('acquire', `acquire failed: ${(err as Error).message}`, { cause: err });
    }
    if (replies[replies.length - 1] !== 'acquired') return { replies };
    const target = targets[replies.length - 1]!;
    return { replies, lease: this.hold(target.channelId, token, target.max, leaseTtlMs, sentAt) };
  }

  private cleanUp(targets: readonly AcquireTarget[], token: string, ttlMs: number): void {
    const removals = targets.map(
      (t) => this.store.release({ channelId: t.channelId, token }, ttlMs, UNKNOWN).done,
    );
    const all = Promise.allSettled(removals).then((r) => r.every((x) => x.status === 'fulfilled'));
    void within(this.clock, all, CLEANUP_TIMEOUT_MS).then((cleaned) => {
      const channelIds = targets.map((t) => t.channelId);
      this.emit({ type: 'acquire_uncertain', channelIds, token, cleaned: cleaned === true });
    });
  }

  /** Claims a slot granted to a waiter: one renewal makes it a full lease. Undefined when the grant was gone first. */
  async claim(channelId: string, token: string, max: number): Promise<Lease | undefined> {
    this.open();
    const leaseTtlMs = this.ttl();
    const sentAt = this.clock.now();
    const lost = await this.store.renew([{ channelId, token }], leaseTtlMs);
    return lost.length > 0 ? undefined : this.hold(channelId, token, max, leaseTtlMs, sentAt);
  }

  /**
   * Holds a slot granted to a waiter with no claim: the grant holds it `heldMs` from when it was made, which is after
   * `sentAt` (the registration's send), so the lease runs from `sentAt`; the renewal claims it in time for its fence.
   * Undefined, and the caller claims first, when too little is left or fencing is off (nothing would end the request
   * if the grant passed on).
   */
  holdGrant(
    channelId: string,
    token: string,
    max: number,
    heldMs: number,
    sentAt: number,
  ): Lease | undefined {
    this.open();
    const left = sentAt + heldMs - this.clock.now();
    if (!this.fencing().enabled || left < fenceMarginMs(heldMs) + RENEW_BUDGET_MS) return undefined;
    return this.hold(channelId, token, max, heldMs, sentAt);
  }

  /** Takes over a grant that is a full lease already (this instance's own release made it), from `since`. */
  adopt(channelId: string, token: string, max: number, ttlMs: number, since: number): Lease {
    this.open();
    return this.hold(channelId, token, max, ttlMs, since);
  }

  /** A slot held in this process only while the store is unreachable, registered once it answers. */
  holdLocal(channelId: string, max: number): Lease {
    this.open();
    const lease = this.hold(channelId, this.nextToken(), max, this.ttl(), Infinity);
    this.renewal.hurry();
    return lease;
  }

  private open(): void {
    if (this.closed) throw new StoreUnavailableError('acquire', 'the lease manager is closed');
  }

  private hold(channelId: string, token: string, max: number, ttlMs: number, sentAt: number): Lease {
    const lease = this.book.hold(channelId, token, max, ttlMs, sentAt);
    this.renewal.schedule(lease);
    return lease;
  }

  /**
   * Releases a live lease: it stops renewing at once, and its removal is retried, detached (a retry reports nothing to
   * the adaptive limit: the first try may have). Without `limit` (a close), the stored limit caps the grant. Undefined
   * if not live.
   */
  release(lease: LeaseRef, limit: LimitRelease = UNKNOWN): LeaseRelease | undefined {
    const tracked = this.book.get(lease.token);
    if (!tracked) return undefined;
    this.book.forget(tracked);
    // a local slot was never in the store
    if (tracked.local) return { done: Promise.resolve(), withdrawable: false, withdraw: () => false };
    const first = this.store.release(tracked, tracked.ttlMs, limit);
    const settled = () => void this.releasing.delete(done);
    const done: Promise<void> = first.done.then(settled, (err: unknown) =>
      retryRelease(this.clock, this.store, tracked, err as Error, this.emit).then(settled),
    );
    this.releasing.add(done);
    let withdrawn = false;
    return {
      done,
      withdrawable: first.withdrawable,
      withdraw: () => {
        if (withdrawn || this.closed || !first.withdraw()) return false;
        withdrawn = true;
        this.book.track(tracked);
        this.renewal.schedule();
        return true;
      },
    };
  }

  /** Stops renewing and releases every live lease, waiting up to `timeoutMs`; the rest are left to their TTL. */
  async close(timeoutMs = 5000): Promise<void> {
    this.closed = true;
    this.renewal.close();
    this.book.close();
    for (const lease of [...this.book.all()]) this.release(lease);
    await within(this.clock, Promise.allSettled([...this.releasing]), timeoutMs);
  }
}
