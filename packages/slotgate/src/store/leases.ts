/**
 * The lease manager: owns this instance's leases on top of a SlotStore.
 * - tokens `<instanceId>:<seq>`;
 * - one renewal timer every `lease_ttl_ms / 3` that renews all live leases in batched store calls;
 * - release detached from the request's cancellation, retried with backoff until confirmed or the lease has expired;
 * - the uncertain-acquire rule: an acquire that errored after it may have been sent gets one detached removal of its
 *   token (500 ms cap, no retry) and surfaces as StoreUnavailableError. The lease TTL is the final backstop.
 */
import { systemClock, type Clock } from '../core/clock.js';
import { StoreUnavailableError } from '../core/errors.js';
import { randomInstanceId } from '../core/ids.js';
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
  private readonly releasing = new Map<string, Promise<void>>();
  /** Released leases whose removal the store has not sent yet, by channel: they can be handed off. */
  private readonly handoffs = new Map<string, Set<Lease>>();
  private timer: NodeJS.Timeout | undefined;
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
    return `${this.instanceId}:${++this.seq}`;
  }

  /** This instance's live leases on a channel (the in-memory fallback of the load view). */
  localCount(channelId: string): number {
    return this.perChannel.get(channelId) ?? 0;
  }

  get size(): number {
    return this.live.size;
  }

  leases(): IterableIterator<Lease> {
    return this.live.values();
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
    const now = this.clock.now();
    const lease: Lease = {
      channelId: targets[replies.length - 1]!.channelId,
      token,
      acquiredAt: now,
      max: targets[replies.length - 1]!.max,
      expiresAt: now + leaseTtlMs,
    };
    this.live.set(token, lease);
    this.perChannel.set(lease.channelId, this.localCount(lease.channelId) + 1);
    this.schedule();
    return { replies, lease };
  }

  /** One detached removal per channel the token may have landed in, capped, never retried. */
  private cleanupUncertain(targets: readonly AcquireTarget[], token: string): void {
    const removals = targets.map((t) => this.store.release({ channelId: t.channelId, token }));
    let timer: NodeJS.Timeout | undefined;
    const cap = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), this.cleanupTimeoutMs);
    });
    void Promise.race([
      Promise.allSettled(removals).then((r) => r.every((x) => x.status === 'fulfilled')),
      cap,
    ]).then((cleaned) => {
      clearTimeout(timer);
      this.emit({ type: 'acquire_uncertain', channelIds: targets.map((t) => t.channelId), token, cleaned });
    });
  }

  /**
   * Releases a lease exactly once: it stops renewing at once, and the removal is retried with backoff until
   * confirmed or the lease has expired. Detached from any request cancellation; safe to call twice.
   */
  release(lease: LeaseRef, handoff = true): Promise<void> {
    const pending = this.releasing.get(lease.token);
    if (pending) return pending;
    const tracked = this.live.get(lease.token);
    if (!tracked) return Promise.resolve();
    this.forget(tracked);
    const done: Promise<void> = this.releaseWithRetry(tracked).finally(() => {
      if (this.releasing.get(lease.token) !== done) return; // handed off (and maybe released again since)
      this.releasing.delete(lease.token);
      this.unpark(tracked);
    });
    this.releasing.set(lease.token, done);
    // On a coalescing store the removal waits for the end of the turn: until then the slot can be handed off.
    if (handoff && this.store.withdrawRelease && !this.closed) {
      let parked = this.handoffs.get(tracked.channelId);
      if (!parked) this.handoffs.set(tracked.channelId, (parked = new Set()));
      parked.add(tracked);
    }
    return done;
  }

  private unpark(lease: Lease): void {
    const parked = this.handoffs.get(lease.channelId);
    if (parked?.delete(lease) && parked.size === 0) this.handoffs.delete(lease.channelId);
  }

  /** Channels with a released slot that can still be handed off (its removal not sent yet). */
  handoffChannels(): IterableIterator<string> {
    return this.handoffs.keys();
  }

  get hasHandoffs(): boolean {
    return this.handoffs.size > 0;
  }

  /**
   * Hands a released slot on `channelId` to a new holder without a store command: the store takes back the removal
   * it had not sent, and the lease (same token, same expiry, renewed as before) is live again. Only for a slot whose
   * lease has at least half a TTL left by the local estimate and whose channel's max is not below the one it was
   * acquired under. Undefined when there is none.
   */
  takeOver(channelId: string, max: number): Lease | undefined {
    const parked = this.handoffs.get(channelId);
    if (!parked) return undefined;
    const now = this.clock.now();
    const healthy = this.ttl() / 2;
    let taken: Lease | undefined;
    for (const lease of parked) {
      if (lease.expiresAt - now < healthy || max < lease.max) continue;
      parked.delete(lease);
      if (this.store.withdrawRelease!(lease)) {
        taken = lease;
        break;
      }
    }
    if (parked.size === 0) this.handoffs.delete(channelId);
    if (!taken) return undefined;
    this.releasing.delete(taken.token);
    this.live.set(taken.token, taken);
    this.perChannel.set(channelId, this.localCount(channelId) + 1);
    this.schedule();
    return taken;
  }

  private forget(lease: Lease): void {
    this.live.delete(lease.token);
    const n = this.localCount(lease.channelId) - 1;
    if (n > 0) this.perChannel.set(lease.channelId, n);
    else this.perChannel.delete(lease.channelId);
  }

  private async releaseWithRetry(lease: Lease): Promise<void> {
    let delay = 50;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.store.release(lease);
        return;
      } catch (err) {
        const error = err as Error;
        if (this.clock.now() + delay >= lease.expiresAt) {
          this.emit({ type: 'release_abandoned', channelId: lease.channelId, token: lease.token, error });
          return;
        }
        this.emit({ type: 'release_retry', channelId: lease.channelId, token: lease.token, attempt, error });
        await this.clock.sleep(delay);
        delay = Math.min(delay * 2, 2000);
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
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        void this.renewAll().finally(() => {
          if (this.live.size > 0) this.schedule();
        });
      },
      Math.max(1, Math.floor(this.ttl() / 3)),
    );
    this.timer.unref();
  }

  /**
   * Stops renewing and releases every live lease (graceful shutdown). Waits for the releases up to `timeoutMs`; past
   * that, releases still retrying (Redis down) are left to their lease TTL, the final backstop.
   */
  async close(timeoutMs = 5000): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    const all = [...this.live.values()].map((lease) => this.release(lease));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...all, ...this.releasing.values()]),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, timeoutMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
  }
}
