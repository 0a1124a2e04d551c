/**
 * Redis restarts and failovers. A Redis that comes back empty has forgotten every lease in flight, so the first
 * instance to admit on it would put up to 2 × max at the upstream; a replica promoted by a failover lacks the last
 * leases written (replication is asynchronous). The key `<prefix>:v1:epoch` holds
 * `<id>|<created at, Redis ms>|<kind>|<run_id of the redis-server that made or last confirmed it>`: every instance
 * remembers the epoch it last verified, and checks it again whenever its connection comes back (a restart always
 * drops connections; so does a failover). Until the check has passed, the store sends no admitting command (acquire,
 * enqueue, a waiter's poll, a reclaim). The check (lua/checkEpoch-1.lua) makes a new epoch when the key is missing,
 * and when the key was recorded by another redis-server process (kind `failover`). An instance that finds an epoch
 * other than its own re-registers its live leases (the restore listeners), then waits until `graceMs` after the
 * epoch was created, so the rest of the fleet (reconnecting on its own back-off) registers its leases before anyone
 * admits.
 *
 * A missing key makes an epoch of kind `restart` when the instance had verified an older one, else `start`: an
 * instance that knew no epoch before cannot tell a fresh Redis from a restarted one. `restart` and `failover` epochs
 * hold admissions for the grace period (an instance starting then waits out the rest of it too); a `start` epoch (a
 * fleet's first start, or a restart first seen by an instance that had just started) holds nothing.
 *
 * On Cluster the key lives on one master: a restart or failover of another master is not seen here, and its leases
 * come back through the renewals' reclaim (docs/redis.md, "Redis Cluster").
 */
import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../../core/clock.js';
import { StoreUnavailableError } from '../../core/errors.js';
import { randomInstanceId } from '../../core/ids.js';
import type { Purpose, RestartListener } from '../store.js';
import type { Deadlines } from './deadlines.js';
import { SCRIPTS } from './scripts.js';

export interface EpochDeps {
  client: Redis | Cluster;
  key: string;
  clock: Clock;
  deadlines: Deadlines;
  count: (purpose: Purpose, n: number) => void;
  graceMs: number;
}

export class Epoch {
  private known: string | undefined;
  private verified = false;
  /** Bumped by every lost connection: a check that spans one does not count as verified. */
  private generation = 0;
  private checking: Promise<void> | undefined;
  private readonly listeners = new Set<RestartListener>();
  /** Restarts detected since this store was created. */
  restarts = 0;

  private readonly reconnectListeners = new Set<() => void>();
  /** A restart drops every connection: verify again before the next admitting command. */
  private readonly onClose = (): void => this.invalidate();
  /** And at once on reconnect: an instance holding leases but admitting nothing still registers them again. */
  private readonly onReady = (): void => {
    for (const listener of this.reconnectListeners) listener();
    void this.ensure().catch(() => {});
  };

  constructor(private readonly deps: EpochDeps) {
    deps.client.on('close', this.onClose);
    deps.client.on('ready', this.onReady);
  }

  /** Stops following the client's connection (the store closes). */
  detach(): void {
    this.deps.client.off('close', this.onClose);
    this.deps.client.off('ready', this.onReady);
  }

  /** Calls the listener whenever the connection is established again after a loss. Returns the unsubscribe. */
  onReconnect(listener: () => void): () => void {
    this.reconnectListeners.add(listener);
    return () => void this.reconnectListeners.delete(listener);
  }

  /**
   * Runs an admitting command once the epoch is verified on this connection (at once in the steady state). A failed
   * check fails the command as its own operation.
   */
  admitting<T>(operation: string, work: () => Promise<T>): Promise<T> {
    if (this.verified) return work();
    return this.ensure().then(work, (err: unknown) => {
      const cause = err as Error;
      throw new StoreUnavailableError(operation, `${operation} failed: ${cause.message}`, { cause });
    });
  }

  /** Whether the epoch was verified on the current connection: admitting commands may go out. */
  get ok(): boolean {
    return this.verified;
  }

  /** The connection was lost: verify again before the next admitting command. */
  invalidate(): void {
    this.verified = false;
    this.generation++;
  }

  onRestart(listener: RestartListener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  /** Resolves once the epoch is verified (restoring and waiting out the grace when Redis restarted). Coalesced. */
  ensure(): Promise<void> {
    if (this.verified) return Promise.resolve();
    return (this.checking ??= this.check().finally(() => {
      this.checking = undefined;
    }));
  }

  private async check(): Promise<void> {
    const { client, key, deadlines, count, clock, graceMs } = this.deps;
    const generation = this.generation;
    const first = this.known === undefined;
    count('acquire', 1);
    const { value, now } = await deadlines.run('acquire', () =>
      SCRIPTS.checkEpoch.call(client, [key], [randomInstanceId(), first ? 'start' : 'restart']),
    );
    const [id, createdAt, kind] = value.split('|');
    if (id === this.known) {
      this.verified = generation === this.generation;
      return;
    }
    if (!first) this.restarts++;
    for (const listener of this.listeners) await listener({ first });
    this.known = id;
    const wait = kind === 'restart' || kind === 'failover' ? Number(createdAt) + graceMs - now : 0;
    if (wait > 0) await clock.sleep(Math.min(wait, graceMs));
    this.verified = generation === this.generation;
  }
}
