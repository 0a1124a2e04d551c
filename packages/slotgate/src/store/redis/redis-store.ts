/** RedisStore: slots, waiters and cooldowns in Redis, shared by every instance; failures are StoreUnavailableError. */
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { systemClock, type Clock } from '../../core/clock.js';
import type { Presence, SharedSettings, SharedSettingsOptions } from '../fleet.js';
import type { ChannelPeak } from '../peak.js';
import {
  emptyCounts,
  type AcquireOptions,
  type AcquireReply,
  type AcquireTarget,
  type ChannelLoad,
  type EnqueueOptions,
  type EnqueueReply,
  type LeaseRef,
  type LimitRelease,
  type LoadExchange,
  type Listening,
  type PendingRelease,
  type Purpose,
  type QueueListener,
  type ReclaimRef,
  type RestartListener,
  type SlotStore,
  type StoreHealth,
  UNKNOWN_FLOOR,
  type WaiterRef,
  type WaiterState,
} from '../store.js';
import * as cooldowns from './cooldowns.js';
import { createClient, type ClusterConnection, type SentinelConnection } from './connection/connection.js';
import { deadlinesFor } from './connection/cluster-deadlines.js';
import type { Deadlines } from './connection/deadlines.js';
import * as nodes from './connection/nodes.js';
import { Epoch } from './fencing/epoch.js';
import { RedisPresence } from './fleet/presence.js';
import { RedisSharedSettings } from './fleet/shared-settings.js';
import { KeyBuilder } from './keys.js';
import { readHolders, readLimits, readLoads, readPeaks, type DirectReadDeps } from './loads/direct-reads.js';
import { RedisLoadSummary } from './loads/load-summary.js';
import { Members } from './queues/members.js';
import { GrantMessages } from './queues/messages.js';
import { QueueHints } from './queues/queue-hints.js';
import { RedisQueues } from './queues/queues.js';
import { releaseCall, type ReleaseDeps } from './queues/release-call.js';
import { SCRIPTS, defineScripts } from './scripts.js';
import { acquireCall } from './slots/acquire-call.js';
import { runLeaseBatches, type LeaseBatchDeps } from './slots/lease-batches.js';
import { turnsOf } from './slots/topology.js';
import type { TurnQueue } from './slots/turn.js';

export interface RedisStoreOptions {
  /** A redis:// (or rediss://) URL of one node; the store creates (and closes) its client. */
  url?: string;
  /** Or a Redis Cluster (docs/redis.md, "Redis Cluster"); the store creates its client. */
  cluster?: ClusterConnection;
  /** Or a Sentinel-managed primary (docs/redis.md, "Sentinel"); the store creates its client. */
  sentinel?: SentinelConnection;
  /** Or a client you own (auto-pipelining on Cluster); the store never closes it. */
  client?: Redis | Cluster;
  /** Keys are `<prefix>:v1:...`. @default 'slotgate' */
  prefix?: string;
  /** Longest time a store operation may take before it fails with StoreUnavailableError. @default 1000 */
  timeoutMs?: number;
  /** Extra ioredis options for a client the store creates (on Cluster, each node's). */
  redisOptions?: RedisOptions;
  /** @default the system clock */
  clock?: Clock;
  /** How long a slot granted to a waiter waits to be claimed before it passes on. @default 5000 */
  claimMs?: number;
  /** After Redis restarted empty, how long every instance admits nothing while the fleet re-registers. @default 3000 */
  restartGraceMs?: number;
  /** @internal For tests: above this many (instance, channel) counts, the summary is built here. */
  loadSummaryScriptBuildPairs?: number;
}

export { defaultRedisOptions } from './connection/connection.js';

const HEALTH_TIMEOUT_MS = 1000;

export class RedisStore implements SlotStore {
  readonly kind = 'redis' as const;
  readonly maxChannelsPerAcquire: number;
  /** @internal For white-box tests. */
  readonly keys: KeyBuilder;
  private readonly client: Redis | Cluster;
  private readonly owned: boolean;
  private readonly clock: Clock;
  private readonly counts = emptyCounts();
  private readonly deadlines: Deadlines;
  private readonly epoch: Epoch;
  private readonly hints = new QueueHints();
  private readonly members = new Members();
  private readonly messages: GrantMessages;
  private readonly queues: RedisQueues;
  private readonly turns: TurnQueue;
  private readonly summary: RedisLoadSummary;
  private readonly direct: DirectReadDeps;
  private readonly leaseDeps: LeaseBatchDeps;
  /** Adaptive limits as the releases' replies said. */
  private readonly limits = new Map<string, number>();
  private presenceImpl: RedisPresence | undefined;
  /** The connection's latest error since it was ready: a failed PING says less. */
  private socketError: string | undefined;

