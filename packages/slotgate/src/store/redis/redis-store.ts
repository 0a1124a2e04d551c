/**
 * RedisStore: slots, waiters and cooldowns in Redis, shared by every instance. On a single node the acquires and the
 * releases of one event-loop turn are coalesced: one acquire script call for all of the turn's acquires, written
 * in one pipeline behind the turn's release ZREMs (on Cluster: one script call per acquire, auto-pipelined).
 * Renewal and load reads are batched. Every failure or time-out surfaces as a StoreUnavailableError (the admission
 * pass fails closed); nothing hangs past `timeoutMs` (plus the watchdog's period, at most 100 ms).
 */
import { Redis } from 'ioredis';
import type { Cluster, RedisOptions } from 'ioredis';
import { StoreUnavailableError } from '../../core/errors.js';
import {
  BATCH_SIZE,
  chunk,
  emptyCounts,
  type AcquireOptions,
  type AcquireReply,
  type AcquireTarget,
  type ChannelLoad,
  type CooldownInfo,
  type LeaseRef,
  type Purpose,
  type Presence,
  type ReadLoadsOptions,
  type SharedSettings,
  type SharedSettingsOptions,
  type SlotStore,
  type StoreHealth,
} from '../store.js';
import { KeyBuilder } from './keys.js';
import { RedisPresence } from './presence.js';
import { RedisSharedSettings } from './shared-settings.js';
import { SCRIPTS, defineScripts, splitAcquireReply, type ScriptClient } from './scripts.js';

export interface RedisStoreOptions {
  /** A redis:// URL; the store creates (and closes) its own client. */
  url?: string;
  /** Or a client you own (ioredis Redis or Cluster); the store never closes it. */
  client?: Redis | Cluster;
  /** Key prefix, default `slotgate`. Keys are `<prefix>:v1:...`. */
  prefix?: string;
  /** Longest time any store operation may take before it fails with StoreUnavailableError. @default 1000 */
  timeoutMs?: number;
  /** Extra ioredis options for a client created from `url`. */
  redisOptions?: RedisOptions;
}

/** ioredis options that make a Redis outage fail fast instead of queueing commands forever. */
export function defaultRedisOptions(): RedisOptions {
  return {
    enableAutoPipelining: true,
    maxRetriesPerRequest: 1,
    retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2000),
    connectTimeout: 2000,
  };
}

interface PendingOp {
  deadline: number;
  operation: string;
  reject: (err: Error) => void;
}

interface AcquireRequest {
  targets: readonly AcquireTarget[];
  opts: AcquireOptions;
}

interface Queued<Req, Res> {
  request: Req;
  resolve: (value: Res) => void;
  reject: (err: unknown) => void;
  /** A release taken back before the turn ended (withdrawRelease): not sent. */
  withdrawn?: boolean;
}

/** A pipeline with the scripts on it (ioredis copies the client's script commands onto every pipeline). */
type ScriptPipeline = ScriptClient & { zrem(key: string, member: string): unknown };

/**
 * Splits a turn's acquires into script calls: requests with the same lease TTL and cooldown setting (normally all of
 * them) trying at most `max` channels in total per call (a lone request may exceed it).
 */
function acquireBatches(queue: readonly Queued<AcquireRequest, AcquireReply[]>[], max: number) {
  const open = new Map<string, { batch: Queued<AcquireRequest, AcquireReply[]>[]; weight: number }>();
  const batches: Queued<AcquireRequest, AcquireReply[]>[][] = [];
  for (const q of queue) {
    const group = `${q.request.opts.leaseTtlMs}:${q.request.opts.checkCooldown}`;
    let current = open.get(group);
    const w = q.request.targets.length;
    if (current && current.weight + w > max) current = undefined;
    if (!current) {
      current = { batch: [], weight: 0 };
      open.set(group, current);
      batches.push(current.batch);
    }
    current.batch.push(q);
    current.weight += w;
  }
  return batches;
}

