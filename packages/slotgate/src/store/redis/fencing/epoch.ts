/**
 * Fencing a Redis that lost leases (restarted empty, or a promoted replica): without it the first instance to admit
 * could put up to 2 × max at the upstream. Each instance remembers the epoch it last verified and checks it again
 * (lua/checkEpoch-1.lua) after every lost connection, sending no admitting command until the check passes. A new
 * epoch means: re-register the live leases (restart listeners), then admit nothing until `graceMs` after its creation,
 * so the rest of the fleet registers its leases first. A `start` epoch (no older one known) holds nothing. On Cluster,
 * one epoch key per master (cluster-epochs.ts).
 */
import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../../../core/clock.js';
import { StoreUnavailableError } from '../../../core/errors.js';
import { randomInstanceId } from '../../../core/ids.js';
import type { Purpose, RestartListener } from '../../store.js';
import { deniedCommands, deniedMessage } from './access.js';
import { epochKeys } from './cluster-epochs.js';
import { isCluster } from '../connection/connection.js';
import type { Deadlines } from '../connection/deadlines.js';
import { topologyMismatch } from '../connection/nodes.js';
import { SCRIPTS } from '../scripts.js';

export interface EpochDeps {
  client: Redis | Cluster;
  key: string;
  /** A pub/sub channel under the prefix that no instance listens on (the access probe publishes to it). */
  probeChannel: string;
  clock: Clock;
  deadlines: Deadlines;
  count: (purpose: Purpose, n: number) => void;
  graceMs: number;
}

/** Between two checks of a Cluster that lost a node. */
const CHECK_RETRY_MS = 250;

export class Epoch {
  /** The epoch id last verified, per epoch key. */
  private readonly known = new Map<string, string>();
  private verified = false;
  /** Bumped by every lost connection: a check that spans one does not verify. */
  private losses = 0;
  private checking: Promise<void> | undefined;
  private readonly listeners = new Set<RestartListener>();
  restarts = 0;
  /** What the Redis user may not run that the scripts need, as the last check found; undefined once one passed. */
  private denied: string | undefined;

  /** `denied`, checked again first while it is set (so a fixed rule shows at once). */
  async deniedNow(): Promise<string | undefined> {
    if (this.denied !== undefined) await this.ensure().catch(() => {});
    return this.denied;
  }

  private readonly reconnectListeners = new Set<() => void>();
  private readonly onClose = (): void => this.invalidate();
  /** At once on reconnect: an instance holding leases but admitting nothing still registers them again. */
  private readonly onReady = (): void => {
    for (const listener of this.reconnectListeners) listener();
    void this.ensure().catch(() => {});
  };

  /**
   * On Cluster, each node's connection (a master can restart alone). ioredis may replace a node's connection, whose
   * 'close' then comes after it left the pool: so a check runs at once when a node comes back after a loss, when one
   * leaves, and when an address seen before joins again.
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

  private recheck(): void {
    this.invalidate();
    for (const listener of this.reconnectListeners) listener();
    this.checkUntilVerified();
  }

  private detached = false;

  /** A Cluster node that left comes back only with a slot map refresh, which an idle client delays: keep checking. */
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

  onReconnect(listener: () => void): () => void {
    this.reconnectListeners.add(listener);
    return () => void this.reconnectListeners.delete(listener);
  }

  /** Runs an admitting command once the epoch is verified; a failed check fails it as its own operation. */
  admitting<T>(operation: string, work: () => Promise<T>): Promise<T> {
    if (this.verified) return work();
    return this.ensure().then(work, (err: unknown) => {
      const cause = err as Error;
      throw new StoreUnavailableError(operation, `${operation} failed: ${cause.message}`, { cause });
    });
  }

  /**
   * Taken before an acquire or a registration is sent; its check throws if a connection dropped meanwhile, whatever
   * the command answered: ioredis sends a command in flight again on the next connection before any epoch check, so
   * it may have run on a Redis restarted empty before the holders restored their leases. The caller then gives back
   * what it took (docs/redis.md, "Uncertain operations") before anything reaches an upstream.
   */
  inFlight(operation: string): () => void {
    const losses = this.losses;
    return () => {
      if (this.losses === losses) return;
      const why =
        'the connection dropped while it was in flight (it may have run on a Redis not yet checked)';
      throw new StoreUnavailableError(operation, `${operation} failed: ${why}`);
    };
  }
  invalidate(): void {
    this.verified = false;
    this.losses++;
  }

  onRestart(listener: RestartListener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  /** Resolves once the epoch is verified (restored and the grace waited out after a restart). Coalesced. */
  ensure(): Promise<void> {
    if (this.verified) return Promise.resolve();
    return (this.checking ??= this.verify().finally(() => {
      this.checking = undefined;
    }));
  }

  /**
   * Checks until a check verifies. One that spanned a lost connection says nothing of the Redis there now (it may
   * have restarted empty again, during the grace): a caller that joined it, the admitting command or the reconnect
   * that would restore the leases, must not go on without another check.
   */
  private async verify(): Promise<void> {
    do await this.check();
    while (!this.verified && !this.detached);
  }

  private async check(): Promise<void> {
    const { client, key, deadlines, count, clock, graceMs } = this.deps;
    const losses = this.losses;
    const cluster = isCluster(client);
    const keys = cluster ? await epochKeys(client, key) : [key];
    count('acquire', 2 * keys.length);
    // each master's probe, then its check: a master that does not answer holds up no other's epoch
    const replies = await this.named(() =>
      deadlines.run('acquire', () =>
        Promise.all(
          keys.map(async (k) => {
            await this.probeAccess(k);
            return SCRIPTS.checkEpoch.call(
              client,
              [k],
              [randomInstanceId(), this.known.has(k) ? 'restart' : 'start', cluster ? '1' : '0'],
            );
          }),
        ),
      ),
    );
    this.denied = undefined;
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
   * An ACL rule too narrow fails the check, naming what is missing, before any admitting script runs into it (each
   * would fail on its own, deep in an acquire).
   */
  private async probeAccess(key: string): Promise<void> {
    const denied = await deniedCommands(this.deps.client, [key], this.deps.probeChannel);
    if (denied.length === 0) return;
    this.denied = deniedMessage(denied);
    throw new Error(this.denied);
  }

  /** A MOVED answer to a single node's check means a Cluster node: the failure says so instead. */
  private async named<T>(check: () => Promise<T>): Promise<T> {
    try {
      return await check();
    } catch (err) {
      const { client, clock } = this.deps;
      if (isCluster(client) || !/\bMOVED\b/.test((err as Error).message)) throw err;
      throw new Error((await topologyMismatch(client, clock, 1000)) ?? (err as Error).message, {
        cause: err,
      });
    }
  }

  /**
   * On Cluster one master may make its epoch while others still refuse (CLUSTERDOWN), so a new epoch has no creation
   * time until a check has reached every master: its grace starts here.
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
