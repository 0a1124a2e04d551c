/**
 * RedisStore: slots, waiters and cooldowns in Redis, shared by every instance. One atomic script per acquire, one
 * command per release, batched renewal and batched read-only load reads. Every failure or time-out surfaces as a
 * StoreUnavailableError (the admission pass fails closed); nothing hangs past `timeoutMs` (plus the watchdog's
 * period, at most 100 ms).
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
  type SlotStore,
} from '../store.js';
import { KeyBuilder } from './keys.js';
import { SCRIPTS, defineScripts, parseAcquireReply, type ScriptClient } from './scripts.js';

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

  /** Counts commands sent on this store's client by its companions (settings sync). */
  countCommands(purpose: Purpose, n: number): void {
    this.counts[purpose] += n;
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
          if (err instanceof StoreUnavailableError) return reject(err);
          const message = err instanceof Error ? err.message : String(err);
          reject(
            new StoreUnavailableError(operation, `redis ${operation} failed: ${message}`, { cause: err }),
          );
        },
      );
    });
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

  async acquireFirst(targets: readonly AcquireTarget[], opts: AcquireOptions): Promise<AcquireReply[]> {
    if (targets.length === 0) return [];
    if (targets.length > this.maxChannelsPerAcquire) {
      throw new RangeError(
        `acquireFirst takes at most ${this.maxChannelsPerAcquire} channels per call on this store`,
      );
    }
    const keys: string[] = [];
    for (const t of targets) keys.push(this.keys.slots(t.channelId), this.keys.cooldown(t.channelId));
    const args = [opts.token, opts.leaseTtlMs, opts.checkCooldown ? 1 : 0, ...targets.map((t) => t.max)];
    const reply = await this.run('acquire', 'acquire', 1, () =>
      this.scripts[SCRIPTS.acquire.name](keys.length, ...keys, ...args),
    );
    return parseAcquireReply(reply);
  }

  async release(lease: LeaseRef): Promise<boolean> {
    const removed = await this.run('release', 'release', 1, () =>
      this.client.zrem(this.keys.slots(lease.channelId), lease.token),
    );
    return removed === 1;
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
  async readLoads(channelIds: readonly string[]): Promise<Map<string, ChannelLoad>> {
    const loads = new Map<string, ChannelLoad>();
    if (channelIds.length === 0) return loads;
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
