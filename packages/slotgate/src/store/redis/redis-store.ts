/**
 * RedisStore: slots, waiters and cooldowns in Redis, shared by every instance. The mechanisms live in their own
 * modules: the per-turn pipeline (turn-batcher.ts), the time bound (deadlines.ts), the Redis clock (redis-time.ts),
 * the acquire call and its key-expiry hints (acquire-call.ts), the scripts (scripts.ts, lua/) and what differs on
 * Cluster (topology.ts). Every failure or time-out surfaces as a StoreUnavailableError (the admission pass fails
 * closed); nothing hangs past `timeoutMs` (plus the watchdog's period, at most 100 ms).
 */
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { createClient, isCluster, type ClusterConnection, type SentinelConnection } from './connection.js';
import { systemClock, type Clock } from '../../core/clock.js';
import { chunk } from '../../core/collections.js';
import {
  BATCH_SIZE,
  emptyCounts,
  type AcquireOptions,
  type AcquireReply,
  type AcquireTarget,
  type ChannelLoad,
  type CooldownInfo,
  type EnqueueOptions,
  type EnqueueReply,
  type LeaseRef,
  type LoadExchange,
  type LoadExchangeReply,
  type Listening,
  type PendingRelease,
  type Presence,
  type Purpose,
  type QueueListener,
  type ReadLoadsOptions,
  type ReclaimRef,
  type RestartListener,
  type SharedSettings,
  type SharedSettingsOptions,
  type SlotStore,
  type StoreHealth,
  type WaiterRef,
  type WaiterState,
} from '../store.js';
import { countByInstance } from '../holders.js';
import { AcquireCalls } from './acquire-call.js';
import type { Deadlines } from './deadlines.js';
import { Epoch } from './epoch.js';
import { KeyBuilder } from './keys.js';
import { nodeHealth, ping, topologyKindOf, type NodeHealth, type TopologyKind } from './nodes.js';
import { runLeaseBatch } from './lease-batches.js';
import { RedisPresence } from './presence.js';
import { QueueMarks } from './queue-marks.js';
import { DEFAULT_CLAIM_MS, RedisQueues } from './queues.js';
import { RedisClock } from './redis-time.js';
import { SCRIPTS, defineScripts } from './scripts.js';
import { RedisSharedSettings } from './shared-settings.js';
import { deadlinesFor } from './cluster-deadlines.js';
import { topologyOf, type Topology } from './topology.js';
import { RedisLoadSummary } from './load-summary.js';

export interface RedisStoreOptions {
  /** A redis:// (or rediss://) URL of one node; the store creates (and closes) its own client. */
  url?: string;
  /** Or a Redis Cluster: seed nodes and options (docs/redis.md, "Redis Cluster"); the store creates its client. */
  cluster?: ClusterConnection;
  /** Or a Sentinel-managed primary (docs/redis.md, "Sentinel"); the store creates its client. */
  sentinel?: SentinelConnection;
  /**
   * Or a client you own (ioredis Redis or Cluster); the store never closes it. A Cluster client should auto-pipeline
   * (`enableAutoPipelining: true`), or every call is a write of its own.
   */
  client?: Redis | Cluster;
  /** Key prefix. Keys are `<prefix>:v1:...`. @default 'slotgate' */
  prefix?: string;
  /** Longest time any store operation may take before it fails with StoreUnavailableError. @default 1000 */
  timeoutMs?: number;
  /** Extra ioredis options for a client the store creates (on Cluster, each node connection's). */
  redisOptions?: RedisOptions;
  /** Time and timers (the time bound, the Redis clock estimate, key-expiry hints). @default the system clock */
  clock?: Clock;
  /**
   * How long a slot granted to a waiter waits for the waiter's instance to claim it before it passes on: the time a
   * grant to an instance that died holds the slot. @default 5000
   */
  claimMs?: number;
  /**
   * After Redis restarted empty, how long (from the new epoch's creation) every instance admits nothing, so the
   * instances still reconnecting register their leases in flight first (epoch.ts). @default 3000
   */
  restartGraceMs?: number;
  /**
   * @internal For tests: above this many (instance, channel) counts in the load summary, this store builds a missing
   * snapshot from a plain HGETALL instead of in the script (load-summary.ts). @default 4000
   */
  loadSummaryScriptBuildPairs?: number;
}

