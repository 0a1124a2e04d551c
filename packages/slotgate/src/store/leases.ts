/**
 * The lease manager: owns this instance's leases on top of a SlotStore.
 * - tokens `<instanceId>:<seq>`;
 * - one renewal timer every `lease_ttl_ms / 3` that renews all live leases in batched store calls;
 * - release detached from the request's cancellation, retried with backoff until confirmed or the lease has expired;
 * - the uncertain-acquire rule: an acquire that errored after it may have been sent gets one detached removal of its
 *   token (500 ms cap, no retry) and surfaces as StoreUnavailableError. The lease TTL is the final backstop.
 */
import { systemClock, within, type Clock, type Timer } from '../core/clock.js';
import { StoreUnavailableError } from '../core/errors.js';
import { randomInstanceId, tokenOf } from '../core/ids.js';
import type { AcquireReply, AcquireTarget, LeaseRef, SlotStore } from './store.js';

export interface Lease extends LeaseRef {
  acquiredAt: number;
  /** The channel's max concurrency when the slot was acquired (a handoff never carries a slot past a lowered max). */
  max: number;
  /** Local estimate of the lease expiry: last successful renewal (or acquire) + TTL. */
  expiresAt: number;
}

export type LeaseEvent =
  | { type: 'lease_lost'; channelId: string; token: string }
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

  constructor(options: LeaseManagerOptions) {
    this.store = options.store;
    this.instanceId = options.instanceId ?? randomInstanceId();
    this.clock = options.clock ?? systemClock;
    this.ttl = options.leaseTtlMs;
    this.emit = options.onEvent ?? (() => {});
    this.cleanupTimeoutMs = options.cleanupTimeoutMs ?? 500;
  }

  nextToken(): string {
    return tokenOf(this.instanceId, ++this.seq);
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
  async acquireFirst(targets: readonly AcquireTarget[], checkCooldown: boolean): Promise<AcquireOutcome> {
    if (this.closed) throw new StoreUnavailableError('acquire', 'the lease manager is closed');
    const token = this.nextToken();
    const leaseTtlMs = this.ttl();
    let replies: AcquireReply[];
    try {
      replies = await this.store.acquireFirst(targets, { token, leaseTtlMs, checkCooldown });
    } catch (err) {
      this.cleanupUncertain(targets, token);
      if (err instanceof StoreUnavailableError) throw err;
      throw new StoreUnavailableError('acquire', `acquire failed: ${(err as Error).message}`, { cause: err });
    }
    if (replies[replies.length - 1] !== 'acquired') return { replies };
    const target = targets[replies.length - 1]!;
    return { replies, lease: this.hold(target.channelId, token, target.max, leaseTtlMs) };
  }

  /** A slot the store says this token holds, from now on a tracked lease expiring `leaseTtlMs` from now. */
  private hold(channelId: string, token: string, max: number, leaseTtlMs: number): Lease {
    const now = this.clock.now();
    const lease: Lease = {
      channelId,
      token,
      acquiredAt: now,
      max,
      expiresAt: now + leaseTtlMs,
      ttlMs: leaseTtlMs,
    };
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
    if (!(await this.store.claim({ channelId, token }, leaseTtlMs))) return undefined;
    return this.hold(channelId, token, max, leaseTtlMs);
  }

  /**
   * Takes over a grant that is a full lease already (the store granted it, with `leaseTtlMs`, in a release this
   * instance sent): no store call. It is renewed like any other lease from now on.
   */
  adopt(channelId: string, token: string, max: number, leaseTtlMs: number): Lease {
    if (this.closed) throw new StoreUnavailableError('acquire', 'the lease manager is closed');
    return this.hold(channelId, token, max, leaseTtlMs);
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
    this.forget(tracked);
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
        return true;
      },
    };
  }

  private track(lease: Lease): void {
    this.live.set(lease.token, lease);
    this.perChannel.set(lease.channelId, this.localCount(lease.channelId) + 1);
    this.schedule();
  }

  private forget(lease: Lease): void {
    this.live.delete(lease.token);
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

  /** Renews every live lease now (batched by the store); lost leases are dropped and reported. */
  async renewAll(): Promise<void> {
    if (this.renewing) return this.renewing;
    const leases = [...this.live.values()];
    if (leases.length === 0) return;
    const ttl = this.ttl();
    const started = this.clock.now();
    this.renewing = (async () => {
      try {
        const lost = await this.store.renew(leases, ttl);
        const lostTokens = new Set(lost.map((l) => l.token));
        for (const lease of leases) {
          if (lostTokens.has(lease.token)) {
            if (this.live.has(lease.token)) {
              this.forget(lease);
              this.emit({ type: 'lease_lost', channelId: lease.channelId, token: lease.token });
            }
          } else {
            lease.expiresAt = started + ttl;
            lease.ttlMs = ttl;
          }
        }
      } catch (err) {
        this.emit({ type: 'renew_failed', leases: leases.length, error: err as Error });
      } finally {
        this.renewing = undefined;
      }
    })();
    return this.renewing;
  }

  /** Keeps one renewal timer running while leases are live. */
  private schedule(): void {
    if (this.timer || this.closed) return;
    this.timer = this.clock.setTimer(
      () => {
        this.timer = undefined;
        void this.renewAll().finally(() => {
          if (this.live.size > 0) this.schedule();
        });
      },
      Math.max(1, Math.floor(this.ttl() / 3)),
    );
  }

  /**
   * Stops renewing and releases every live lease (graceful shutdown). Waits for the releases up to `timeoutMs`; past
   * that, releases still retrying (Redis down) are left to their lease TTL, the final backstop.
   */
  async close(timeoutMs = 5000): Promise<void> {
    this.closed = true;
    this.timer?.cancel();
    this.timer = undefined;
    for (const lease of [...this.live.values()]) this.release(lease);
    await within(this.clock, Promise.allSettled([...this.releasing]), timeoutMs);
  }
}
