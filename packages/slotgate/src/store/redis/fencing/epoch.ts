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
 * On Cluster every master holds an epoch key of its own (`<prefix>:v1:epoch:{<tag>}`, a tag whose hash slot the master
 * serves, cluster-epochs.ts), checked whenever one of the node connections comes back: a master that restarted empty
 * or was failed over to a replica has lost leases of its channels just like a single node.
 */
import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../../../core/clock.js';
import { StoreUnavailableError } from '../../../core/errors.js';
import { randomInstanceId } from '../../../core/ids.js';
import type { Purpose, RestartListener } from '../../store.js';
import { epochKeys } from './cluster-epochs.js';
import { isCluster } from '../connection/connection.js';
import type { Deadlines } from '../connection/deadlines.js';
import { SCRIPTS } from '../scripts.js';

export interface EpochDeps {
  client: Redis | Cluster;
  key: string;
  clock: Clock;
  deadlines: Deadlines;
  count: (purpose: Purpose, n: number) => void;
  graceMs: number;
}

/** Between two checks of a Cluster that lost a node. */
const CHECK_RETRY_MS = 250;

export class Epoch {
  /** The epoch id last verified, per epoch key (one key; on Cluster one per master). */
  private readonly known = new Map<string, string>();
  private verified = false;
  /** Bumped by every lost connection: a check that spans one does not count as verified. */
  private losses = 0;
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

  /**
   * On Cluster, each node's connection (a master can restart alone). ioredis may replace a node's connection rather
   * than reconnect it, and a replaced one's 'close' comes after it left the pool. So a check runs at once (its restore
   * must not wait for an admitting command) when a node connection comes back after a loss, when a node leaves, and
   * when an address seen before joins again; a node's first connection needs none (every check covers all masters).
   */
  private readonly followed = new Map<Redis, { close: () => void; ready: () => void }>();
  private readonly seen = new Set<string>();
  private readonly follow = (node: Redis): void => {
    let lost = false;
    const handlers = {
      close: () => {
        lost = true;
        this.onClose();
      },
      ready: () => {
        if (!lost) return;
        lost = false;
        this.recheck();
      },
    };
    this.followed.set(node, handlers);
    node.on('close', handlers.close);
    node.on('ready', handlers.ready);
    const address = `${node.options.host}:${node.options.port}`;
    if (this.seen.has(address)) this.recheck();
    this.seen.add(address);
  };
  private readonly unfollow = (node: Redis): void => {
    const handlers = this.followed.get(node);
    if (!handlers) return;
    this.followed.delete(node);
    node.off('close', handlers.close);
    node.off('ready', handlers.ready);
    this.recheck();
  };

  /** A Cluster node came back or went: tell the reconnect listeners, and check until a check passes. */
  private recheck(): void {
    this.invalidate();
    for (const listener of this.reconnectListeners) listener();
    this.checkUntilVerified();
  }

  private detached = false;

  /**
   * On Cluster, a node that left comes back only when the client refreshes its slot map, which an idle client does
   * not do soon: keep checking (each check reaches every master, connecting to it) until one passes.
   */
  private checkUntilVerified(): void {
    if (this.detached || this.verified) return;
    this.ensure().catch(() => this.deps.clock.sleep(CHECK_RETRY_MS).then(() => this.checkUntilVerified()));
  }

  constructor(private readonly deps: EpochDeps) {
    const { client } = deps;
    if (isCluster(client)) {
      client.on('+node', this.follow);
      client.on('-node', this.unfollow);
      for (const node of client.nodes()) this.follow(node);
    } else {
      client.on('close', this.onClose);
      client.on('ready', this.onReady);
    }
  }

  /** Stops following the client's connections (the store closes). */
  detach(): void {
    const { client } = this.deps;
    this.detached = true;
    for (const [node, handlers] of this.followed) {
      node.off('close', handlers.close);
      node.off('ready', handlers.ready);
    }
    this.followed.clear();
    client.off('+node', this.follow);
    client.off('-node', this.unfollow);
    client.off('close', this.onClose);
    client.off('ready', this.onReady);
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
    this.losses++;
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
    const losses = this.losses;
    const cluster = isCluster(client);
    const keys = cluster ? await epochKeys(client, key) : [key];
    count('acquire', keys.length);
    const replies = await deadlines.run('acquire', () =>
      Promise.all(
        keys.map((k) =>
          SCRIPTS.checkEpoch.call(
            client,
            [k],
            [randomInstanceId(), this.known.has(k) ? 'restart' : 'start', cluster ? '1' : '0'],
          ),
        ),
      ),
    );
    if (cluster) await this.startGraces(keys, replies);
    let changed = false;
    let first = true;
    let wait = 0;
    replies.forEach(({ value, now }, i) => {
      const [id, createdAt, kind] = value.split('|');
      const known = this.known.get(keys[i]!);
      if (id === known) return;
      changed = true;
      if (known !== undefined) first = false;
      if (kind === 'restart' || kind === 'failover') wait = Math.max(wait, Number(createdAt) + graceMs - now);
    });
    if (changed) {
      if (!first) this.restarts++;
      for (const listener of this.listeners) await listener({ first });
      replies.forEach(({ value }, i) => this.known.set(keys[i]!, value.split('|')[0]!));
      if (wait > 0) await clock.sleep(Math.min(wait, graceMs));
    }
    this.verified = losses === this.losses;
  }

  /**
   * On Cluster, a master can answer while the others refuse (a cluster coming back from an outage: the first master
   * up makes its epoch while the rest still reply CLUSTERDOWN), so an epoch made by a check is not yet seen by anyone
   * else. Its grace starts here, once this check has reached every master; until then it has no creation time.
   */
  private async startGraces(
    keys: readonly string[],
    replies: { value: string; now: number }[],
  ): Promise<void> {
    const { client, deadlines, count } = this.deps;
    const pending = keys.flatMap((_, i) => (replies[i]!.value.split('|')[1] === '' ? [i] : []));
    if (pending.length === 0) return;
    count('acquire', pending.length);
    const started = await deadlines.run('acquire', () =>
      Promise.all(
        pending.map((i) =>
          SCRIPTS.startEpochGrace.call(client, [keys[i]!], [replies[i]!.value.split('|')[0]!]),
        ),
      ),
    );
    started.forEach(({ value, now }, n) => {
      // gone again, or made again without a start: check once more
      if (value === undefined || value.split('|')[1] === '')
        throw new Error('the epoch changed during the check');
      replies[pending[n]!] = { ...replies[pending[n]!]!, value, now };
    });
  }
}