export { defaultRedisOptions } from './connection.js';

/** Longest wait for a health check's PING. */
const HEALTH_TIMEOUT_MS = 1000;

export class RedisStore implements SlotStore {
  readonly kind = 'redis' as const;
  readonly maxChannelsPerAcquire: number;
  private readonly client: Redis | Cluster;
  /** @internal The key names, for white-box tests; not part of the API. */
  readonly keys: KeyBuilder;
  private readonly owned: boolean;
  private readonly clock: Clock;
  private readonly counts = emptyCounts();
  private readonly deadlines: Deadlines;
  private readonly redisClock: RedisClock;
  private readonly topology: Topology;
  private readonly queues: RedisQueues;
  private readonly marks: QueueMarks;
  private presenceImpl: RedisPresence | undefined;
  private readonly epoch: Epoch;
  private readonly summary: RedisLoadSummary;
  private seeding: Promise<void> | undefined;
  private readonly forgetClockBound = (): void => this.redisClock.forgetUpper();
  /**
   * Now on the Redis clock by the store's upper bound (RedisClock.upperNow), to score leases with: undefined on
   * Cluster (one estimate per store cannot vouch for every master's clock: the scripts read their own TIME there).
   */
  private readonly scoreNow = (): number | undefined =>
    isCluster(this.client) ? undefined : this.redisClock.upperNow();
  /** The connection's latest error since it was last ready (e.g. `connect ECONNREFUSED 127.0.0.1:6379`). */
  private socketError: string | undefined;

  constructor(options: RedisStoreOptions) {
    this.owned = !options.client;
    this.client = options.client ?? createClient(options);
    if (this.owned) {
      // Surfaced per operation as StoreUnavailableError; the latest socket error is kept for health(), where a failed
      // PING only says that ioredis gave up ("Reached the max retries per request limit", "Connection is closed").
      // (Not on a caller's client: a listener would silence ioredis's own report of its unhandled errors.)
      this.client.on('error', (err: Error) => (this.socketError = err.message));
      this.client.on('ready', () => (this.socketError = undefined));
    }
    this.keys = new KeyBuilder(options.prefix);
    this.clock = options.clock ?? systemClock;
    this.deadlines = deadlinesFor(this.client, this.clock, options.timeoutMs ?? 1000);
    this.redisClock = new RedisClock(this.clock);
    // a connection made again may reach another server (a failover) whose clock is not the one the bound was read on
    this.client.on('ready', this.forgetClockBound);
    defineScripts(this.client);
    const claimMs = options.claimMs ?? DEFAULT_CLAIM_MS;
    this.marks = new QueueMarks({
      clock: this.clock,
      scoreNow: () => this.scoreNow(),
      kick: (lease) => void this.topology.release(lease, true).done.catch(() => {}),
    });
    this.queues = new RedisQueues({
      client: this.client,
      keys: this.keys,
      deadlines: this.deadlines,
      count: this.count,
      claimMs,
      clock: this.clock,
      redisNow: () => (this.redisClock.unknown ? undefined : this.redisClock.now()),
      scoreNow: () => this.scoreNow(),
      marks: this.marks,
    });
    this.topology = topologyOf({
      client: this.client,
      keys: this.keys,
      calls: new AcquireCalls(this.keys, this.clock, claimMs, () => this.epoch.expiryGt, this.scoreNow),
      deadlines: this.deadlines,
      count: this.count,
      releaseArgs: this.queues.releaseArgs,
      released: this.queues.released,
      viaQueue: (channelId) => this.marks.releasesViaQueue(channelId),
      plainRelease: (lease) => this.marks.plainRelease(lease),
    });
    this.maxChannelsPerAcquire = this.topology.maxChannelsPerAcquire;
    this.summary = new RedisLoadSummary({
      client: this.client,
      keys: this.keys,
      clock: this.redisClock,
      seedClock: () => this.seedClock(),
      run: (purpose, n, work) => this.run(purpose, purpose, n, work),
      ...(options.loadSummaryScriptBuildPairs === undefined
        ? {}
        : { scriptBuildPairs: options.loadSummaryScriptBuildPairs }),
    });
    this.epoch = new Epoch({
      client: this.client,
      key: this.keys.epoch(),
      clock: this.clock,
      deadlines: this.deadlines,
      count: this.count,
      graceMs: options.restartGraceMs ?? 3000,
    });
  }

