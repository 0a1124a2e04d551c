/**
 * One timer renews every live lease each `lease_ttl_ms / 3` (within a second after a failure), sooner when a lease
 * shorter than that (a grant not claimed yet) would otherwise reach its fence. A lease the store lost is taken back
 * into a free slot when fencing allows, else lost. After a Redis restart every lease is registered again, whatever
 * the load, before the store admits anything.
 */
import type { Clock, Timer } from '../../core/clock.js';
import type { SlotStore } from '../../store/store.js';
import { fenceMarginMs, refsOf, type Lease, type LeaseBook, type LeaseEvent } from './lease-book.js';

/** What a renewal's round trip may take, at the least, before its lease's fence. */
export const RENEW_BUDGET_MS = 1000;
/** After a failed renewal, a short lease's next try is at least this far off (the store may fail at once). */
const RETRY_FLOOR_MS = 100;

interface RenewalOptions {
  store: SlotStore;
  clock: Clock;
  book: LeaseBook;
  ttl: () => number;
  emit: (event: LeaseEvent) => void;
  /** Read at every loss: `reclaim` false never takes a lease back (fencing off: only reported). */
  fencing: () => { enabled: boolean; reclaim: boolean };
  /** Told of every renewal's fate: true when the store answered. */
  onStore: (answered: boolean) => void;
}

export class Renewal {
  private timer: Timer | undefined;
  private timerAt = Infinity;
  /** Live leases shorter than the lease TTL (grants held with no claim): each renewed before its fence. */
  private readonly short = new Set<Lease>();
  private renewing: Promise<void> | undefined;
  private registering: Promise<void> | undefined;
  /** After a failed renewal (or with local slots to register) the next tick comes within a second. */
  private soon = false;
  private closed = false;
  private readonly unsubscribe: () => void;

  constructor(private readonly opts: RenewalOptions) {
    this.unsubscribe = opts.store.onRestart(() => this.restore());
  }

  /** Keeps one timer running while leases are live, early enough for `lease` (just held) too. */
  schedule(lease?: Lease): void {
    if (this.closed) return;
    const { clock, book, ttl } = this.opts;
    if (lease && lease.ttlMs < ttl()) this.short.add(lease);
    const period = Math.max(1, Math.floor(ttl() / 3));
    let at = clock.now() + (this.soon || this.hasLocal() ? Math.min(period, 1000) : period);
    for (const l of this.short) {
      if (book.get(l.token) !== l || l.ttlMs >= ttl())
        this.short.delete(l); // released, or renewed since
      else at = Math.min(at, l.expiresAt - fenceMarginMs(l.ttlMs) - RENEW_BUDGET_MS);
    }
    if (this.timer && this.timerAt <= at) return;
    this.timer?.cancel();
    this.timerAt = at;
    this.timer = clock.setTimer(
      () => {
        this.timer = undefined;
        this.timerAt = Infinity;
        void this.renewAll().finally(() => {
          if (this.opts.book.size > 0) this.schedule();
        });
      },
      Math.max(this.soon ? RETRY_FLOOR_MS : 1, at - clock.now()),
    );
  }

  private hasLocal(): boolean {
    for (const lease of this.opts.book.all()) if (lease.local) return true;
    return false;
  }

  /** The next tick within a second. */
  hurry(): void {
    this.soon = true;
    this.timer?.cancel();
    this.timer = undefined;
    this.schedule();
  }

  /** Renews every live lease now, and tries to register the local slots. */
  renewAll(): Promise<void> {
    if (this.renewing) return this.renewing;
    const { store, clock, book, ttl, emit, onStore } = this.opts;
    const leases = [...book.all()].filter((l) => !l.local);
    const register = () => this.registerLocal().catch(() => {});
    if (leases.length === 0) return register();
    const ttlMs = ttl();
    const sentAt = clock.now();
    this.renewing = (async () => {
      try {
        const lost = new Set((await store.renew(leases, ttlMs)).map((l) => l.token));
        this.soon = false;
        onStore(true);
        for (const lease of leases) if (!lost.has(lease.token)) book.confirmed(lease, sentAt, ttlMs);
        const missing = leases.filter((l) => lost.has(l.token) && book.get(l.token) === l);
        if (missing.length > 0) await this.reclaim(missing, ttlMs);
        await register();
      } catch (err) {
        this.soon = true;
        onStore(false);
        emit({ type: 'renew_failed', leases: leases.length, error: err as Error });
      } finally {
        this.renewing = undefined;
        book.refence();
      }
    })();
    return this.renewing;
  }