/** Channels a coalesced acquire call may try in total (bounds the time one script holds Redis). */
const MAX_ACQUIRE_WEIGHT = 200;
/** Channels whose last key extension is remembered (cleared past this, like the key cache). */
const EXTENDED_LIMIT = 10_000;

/** Longest wait for a health check's PING. */
const HEALTH_TIMEOUT_MS = 1000;

/** How often readLoads refreshes its estimate of the Redis clock. */
const CLOCK_REFRESH_MS = 1000;

export class RedisStore implements SlotStore {
  readonly kind = 'redis' as const;
  readonly maxChannelsPerAcquire: number;
  readonly keys: KeyBuilder;
  readonly client: Redis | Cluster;
  private readonly scripts: ScriptClient;
  private readonly owned: boolean;
  private readonly timeoutMs: number;
  private readonly counts = emptyCounts();
  /** Redis clock minus local clock, from the last TIME read by readLoads. */
  private redisClockOffset: number | undefined;
  private clockReadAt = 0;
  private readonly pending = new Set<PendingOp>();
  private watchdog: NodeJS.Timeout | undefined;
  /** When this store last had each channel's slots key extended (performance.now()). */
  private readonly extendedAt = new Map<string, number>();
  /** Single node: the releases and the acquires of one event-loop turn, sent together by `flush`. */
  private readonly acquireQueue: Queued<AcquireRequest, AcquireReply[]>[] = [];
  private readonly releaseQueue: Queued<LeaseRef, boolean>[] = [];
  private flushScheduled = false;
  /** Load reads waiting for this turn's flush to go out first. */
  private readonly afterFlush: (() => void)[] = [];
  /** Tokens whose release was withdrawn in this turn (one handoff per slot and turn). */
  private readonly withdrawnThisTurn = new Set<string>();
  /** The queued releases by token, while they can still be withdrawn. */
  private readonly unsent = new Map<string, Queued<LeaseRef, boolean>>();
  private presenceImpl: RedisPresence | undefined;

  constructor(options: RedisStoreOptions) {
    if (!options.client && !options.url) throw new TypeError('RedisStore needs `url` or `client`');
    this.owned = !options.client;
    this.client =
      options.client ?? new Redis(options.url!, { ...defaultRedisOptions(), ...options.redisOptions });
    this.keys = new KeyBuilder(options.prefix);
    this.timeoutMs = options.timeoutMs ?? 1000;
    this.scripts = defineScripts(this.client);
    this.maxChannelsPerAcquire = this.isCluster ? 1 : BATCH_SIZE;
    if (this.owned) this.client.on('error', () => {}); // surfaced per operation as StoreUnavailableError
  }

  get isCluster(): boolean {
    return (this.client as { isCluster?: boolean }).isCluster === true;
  }

  get commands(): Readonly<Record<Purpose, number>> {
    return this.counts;
  }

  /** Counts commands sent on this store's client by its companions (shared settings, presence). */
  private readonly count = (purpose: Purpose, n: number): void => {
    this.counts[purpose] += n;
  };

  get presence(): Presence {
    return (this.presenceImpl ??= new RedisPresence({
      client: this.client,
      keys: this.keys,
      count: this.count,
    }));
  }

  sharedSettings<T extends object>(options: SharedSettingsOptions<T>): SharedSettings<T> {
    return new RedisSharedSettings({ client: this.client, keys: this.keys, count: this.count }, options);
  }

