/**
 * `local_share`: while the store is unreachable each instance admits at most ⌊max ÷ instances⌋ per channel, so the
 * fleet stays within every max. It starts after a whole lease TTL of failure, when every lease of the fleet is fenced
 * or kept local; when the store answers, local slots go into free slots only (docs/redis.md).
 */
import type { Candidate } from '../../core/channel.js';
import type { Clock, Timer } from '../../core/clock.js';
import { StoreUnavailableError } from '../../core/errors.js';
import type { Settings } from '../../core/settings.js';
import type { StoreHealth } from '../../store/store.js';
import type { Prepared } from '../pass/candidates.js';
import type { Lease } from './lease-book.js';
import type { LeaseManager } from './lease-manager.js';

export type StoreFailureMode = 'fail_closed' | 'local_share';

/** After the store answers again, how long an instance that ran on its local share admits nothing. */
export const RECOVERY_MS = 2000;
/** The store's health is probed, so an instance that sends it nothing still knows. */
const PROBE_MS = 1000;

interface LocalShareDeps {
  mode: StoreFailureMode;
  clock: Clock;
  settings: () => Settings;
  /** The instances sharing the store, as this one last saw them; 0 when it saw none. */
  fleetSize: () => number;
  health: () => Promise<StoreHealth>;
  onReconnect: (listener: () => void) => () => void;
}

export class LocalShare {
  private downSince: number | undefined;
  private recoveringUntil = 0;
  private probe: Timer | undefined;
  private closed = false;
  private readonly unsubscribe: (() => void) | undefined;
  /** Admissions made on a local share since this engine started. */
  admitted = 0;

  constructor(private readonly deps: LocalShareDeps) {
    if (!this.enabled) return;
    this.schedule();
    // a reconnection means the store answers: no admission on a share from now on
    this.unsubscribe = deps.onReconnect(() => this.note(true));
  }

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

  /** A store call (acquire, renewal, probe) answered or failed. */
  readonly note = (answered: boolean): void => {
    if (!answered) {
      this.downSince ??= this.deps.clock.now();
      return;
    }
    if (this.active) this.recoveringUntil = this.deps.clock.now() + RECOVERY_MS;
    this.downSince = undefined;
  };

  share(max: number): number {
    const n = this.deps.fleetSize();
    return n > 0 ? Math.floor(max / n) : 0;
  }

  /** Whether the store has failed for a whole lease TTL (every lease of the fleet is fenced or local by now). */
  get active(): boolean {
    if (!this.enabled || this.downSince === undefined) return false;
    return this.deps.clock.now() - this.downSince >= this.deps.settings().lease_ttl_ms;
  }

  /** Whether a lease past its deadline unrenewed stays as a local slot: the store is down and the share has room. */
  readonly keepAsLocal = (lease: Lease, localOnChannel: number): boolean =>
    this.enabled && this.downSince !== undefined && localOnChannel < this.share(lease.max);

  /**
   * Runs an admission pass. With local_share: while active, admits on this instance's share without the store; for
   * RECOVERY_MS after it came back, admits nothing; otherwise registers the local slots first, then runs the pass.
   */
  async around<C extends Candidate, T>(
    leases: LeaseManager,
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
    const onShare = (err: Error): T => {
      for (const channel of prepared.bounded) {
        const max = channel.maxConcurrency!;
        if (leases.localCount(channel.id) >= this.share(max)) continue;
        this.admitted++;
        return local(channel, leases.holdLocal(channel.id, max));
      }
      throw err;
    };
    if (this.active) {
      return onShare(
        new StoreUnavailableError(
          'acquire',
          "the store is down and this instance's share of every candidate is in use",
        ),
      );
    }
    try {
      await leases.registerLocal();
      if (this.deps.clock.now() < this.recoveringUntil) throw recovering();
      return await pass();
    } catch (err) {
      if (!(err instanceof StoreUnavailableError) || !this.active) throw err;
      return onShare(err);
    }
  }
}