  /** Leases the store no longer had: taken back into free slots where fencing allows, else lost for good. */
  private async reclaim(missing: readonly Lease[], ttlMs: number): Promise<void> {
    const { clock, book, emit } = this.opts;
    const { enabled, reclaim } = this.opts.fencing();
    if (!enabled || !reclaim) return missing.forEach((lease) => book.lose(lease, 'missing'));
    const sentAt = clock.now();
    let notHeld: Set<string>;
    try {
      notHeld = await this.notHeld(missing, ttlMs, false);
    } catch {
      notHeld = new Set(missing.map((l) => l.token)); // unconfirmed: their slots may be taken by now
    }
    this.settle(missing, notHeld, sentAt, ttlMs, (lease) =>
      emit({ type: 'lease_reclaimed', channelId: lease.channelId, token: lease.token }),
    );
  }

  /**
   * Registers the local slots in the store, into free slots only (one that no longer fits is lost: its request ends
   * rather than run past the max). Coalesced; rejects with the store's error.
   */
  registerLocal(): Promise<void> {
    const local = [...this.opts.book.all()].filter((l) => l.local);
    if (local.length === 0) return Promise.resolve();
    return (this.registering ??= this.register(local).finally(() => (this.registering = undefined)));
  }

  private async register(local: readonly Lease[]): Promise<void> {
    const { clock, book, ttl, emit, onStore } = this.opts;
    const ttlMs = ttl();
    const sentAt = clock.now();
    let notHeld: Set<string>;
    try {
      notHeld = await this.notHeld(local, ttlMs, false);
    } catch (err) {
      onStore(false);
      throw err;
    }
    onStore(true);
    let registered = 0;
    const stillLocal = local.filter((l) => l.local);
    this.settle(stillLocal, notHeld, sentAt, ttlMs, () => registered++);
    book.refence();
    emit({ type: 'local_registered', leases: registered });
  }

  /** The store lost its data: every live lease, local slots too, is registered again whatever the load. */
  private async restore(): Promise<void> {
    const { clock, book, ttl, emit } = this.opts;
    const leases = [...book.all()];
    if (leases.length === 0) return;
    const ttlMs = ttl();
    const sentAt = clock.now();
    const notHeld = await this.notHeld(leases, ttlMs, true);
    this.settle(leases, notHeld, sentAt, ttlMs);
    emit({ type: 'leases_restored', leases: leases.length - notHeld.size });
  }

  /** Puts the leases back in the store (into free slots only unless `force`): the tokens it did not take. */
  private async notHeld(leases: readonly Lease[], ttlMs: number, force: boolean): Promise<Set<string>> {
    return new Set((await this.opts.store.reclaim(refsOf(leases), ttlMs, force)).map((l) => l.token));
  }

  /** Applies a reclaim's answer to the leases still live: each is confirmed from `sentAt`, or lost. */
  private settle(
    leases: readonly Lease[],
    notHeld: ReadonlySet<string>,
    sentAt: number,
    ttlMs: number,
    onKept?: (lease: Lease) => void,
  ): void {
    const { book } = this.opts;
    for (const lease of leases) {
      if (book.get(lease.token) !== lease) continue; // released meanwhile
      if (notHeld.has(lease.token)) book.lose(lease, 'missing');
      else {
        book.confirmed(lease, sentAt, ttlMs);
        onKept?.(lease);
      }
    }
  }

  close(): void {
    this.closed = true;
    this.unsubscribe();
    this.timer?.cancel();
  }
}