  constructor(options: RedisStoreOptions) {
    this.owned = !options.client;
    this.client = options.client ?? createClient(options);
    if (this.owned) {
      // not on a caller's client: a listener would silence ioredis's report of unhandled errors
      this.client.on('error', (err: Error) => (this.socketError = err.message));
      this.client.on('ready', () => (this.socketError = undefined));
    }
    const { client } = this;
    const keys = (this.keys = new KeyBuilder(options.prefix));
    const clock = (this.clock = options.clock ?? systemClock);
    const count = this.count;
    const claimMs = options.claimMs ?? 5000;
    const deadlines = (this.deadlines = deadlinesFor(client, clock, options.timeoutMs ?? 1000));
    defineScripts(client);
    const graceMs = options.restartGraceMs ?? 3000;
    const probeChannel = keys.grants();
    this.epoch = new Epoch({ client, key: keys.epoch(), probeChannel, clock, deadlines, count, graceMs });
    const { hints, members } = this;
    this.messages = new GrantMessages({ client, keys, hints, members });
    const queueDeps = { client, keys, deadlines, count, clock, claimMs, hints, members };
    this.queues = new RedisQueues({ ...queueDeps, inFlight: (operation) => this.epoch.inFlight(operation) });
    const release: ReleaseDeps = {
      keys,
      clock,
      claimMs,
      hints,
      members,
      messages: this.messages,
      giveBack: (channelId, token, ttl) =>
        void this.queues.leave({ channelId, token, max: 0, floor: UNKNOWN_FLOOR }, ttl).catch(() => {}),
      learned: (channelId, limit) => void this.limits.set(channelId, limit),
    };
    this.turns = turnsOf({
      client,
      deadlines,
      count,
      acquireCall: (requests) => acquireCall(keys, claimMs, requests),
      releaseCall: (lease) => releaseCall(release, lease),
    });
    this.maxChannelsPerAcquire = this.turns.maxChannelsPerAcquire;
    const { run } = this;
    this.summary = new RedisLoadSummary({
      client,
      keys,
      clock,
      run,
      scriptBuildPairs: options.loadSummaryScriptBuildPairs,
    });
    this.leaseDeps = { client, keys, run };
    this.direct = {
      client,
      keys,
      run: (n, work) => run('load_read', n, work),
      liveMs: () => members.liveMs(),
    };
  }

  /** Resolves once the store may admit (admitting calls wait for it by themselves). */
  ready(): Promise<void> {
    return this.epoch.ensure();
  }

  /** Redis restarts this store detected. */
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

  /** Runs one operation under the time bound. */
  private readonly run = <T>(purpose: Purpose, n: number, work: () => Promise<T>): Promise<T> => {
    this.counts[purpose] += n;
    return this.deadlines.run(purpose, work);
  };

  acquireFirst(targets: readonly AcquireTarget[], opts: AcquireOptions): Promise<AcquireReply[]> {
    if (targets.length === 0) return Promise.resolve([]);
    const most = this.maxChannelsPerAcquire;
    if (targets.length > most)
      return Promise.reject(new RangeError(`acquireFirst takes at most ${most} channels per call here`));
    return this.epoch.admitting('acquire', () => {
      const stamp = this.hints.stamp();
      const check = this.epoch.inFlight('acquire');
      return this.turns.acquire({ targets, opts }).then((replies) => {
        check();
        this.hints.noteAcquire(targets, replies, stamp);
        return replies;
      });
    });
  }

  release(lease: LeaseRef, leaseTtlMs: number, limit?: LimitRelease): PendingRelease {
    return this.turns.release({ channelId: lease.channelId, token: lease.token, ttlMs: leaseTtlMs, limit });
  }

  limitOf(channelId: string): number | undefined {
    return this.limits.get(channelId);
  }