  /** PING under a one-second cap: a client call on a Redis that is down can take seconds to fail otherwise. */
  async health(): Promise<StoreHealth> {
    const t0 = performance.now();
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        this.client.ping(),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error('ping timed out')), HEALTH_TIMEOUT_MS);
        }),
      ]);
      return { healthy: true, latencyMs: Math.round((performance.now() - t0) * 100) / 100 };
    } catch (err) {
      return { healthy: false, error: (err as Error).message };
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Runs one store operation under the time bound, counting `n` commands, mapping every failure to the typed error.
   * One shared watchdog timer enforces the bound for every operation in flight (a timer per operation costs more
   * than the Redis command itself at thousands of admissions a second).
   */
  private run<T>(purpose: Purpose, operation: string, n: number, work: () => Promise<T>): Promise<T> {
    this.counts[purpose] += n;
    return new Promise<T>((resolve, reject) => {
      const op: PendingOp = { deadline: Date.now() + this.timeoutMs, operation, reject };
      this.pending.add(op);
      this.watch();
      let started: Promise<T>;
      try {
        started = work();
      } catch (err) {
        started = Promise.reject(err as Error);
      }
      started.then(
        (value) => {
          if (this.pending.delete(op)) resolve(value);
        },
        (err: unknown) => {
          if (!this.pending.delete(op)) return; // already timed out: a late failure is expected, not unhandled
          reject(err instanceof StoreUnavailableError ? err : this.failure(operation, err));
        },
      );
    });
  }

  /** A command's own error as the store reports it. */
  private failure(operation: string, err: unknown): StoreUnavailableError {
    const message = err instanceof Error ? err.message : String(err);
    return new StoreUnavailableError(operation, `redis ${operation} failed: ${message}`, { cause: err });
  }

  /** Starts the watchdog while operations are in flight; it stops by itself when none are. */
  private watch(): void {
    if (this.watchdog) return;
    const period = Math.max(5, Math.min(100, Math.floor(this.timeoutMs / 4)));
    this.watchdog = setInterval(() => {
      const now = Date.now();
      for (const op of this.pending) {
        if (op.deadline > now) continue;
        this.pending.delete(op);
        op.reject(
          new StoreUnavailableError(
            op.operation,
            `redis ${op.operation} timed out after ${this.timeoutMs} ms`,
          ),
        );
      }
      if (this.pending.size === 0) {
        clearInterval(this.watchdog);
        this.watchdog = undefined;
      }
    }, period);
    this.watchdog.unref();
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
    // (Not an async function: on the hot path every promise layer costs.)
    if (!this.isCluster) return this.enqueue(this.acquireQueue, { targets, opts });
    // Cluster: one channel per call, so every call stays within one hash slot; auto-pipelining batches per node.
    const call = this.acquireCall([{ targets, opts }]);
    return this.run('acquire', 'acquire', 1, () => this.scripts[SCRIPTS.acquire.name](...call.args)).then(
      (reply) => call.parse(reply)[0]!,
    );
  }

  release(lease: LeaseRef): Promise<boolean> {
    if (!this.isCluster) {
      return this.enqueue(this.releaseQueue, lease, (queued) => this.unsent.set(lease.token, queued));
    }
    return this.run('release', 'release', 1, () =>
      this.client.zrem(this.keys.slots(lease.channelId), lease.token),
    ).then((removed) => removed === 1);
  }

  withdrawRelease(lease: LeaseRef): boolean {
    const queued = this.unsent.get(lease.token);
    if (!queued || queued.request.channelId !== lease.channelId) return false;
    // Once per slot and turn: a caller that gives a slot back and takes it again in a loop would otherwise never
    // yield to the event loop (every step a resolved promise); the second time round it goes through Redis.
    if (this.withdrawnThisTurn.has(lease.token)) return false;
    this.withdrawnThisTurn.add(lease.token);
    this.unsent.delete(lease.token);
    queued.withdrawn = true;
    queued.resolve(true);
    return true;
  }

  private enqueue<Req, Res>(
    queue: Queued<Req, Res>[],
    request: Req,
    onQueued?: (queued: Queued<Req, Res>) => void,
  ): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      const queued = { request, resolve, reject };
      queue.push(queued);
      onQueued?.(queued);
      if (this.flushScheduled) return;
      this.flushScheduled = true;
      // setImmediate runs once this turn's timers and I/O callbacks are done: every acquirer resumed by the same
      // reply flight and every release from the timers that fired are in the batch.
      setImmediate(this.flush);
    });
  }

  /**
   * Sends the releases and the acquires of one event-loop turn in one pipeline, written at once: the releases first
   * (one ZREM each), then the acquires (one script call per 200 channels tried). Each command counts for its purpose
   * and runs under the time bound like any other.
   */
  private readonly flush = (): void => {
    this.flushScheduled = false;
    const releases = this.releaseQueue.splice(0).filter((q) => !q.withdrawn);
    this.unsent.clear();
    this.withdrawnThisTurn.clear();
    const acquires = this.acquireQueue.splice(0);
    const pipeline = this.client.pipeline();
    const commands = pipeline as unknown as ScriptPipeline;
    // Releases as plain ZREMs (one command each, spec §11): cheaper for Redis than a script call carrying them.
    for (const q of releases) commands.zrem(this.keys.slots(q.request.channelId), q.request.token);
    const batches = acquireBatches(acquires, MAX_ACQUIRE_WEIGHT);
    const parsers = batches.map((batch) => {
      const call = this.acquireCall(batch.map((q) => q.request));
      commands[SCRIPTS.acquire.name](...call.args);
      return call.parse;
    });
    const waiting = this.afterFlush.splice(0);
    if (releases.length === 0 && batches.length === 0) {
      for (const resolve of waiting) resolve();
      return; // every release of the turn was withdrawn
    }
    const sent = pipeline.exec() as Promise<[Error | null, unknown][]>;
    for (const resolve of waiting) resolve();
    // One time bound for the turn's releases, one per acquire call; each command counted for its purpose.
    if (releases.length > 0) {
      this.run('release', 'release', releases.length, () => sent).then(
        (results) =>
          releases.forEach((q, i) => {
            const [err, removed] = results[i]!;
            if (err) q.reject(this.failure('release', err));
            else q.resolve(Number(removed) === 1);
          }),
        (err: unknown) => releases.forEach((q) => q.reject(err)),
      );
    }
    batches.forEach((batch, b) => {
      const at = releases.length + b;
      this.run('acquire', 'acquire', 1, () =>
        sent.then((results) => {
          const [err, value] = results[at]!;
          if (err) throw err;
          return parsers[b]!(value);
        }),
      ).then(
        (results) => batch.forEach((q, i) => q.resolve(results[i]!)),
        (err: unknown) => batch.forEach((q) => q.reject(err)),
      );
    });
  };

  /**
   * The arguments of one acquire script call for a batch of requests, and the parser of its reply. A channel asks
   * for an extension of its key's expiry when this store has not had it extended for TTL/4 (see lua/acquire.lua):
   * one PTTL + PEXPIRE per key per TTL/4 instead of one PTTL per admission.
   */
  private acquireCall(requests: readonly AcquireRequest[]): {
    args: (string | number)[];
    parse: (reply: unknown) => AcquireReply[][];
  } {
    const sentAt = performance.now();
    const { leaseTtlMs, checkCooldown } = requests[0]!.opts;
    const index = new Map<string, number>();
    const keys: string[] = [];
    const channelArgs: (string | number)[] = [];
    const requestArgs: (string | number)[] = [];
    for (const { targets, opts } of requests) {
      requestArgs.push(opts.token);
      for (let i = 0; i < targets.length; i++) {
        const t = targets[i]!;
        let c = index.get(t.channelId);
        if (c === undefined) {
          index.set(t.channelId, (c = index.size + 1));
          keys.push(this.keys.slots(t.channelId), this.keys.cooldown(t.channelId));
          const extendedAt = this.extendedAt.get(t.channelId);
          const extend = extendedAt === undefined || sentAt - extendedAt >= leaseTtlMs / 4;
          channelArgs.push(t.max, extend ? 1 : 0);
        }
        requestArgs.push(i === targets.length - 1 ? -c : c);
      }
    }
    const args = [
      keys.length,
      ...keys,
      leaseTtlMs,
      checkCooldown ? 1 : 0,
      index.size,
      ...channelArgs,
      ...requestArgs,
    ];
    const parse = (reply: unknown): AcquireReply[][] => {
      const replies = splitAcquireReply(reply, requests);
      replies.forEach((codes, q) => {
        const last = codes.length - 1;
        if (codes[last] !== 'acquired') return;
        const channelId = requests[q]!.targets[last]!.channelId;
        if (channelArgs[2 * index.get(channelId)! - 1] !== 1) return;
        if (this.extendedAt.size >= EXTENDED_LIMIT) this.extendedAt.clear();
        this.extendedAt.set(channelId, sentAt);
      });
      return replies;
    };
    return { args, parse };
  }

  async renew(leases: readonly LeaseRef[], leaseTtlMs: number): Promise<LeaseRef[]> {
    if (leases.length === 0) return [];
    const batches = this.isCluster
      ? groupByChannel(leases).flatMap((g) => chunk(g, BATCH_SIZE))
      : chunk(leases, BATCH_SIZE);
    const lost = await this.run('renew', 'renew', batches.length, () =>
      Promise.all(batches.map((batch) => this.renewBatch(batch, leaseTtlMs))),
    );
    return lost.flat();
  }

  private async renewBatch(batch: readonly LeaseRef[], leaseTtlMs: number): Promise<LeaseRef[]> {
    const keyIndex = new Map<string, number>();
    const args: (string | number)[] = [leaseTtlMs];
    for (const lease of batch) {
      const key = this.keys.slots(lease.channelId);
      let index = keyIndex.get(key);
      if (index === undefined) keyIndex.set(key, (index = keyIndex.size + 1));
      args.push(index, lease.token);
    }
    const reply = (await this.scripts[SCRIPTS.renew.name](
      keyIndex.size,
      ...keyIndex.keys(),
      ...args,
    )) as number[];
    return reply.map((k) => batch[Number(k) - 1]!);
  }

  async registerWaiter(
    channelId: string,
    token: string,
    maxWaiting: number,
    ttlMs: number,
  ): Promise<boolean> {
    try {
      const reply = await this.run('wait', 'wait_register', 1, () =>
        this.scripts[SCRIPTS.registerWaiter.name](this.keys.waiters(channelId), token, maxWaiting, ttlMs),
      );
      return Number(reply) === 1;
    } catch (err) {
      // Uncertain, like an acquire: the script may still run after the time-out (it was on the wire, or in the
      // client's offline queue), and the caller, told it failed, will never unregister. One detached removal, sent
      // behind it on the same connection, undoes it; the registration's TTL is the backstop.
      this.unregisterWaiter(channelId, token).catch(() => {});
      throw err;
    }
  }

  async unregisterWaiter(channelId: string, token: string): Promise<void> {
    await this.run('wait', 'wait_unregister', 1, () => this.client.zrem(this.keys.waiters(channelId), token));
  }

  /**
   * One round trip: the live-member cut-off `now` comes from the Redis clock as last read (its offset to the local
   * clock); when that reading is a second old, TIME rides in the same round trip to refresh it — at most one clock
   * read per fetch. Only the very first read of a store spends an extra round trip on TIME.
   */
  async readLoads(channelIds: readonly string[], opts?: ReadLoadsOptions): Promise<Map<string, ChannelLoad>> {
    const loads = new Map<string, ChannelLoad>();
    if (channelIds.length === 0) return loads;
    // Behind this turn's acquires and releases, not ahead of them: the load view's correction counts them as sent.
    if (this.flushScheduled) await new Promise<void>((resolve) => this.afterFlush.push(resolve));
    const ids = [...new Set(channelIds)];
    let seeded = false;
    if (this.redisClockOffset === undefined) {
      const t = await this.run('load_read', 'load_read', 1, () => this.client.time());
      this.redisClockOffset = redisMs(t) - Date.now();
      this.clockReadAt = Date.now();
      seeded = true;
    }
    const min = `(${Date.now() + this.redisClockOffset}`;
    // The offset only decides whether a lease expiring this very second still counts (an ordering hint): refresh
    // it at most once a second, so many small fetch rounds do not each pay a TIME.
    const withTime = !seeded && Date.now() - this.clockReadAt >= CLOCK_REFRESH_MS;
    if (withTime) this.clockReadAt = Date.now();
    const batches = chunk(ids, BATCH_SIZE);
    opts?.onSent?.();
    const replies = await this.run('load_read', 'load_read', ids.length * 3 + (withTime ? 1 : 0), () =>
      Promise.all(batches.map((batch, i) => this.readBatch(batch, min, i === 0 && withTime))),
    );
    replies.flat().forEach((load, i) => loads.set(ids[i]!, load));
    return loads;
  }

  private async readBatch(batch: readonly string[], min: string, withTime: boolean): Promise<ChannelLoad[]> {
    if (this.isCluster) {
      // Cross-slot pipelines are not allowed on Cluster; auto-pipelining groups these per node instead.
      const time = withTime ? this.client.time() : undefined;
      const loads = await Promise.all(
        batch.map(async (id) => {
          const [active, waiting, pttl] = await Promise.all([
            this.client.zcount(this.keys.slots(id), min, '+inf'),
            this.client.zcount(this.keys.waiters(id), min, '+inf'),
            this.client.pttl(this.keys.cooldown(id)),
          ]);
          return toLoad(active, waiting, pttl);
        }),
      );
      if (time) this.redisClockOffset = redisMs(await time) - Date.now();
      return loads;
    }
    const pipeline = this.client.pipeline();
    if (withTime) pipeline.time();
    for (const id of batch) {
      pipeline.zcount(this.keys.slots(id), min, '+inf');
      pipeline.zcount(this.keys.waiters(id), min, '+inf');
      pipeline.pttl(this.keys.cooldown(id));
    }
    const results = (await pipeline.exec()) ?? [];
    for (const [err] of results) if (err) throw err;
    if (withTime) this.redisClockOffset = redisMs(results.shift()![1] as string[]) - Date.now();
    const values = results.map(([, value]) => Number(value));
    return batch.map((_, i) => toLoad(values[3 * i]!, values[3 * i + 1]!, values[3 * i + 2]!));
  }

  async setCooldown(channelId: string, ms: number, reason: string): Promise<void> {
    const px = Math.max(1, Math.round(ms));
    await this.run('cooldown', 'cooldown', 1, () =>
      this.client.set(this.keys.cooldown(channelId), reason, 'PX', px),
    );
  }

  async clearCooldown(channelId: string): Promise<void> {
    await this.run('cooldown', 'cooldown', 1, () => this.client.del(this.keys.cooldown(channelId)));
  }

  async readCooldown(channelId: string): Promise<CooldownInfo | null> {
    const key = this.keys.cooldown(channelId);
    const [reason, pttl] = await this.run('cooldown', 'cooldown', 2, () =>
      Promise.all([this.client.get(key), this.client.pttl(key)]),
    );
    if (reason === null || pttl === -2) return null;
    return { reason, remainingMs: pttl };
  }

  async close(): Promise<void> {
    clearInterval(this.watchdog);
    this.watchdog = undefined;
    if (!this.owned) return;
    try {
      await this.client.quit();
    } catch {
      this.client.disconnect();
    }
  }
}

function redisMs(time: readonly (string | number)[]): number {
  return Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000);
}

function toLoad(active: number, waiting: number, pttl: number): ChannelLoad {
  const coolingDown = pttl !== -2;
  return { active, waiting, coolingDown, cooldownRemainingMs: coolingDown ? pttl : 0 };
}

function groupByChannel(leases: readonly LeaseRef[]): LeaseRef[][] {
  const groups = new Map<string, LeaseRef[]>();
  for (const lease of leases) {
    const group = groups.get(lease.channelId);
    if (group) group.push(lease);
    else groups.set(lease.channelId, [lease]);
  }
  return [...groups.values()];
}
