/**
 * Bounded degradation while the store is unreachable (`storeFailureMode: 'local_share'`). Each instance admits at
 * most ⌊max ÷ live instances⌋ per channel on its own, so a fleet that cannot reach Redis stays within every max:
 *
 * - it starts only once the store has failed for a whole lease TTL: by then every lease of the fleet has passed its
 *   local expiry unrenewed, so each is either fenced or kept as a local slot within its instance's share;
 * - a lease reaching its local expiry while the store is down is kept as a local slot if the share has room;
 * - the share counts every slot this instance holds on the channel (leases and local slots);
 * - with no instance seen (`fleetSize()` 0) the share is 0: nothing is admitted, as with `fail_closed`;
 * - the store's health is probed every second, so an instance that sends it nothing still knows;
 * - when the store answers again, the local slots are registered in it before anything else is admitted: each
 *   instance registers its own at its next store call (the probe, a renewal), into free slots only (one that does not
 *   fit is lost and fenced), and one that ran on a local share admits nothing for RECOVERY_MS, while the others
 *   register theirs. After a Redis restart the epoch check restores them whatever the load, before anyone admits.
 *
 * The bound holds when Redis is down for every instance. An instance cut off alone while the others still reach Redis
 * adds up to its share on top of the max they keep (docs/redis.md).
 */
import type { Candidate } from '../core/channel.js';
import type { Clock, Timer } from '../core/clock.js';
import { StoreUnavailableError } from '../core/errors.js';
import type { Settings } from '../core/settings.js';
import type { Lease, LeaseManager } from '../store/leases.js';
import type { StoreHealth } from '../store/store.js';
import type { Prepared } from './candidates.js';

export type StoreFailureMode = 'fail_closed' | 'local_share';

/** After the store answers again, how long an instance that ran on its local share admits nothing. */
export const RECOVERY_MS = 2000;
/** How often the store's health is probed with local_share. */
export const PROBE_MS = 1000;
/** How long one health check stands for the admissions on a share that follow it. */
export const FRESH_MS = 250;

export interface LocalShareDeps {
  mode: StoreFailureMode;
  clock: Clock;
  settings: () => Settings;
  /** The instances sharing the store, as this one last saw them (its heartbeats); 0 when it saw none. */
  fleetSize: () => number;
  leases: () => LeaseManager;
  /** The store's health check (one PING on Redis). */
  health: () => Promise<StoreHealth>;
  /** Subscribes to the store's reconnections (its connection established again after a loss). */
  onReconnect: (listener: () => void) => () => void;
}

export class LocalShare {
  private downSince: number | undefined;
  private recoveringUntil = 0;
  private probe: Timer | undefined;
  /** The health check that admissions on a share share (FRESH_MS). */
  private fresh: Promise<void> | undefined;
  private closed = false;
  /** Admissions made on a local share since this engine started. */
  admitted = 0;

  constructor(private readonly deps: LocalShareDeps) {
    // The store's health is probed every PROBE_MS (one PING) with local_share only: an instance that sends nothing
    // to the store (no lease, every queue looking full) still learns when the store went and when it came back.
    if (!this.enabled) return;
    this.schedule();
    // The store's connection is back: it answers, so no admission on a share from now on (the probe would see it up
    // to a probe period later, and a share admitted past a store that answers is not counted by the others).
    this.unsubscribe = deps.onReconnect(() => this.note(true));
  }

  private unsubscribe: (() => void) | undefined;

  get mode(): StoreFailureMode {
    return this.deps.mode;
  }

  get enabled(): boolean {
    return this.deps.mode === 'local_share';
  }

  private schedule(): void {
    if (this.closed) return;
    this.probe = this.deps.clock.setTimer(() => {
      void this.deps
        .health()
        .then((h) => this.note(h.healthy))
        .finally(() => this.schedule());
    }, PROBE_MS);
  }

  close(): void {
    this.closed = true;
    this.probe?.cancel();
    this.unsubscribe?.();
  }

  /** A store call answered or failed (LeaseManager's `onStore`, the health probe). */
  readonly note = (answered: boolean): void => {
    if (answered) {
      // Back after a local share: no admission for RECOVERY_MS, while every instance registers its local slots
      if (this.active) this.recoveringUntil = this.deps.clock.now() + RECOVERY_MS;
      this.downSince = undefined;
      if (this.enabled)
        void this.deps
          .leases()
          .registerLocal()
          .catch(() => {});
    } else this.downSince ??= this.deps.clock.now();
  };

  /** This instance's share of a channel's max. */
  share(max: number): number {
    const n = this.deps.fleetSize();
    return n > 0 ? Math.floor(max / n) : 0;
  }

  /** Whether the store has failed for a whole lease TTL: every lease of the fleet is fenced or local by now. */
  get active(): boolean {
    if (!this.enabled || this.downSince === undefined) return false;
    return this.deps.clock.now() - this.downSince >= this.deps.settings().lease_ttl_ms;
  }

  /** LeaseManager's `keepExpired`: a lease unrenewed past its local expiry stays as a local slot within the share. */
  readonly keep = (lease: Lease): boolean =>
    this.enabled &&
    this.downSince !== undefined &&
    this.deps.leases().localSlots(lease.channelId) < this.share(lease.max);

  /**
   * Runs an admission pass. With local_share: while the store is known down for a lease TTL, admits on this
   * instance's share without trying the store (the first candidate, in the pass's order, with room); for RECOVERY_MS
   * after it came back, admits nothing; otherwise registers any local slot first, then runs the pass, and a store
   * failure there still admits on the share when the share is active.
   */
  async around<C extends Candidate, T>(
    prepared: Prepared<C>,
    pass: () => Promise<T>,
    local: (channel: C, lease: Lease) => T,
  ): Promise<T> {
    if (!this.enabled) return pass();
    const recovering = () =>
      new StoreUnavailableError(
        'acquire',
        'the store is back: the local slots of every instance are being registered',
      );
    if (this.deps.clock.now() < this.recoveringUntil) throw recovering();
    const onShare = (err: Error) =>
      this.admitLocal(prepared, local, () => {
        throw err;
      });
    if (this.active) {
      return onShare(
        new StoreUnavailableError(
          'acquire',
          "the store is down and this instance's share of every candidate is in use",
        ),
      );
    }
    try {
      await this.deps.leases().registerLocal();
      if (this.deps.clock.now() < this.recoveringUntil) throw recovering(); // its registration just started it
      return await pass();
    } catch (err) {
      if (!(err instanceof StoreUnavailableError) || !this.active) throw err;
      return onShare(err);
    }
  }
  /** The first candidate, in the pass's order, with room in this instance's share. */
  private admitLocal<C extends Candidate, T>(
    prepared: Prepared<C>,
    local: (channel: C, lease: Lease) => T,
    none: () => never,
  ): T {
    const leases = this.deps.leases();
    for (const channel of prepared.bounded) {
      const max = channel.maxConcurrency!;
      if (leases.localCount(channel.id) >= this.share(max)) continue;
      this.admitted++;
      return local(channel, leases.holdLocal(channel.id, max));
    }
    return none();
  }
}