  /**
   * Resolves once the store may admit on its current connection: the epoch verified, and after a Redis restart the
   * leases restored and the grace waited out. Admitting calls do this by themselves; call it to do it ahead of them.
   */
  ready(): Promise<void> {
    return this.epoch.ensure();
  }

  /** Restarts of Redis this store detected (a new epoch found after it had verified one). */
  get restartsDetected(): number {
    return this.epoch.restarts;
  }

  onRestart(listener: RestartListener): () => void {
    return this.epoch.onRestart(listener);
  }

  onReconnect(listener: () => void): () => void {
    return this.epoch.onReconnect(listener);
  }

  get commands(): Readonly<Record<Purpose, number>> {
    return this.counts;
  }

  private readonly count = (purpose: Purpose, n: number): void => {
    this.counts[purpose] += n;
  };

  /** Runs one operation under the time bound, counting `n` commands for `purpose`. */
  private run<T>(purpose: Purpose, operation: string, n: number, work: () => Promise<T>): Promise<T> {
    this.counts[purpose] += n;
    return this.deadlines.run(operation, work);
  }

  acquireFirst(targets: readonly AcquireTarget[], opts: AcquireOptions): Promise<AcquireReply[]> {
    if (targets.length === 0) return Promise.resolve([]);
    if (targets.length > this.maxChannelsPerAcquire) {
      return Promise.reject(
        new RangeError(
          `acquireFirst takes at most ${this.maxChannelsPerAcquire} channels per call on this store`,
        ),
      );
    }
    const acquire = () => {
      const stamp = this.marks.stamp();
      return this.topology.acquire({ targets, opts }).then((replies) => {
        this.marks.noteAcquire(targets, replies, stamp);
        return replies;
      });
    };
    return this.epoch.admitting('acquire', acquire);
  }

  release(lease: LeaseRef): Promise<boolean> {
    return this.releaseDeferred(lease).done;
  }

  releaseDeferred(lease: LeaseRef): PendingRelease {
    return this.topology.release(lease, this.marks.has(lease.channelId));
  }