  enqueue(waiter: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply> {
    return this.epoch.admitting('wait_register', () => this.queues.enqueue(waiter, options));
  }

  pollWaiter(waiter: WaiterRef, leaseTtlMs: number): Promise<WaiterState> {
    return this.epoch.admitting('wait_poll', () => this.queues.poll(waiter, leaseTtlMs));
  }

  leaveQueue(waiter: WaiterRef, leaseTtlMs: number): Promise<boolean> {
    return this.queues.leave(waiter, leaseTtlMs);
  }

  requeue(from: WaiterRef, to: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply> {
    return this.epoch.admitting('wait_register', () => this.queues.requeue(from, to, options));
  }

  listen(instanceId: string, listener: QueueListener): Listening {
    return this.messages.listen(instanceId, listener);
  }

  queued(channelId: string): boolean {
    return this.hints.has(channelId);
  }

  renew(leases: readonly LeaseRef[], leaseTtlMs: number): Promise<LeaseRef[]> {
    return runLeaseBatches(this.leaseDeps, SCRIPTS.renewLeases, [leaseTtlMs], leases);
  }

  reclaim(leases: readonly ReclaimRef[], leaseTtlMs: number, restore: boolean): Promise<LeaseRef[]> {
    const head = [leaseTtlMs, restore ? 1 : 0];
    const send = () => runLeaseBatches(this.leaseDeps, SCRIPTS.reclaimLeases, head, leases, (l) => [l.max]);
    // the epoch check itself runs the restore; a reclaim admits, so it waits for the check
    return restore ? send() : this.epoch.admitting('renew', send);
  }

  async readLoads(channelIds: readonly string[]): Promise<Map<string, ChannelLoad>> {
    if (channelIds.length === 0) return new Map();
    const loads = await readLoads(this.direct, channelIds);
    this.hints.noteLoads(loads);
    return loads;
  }

  async exchangeLoads(exchange: LoadExchange): Promise<Map<string, ChannelLoad>> {
    const loads = await this.summary.exchange(exchange);
    this.hints.noteLoads(loads);
    return loads;
  }

  readPeaks(channelIds: readonly string[]): Promise<Map<string, ChannelPeak>> {
    return readPeaks(this.direct, channelIds);
  }

  readHolders(channelIds: readonly string[]): Promise<Map<string, Map<string, number>>> {
    return readHolders(this.direct, channelIds);
  }

  readLimits(channelIds: readonly string[]): Promise<Map<string, number>> {
    return readLimits(this.direct, channelIds);
  }

  setCooldown(channelId: string, ms: number, reason: string): Promise<void> {
    return cooldowns.setCooldown(this.cooldownDeps, channelId, ms, reason);
  }

  clearCooldown(channelId: string): Promise<void> {
    return cooldowns.clearCooldown(this.cooldownDeps, channelId);
  }

  readCooldown(channelId: string): Promise<{ reason: string; remainingMs: number } | null> {
    return cooldowns.readCooldown(this.cooldownDeps, channelId);
  }

  private get cooldownDeps(): cooldowns.CooldownDeps {
    return { client: this.client, keys: this.keys, summary: this.summary, run: this.run };
  }

  get presence(): Presence {
    const { client, keys, count, clock } = this;
    return (this.presenceImpl ??= new RedisPresence({ client, keys, count, clock }));
  }

  sharedSettings<T extends object>(options: SharedSettingsOptions<T>): SharedSettings<T> {
    const { client, keys, count, clock } = this;
    return new RedisSharedSettings({ client, keys, count, clock }, options);
  }

  /** Unhealthy also while the Redis user may not run what the scripts need (checked again here until it may). */
  async health(): Promise<StoreHealth> {
    const health = await nodes.ping(this.client, this.clock, HEALTH_TIMEOUT_MS);
    const denied = health.healthy ? await this.epoch.deniedNow() : undefined;
    if (denied) return { ...health, healthy: false, error: denied };
    if (health.healthy || this.socketError === undefined || health.error === this.socketError) return health;
    return { ...health, error: this.socketError };
  }

  get topologyKind(): nodes.TopologyKind {
    return nodes.topologyKindOf(this.client);
  }

  /** A client of the wrong topology for the Redis it reaches (connection/nodes.ts); undefined when it matches. */
  topologyMismatch(): Promise<string | undefined> {
    return nodes.topologyMismatch(this.client, this.clock, HEALTH_TIMEOUT_MS);
  }

  /** Every master of a Cluster, or the one node, each PINGed. */
  nodes(): Promise<nodes.NodeHealth[]> {
    return nodes.nodeHealth(this.client, this.clock, HEALTH_TIMEOUT_MS);
  }

  async close(): Promise<void> {
    // a waiter that left just before holds no grant past the close (else it would wait out its claim deadline)
    await this.queues.leavesSent();
    this.epoch.detach();
    this.deadlines.close();
    if (!this.owned) return;
    try {
      await this.client.quit();
    } catch {
      // closed below
    }
    // also ends what quit() leaves open: a Sentinel client's subscriptions to the sentinels
    this.client.disconnect();
  }
}