  enqueue(waiter: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply> {
    return this.epoch.admitting('wait_register', () => this.queues.enqueue(waiter, options));
  }

  /**
   * One ZADD XX CH (the slot must still be there), scored on the Redis clock as last read (its upper bound when there
   * is one); before any clock read, or when the ZADD changed nothing, the renewal script (which reads TIME itself).
   */
  async claim(lease: LeaseRef, leaseTtlMs: number): Promise<boolean> {
    if (this.redisClock.unknown) return (await this.renew([lease], leaseTtlMs)).length === 0;
    // the upper bound where there is one (single node): the claimed lease never ends before its holder's deadline,
    // which runs from before the claim was sent; else the estimate, which may lag Redis by a reply's latency
    const score = Math.ceil(this.scoreNow() ?? this.redisClock.now()) + leaseTtlMs;
    const changed = await this.run('renew', 'renew', 1, () =>
      this.client.zadd(this.keys.slots(lease.channelId), 'XX', 'CH', score, lease.token),
    );
    if (Number(changed) === 1) return true;
    // 0: gone, or (rarely) the same score as before: the renewal script tells which
    return (await this.renew([lease], leaseTtlMs)).length === 0;
  }

  pollWaiter(waiter: WaiterRef, leaseTtlMs: number): Promise<WaiterState> {
    return this.epoch.admitting('wait_poll', () => this.queues.poll(waiter, leaseTtlMs));
  }

  leaveQueue(waiter: WaiterRef, leaseTtlMs: number, sweep = true): Promise<boolean> {
    return this.queues.leave(waiter, leaseTtlMs, sweep);
  }

  requeue(from: WaiterRef, to: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply> {
    return this.queues.requeue(from, to, options);
  }

  listen(instanceId: string, listener: QueueListener): Listening {
    return this.queues.listen(instanceId, listener);
  }

  queued(channelId: string): boolean {
    return this.marks.has(channelId);
  }

  renew(leases: readonly LeaseRef[], leaseTtlMs: number): Promise<LeaseRef[]> {
    return this.leaseBatches(leases, (batch) =>
      runLeaseBatch(this.client, this.keys, SCRIPTS.renewLeases, [leaseTtlMs], batch),
    );
  }

  reclaim(leases: readonly ReclaimRef[], leaseTtlMs: number, restore: boolean): Promise<LeaseRef[]> {
    const send = () =>
      this.leaseBatches(leases, (batch) =>
        runLeaseBatch(
          this.client,
          this.keys,
          SCRIPTS.reclaimLeases,
          [leaseTtlMs, restore ? 1 : 0],
          batch,
          (lease) => [lease.max],
        ),
      );
    // A restore is what the epoch check runs before it lets anything through; a reclaim admits, so it waits for it.
    return restore ? send() : this.epoch.admitting('renew', send);
  }

  /** The leases in script batches (≤ 50; per channel on Cluster), one `renew` command each: those not held. */
  private async leaseBatches<L extends LeaseRef>(
    leases: readonly L[],
    send: (batch: readonly L[]) => Promise<L[]>,
  ): Promise<L[]> {
    if (leases.length === 0) return [];
    const batches = this.topology.renewBatches(leases);
    const lost = await this.run('renew', 'renew', batches.length, () => Promise.all(batches.map(send)));
    return lost.flat();
  }

  /**
   * One round trip, behind this turn's acquires and releases (the load view counts them as sent): live members are
   * counted from "now" on the Redis clock as last read; when that reading is a second old, TIME rides in the same
   * round trip to refresh it. Only the very first read of a store spends an extra round trip on TIME.
   */
  async readLoads(channelIds: readonly string[], opts?: ReadLoadsOptions): Promise<Map<string, ChannelLoad>> {
    const loads = new Map<string, ChannelLoad>();
    if (channelIds.length === 0) return loads;
    const flushed = this.topology.flushed();
    if (flushed) await flushed;
    const ids = [...new Set(channelIds)];
    const seeded = await this.seedClock();
    const now = this.redisClock.now();
    // live leases expire after now; live registrations arrived (µs) less than their lifetime ago
    const min = { slots: `(${now}`, queue: `(${(now - this.queues.liveMs()) * 1000}` };
    const withTime = !seeded && this.redisClock.claimRefresh();
    const batches = chunk(ids, BATCH_SIZE);
    opts?.onSent?.();
    const sentAt = this.redisClock.sending();
    const replies = await this.run('load_read', 'load_read', ids.length * 3 + (withTime ? 1 : 0), () =>
      Promise.all(batches.map((batch, i) => this.topology.readLoadBatch(batch, min, i === 0 && withTime))),
    );
    for (const { time } of replies) if (time) this.redisClock.learn(time, sentAt);
    replies.flatMap((r) => r.loads).forEach((load, i) => loads.set(ids[i]!, load));
    this.marks.noteLoads(loads);
    return loads;
  }

  /**
   * One GET of the shared snapshot, plus one HSET when it puts counts in, whatever the channel count (load-summary.ts;
   * a script call when the snapshot must be built). Queue news
   * from it only ever marks a queue: the summary's waiter counts lag, and a stale zero must not send a release past
   * a queue that formed since.
   */
  async exchangeLoads(exchange: LoadExchange): Promise<LoadExchangeReply> {
    const reply = await this.summary.exchange(exchange);
    this.marks.noteLoads(reply.loads);
    return reply;
  }

  /**
   * Before the store's first read of the Redis clock, one TIME (counted under load_read), shared by the calls that
   * need it meanwhile; true when one was read for this call.
   */
  private async seedClock(): Promise<boolean> {
    if (!this.redisClock.unknown) return false;
    const sentAt = this.redisClock.sending();
    this.seeding ??= this.run('load_read', 'load_read', 1, () => this.client.time())
      .then((time) => {
        this.redisClock.learn(time, sentAt);
        this.redisClock.claimRefresh();
      })
      .finally(() => (this.seeding = undefined));
    await this.seeding;
    return true;
  }

  /**
   * One ZRANGEBYSCORE per channel on its own slots key (on Cluster each goes to the channel's master), the live
   * members counted from "now" on the Redis clock as last read, as readLoads counts them.
   */
  async readHolders(channelIds: readonly string[]): Promise<Map<string, Map<string, number>>> {
    const ids = [...new Set(channelIds)];
    if (ids.length === 0) return new Map();
    await this.seedClock();
    const min = `(${this.redisClock.now()}`;
    const tokens = await this.run('load_read', 'load_read', ids.length, () =>
      Promise.all(ids.map((id) => this.client.zrangebyscore(this.keys.slots(id), min, '+inf'))),
    );
    return new Map(ids.map((id, i) => [id, countByInstance(tokens[i]!)]));
  }

  async setCooldown(channelId: string, ms: number, reason: string): Promise<void> {
    const px = Math.max(1, Math.round(ms));
    await this.run('cooldown', 'cooldown', 1, () =>
      this.client.set(this.keys.cooldown(channelId), reason, 'PX', px),
    );
    // for the load summary's readers; the cooldown key alone is what the acquire script checks
    await this.summary.noteCooldown(channelId, px);
  }

  async clearCooldown(channelId: string): Promise<void> {
    await this.run('cooldown', 'cooldown', 1, () => this.client.del(this.keys.cooldown(channelId)));
    await this.summary.clearCooldown(channelId);
  }

  async readCooldown(channelId: string): Promise<CooldownInfo | null> {
    const key = this.keys.cooldown(channelId);
    const [reason, pttl] = await this.run('cooldown', 'cooldown', 2, () =>
      Promise.all([this.client.get(key), this.client.pttl(key)]),
    );
    if (reason === null || pttl === -2) return null;
    return { reason, remainingMs: pttl };
  }

  get presence(): Presence {
    return (this.presenceImpl ??= new RedisPresence({
      client: this.client,
      keys: this.keys,
      count: this.count,
      clock: this.clock,
    }));
  }

  sharedSettings<T extends object>(options: SharedSettingsOptions<T>): SharedSettings<T> {
    return new RedisSharedSettings(
      { client: this.client, keys: this.keys, count: this.count, clock: this.clock },
      options,
    );
  }

  /** PING under a one-second cap (nodes.ts); when it fails, with the connection's socket error when there is one. */
  async health(): Promise<StoreHealth> {
    const health = await ping(this.client, this.clock, HEALTH_TIMEOUT_MS);
    if (health.healthy || this.socketError === undefined || health.error === this.socketError) return health;
    return { ...health, error: this.socketError };
  }

  /** How the store reaches Redis: one node, a Cluster, or a Sentinel-managed primary. */
  get topologyKind(): TopologyKind {
    return topologyKindOf(this.client);
  }

  /** Every master of a Cluster, or the one node of a single or Sentinel connection, each PINGed (nodes.ts). */
  nodes(): Promise<NodeHealth[]> {
    return nodeHealth(this.client, this.clock, HEALTH_TIMEOUT_MS);
  }

  async close(): Promise<void> {
    this.epoch.detach();
    this.client.off('ready', this.forgetClockBound);
    this.deadlines.close();
    if (!this.owned) return;
    try {
      await this.client.quit();
    } catch {
      // closed below
    }
    // also ends what quit() leaves open: a Sentinel client's failover-detector subscriptions to the sentinels
    this.client.disconnect();
  }
}
