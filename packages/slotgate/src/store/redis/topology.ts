/**
 * What differs between one Redis node and a Redis Cluster, in one place. On a single node the commands of one
 * event-loop turn share a pipeline (TurnBatcher), one acquire call may try many channels, and a load read is one
 * pipeline. On Cluster every script call must stay within one hash slot, so an acquire tries one channel per call,
 * releases go out at once, renewals are grouped by channel, and load reads go out per key (ioredis's auto-pipelining
 * groups them per node; cross-slot pipelines are not allowed); and a command Redis redirected while slots move is
 * sent again (ClusterDeadlines).
 */
import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../../core/clock.js';
import { chunk, pushTo } from '../../core/collections.js';
import {
  BATCH_SIZE,
  sentRelease,
  type AcquireReply,
  type ChannelLoad,
  type LeaseRef,
  type PendingRelease,
  type Purpose,
} from '../store.js';
import type { AcquireCalls, AcquireRequest } from './acquire-call.js';
import { Deadlines } from './deadlines.js';
import type { KeyBuilder } from './keys.js';
import { SCRIPTS, type ReleaseSlotReply } from './scripts.js';
import { TurnBatcher } from './turn-batcher.js';

export interface TopologyDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  calls: AcquireCalls;
  deadlines: Deadlines;
  count: (purpose: Purpose, n: number) => void;
  /** The releaseSlot arguments after the token: claim deadline, lease TTL, grants prefix, channel id. */
  releaseArgs: (lease: LeaseRef) => (string | number)[];
  released: (lease: LeaseRef, reply: ReleaseSlotReply) => boolean;
}

/** One batch of a load read: the loads in order, and the Redis TIME when it was asked to carry one. */
export interface LoadBatch {
  loads: ChannelLoad[];
  time?: string[];
}

export interface Topology {
  /** Channels one acquire call may try. */
  readonly maxChannelsPerAcquire: number;
  acquire(request: AcquireRequest): Promise<AcquireReply[]>;
  /** `viaQueue`: the channel has waiters, so the slot goes to the oldest (releaseSlot) instead of a plain ZREM. */
  release(lease: LeaseRef, viaQueue: boolean): PendingRelease;
  /** Resolves once the commands queued in this turn have gone out (load reads go behind them). */
  flushed(): Promise<void> | undefined;
  /** Renewal batches of at most BATCH_SIZE leases, each one script call. */
  renewBatches<L extends LeaseRef>(leases: readonly L[]): L[][];
  /** Active, waiting and cooldown of up to BATCH_SIZE channels, live members counted from `min` (exclusive). */
  readLoadBatch(ids: readonly string[], min: string, withTime: boolean): Promise<LoadBatch>;
}

export function isCluster(client: Redis | Cluster): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}

/** The time bound of a store's operations; on Cluster it also sends redirected operations again. */
export function deadlinesFor(client: Redis | Cluster, clock: Clock, timeoutMs: number): Deadlines {
  return isCluster(client) ? new ClusterDeadlines(clock, timeoutMs, client) : new Deadlines(clock, timeoutMs);
}

export function topologyOf(deps: TopologyDeps): Topology {
  return isCluster(deps.client) ? new ClusterTopology(deps) : new SingleNode(deps);
}

export function toLoad(active: number, waiting: number, pttl: number): ChannelLoad {
  const coolingDown = pttl !== -2;
  return { active, waiting, coolingDown, cooldownRemainingMs: coolingDown ? pttl : 0 };
}

class SingleNode implements Topology {
  readonly maxChannelsPerAcquire = BATCH_SIZE;
  private readonly batcher: TurnBatcher;

  constructor(private readonly deps: TopologyDeps) {
    this.batcher = new TurnBatcher(deps);
  }

  acquire(request: AcquireRequest): Promise<AcquireReply[]> {
    return this.batcher.acquire(request);
  }

  release(lease: LeaseRef, viaQueue: boolean): PendingRelease {
    return this.batcher.release(lease, viaQueue);
  }

  flushed(): Promise<void> | undefined {
    return this.batcher.flushed();
  }

  renewBatches<L extends LeaseRef>(leases: readonly L[]): L[][] {
    return chunk(leases, BATCH_SIZE);
  }

  async readLoadBatch(ids: readonly string[], min: string, withTime: boolean): Promise<LoadBatch> {
    const { client, keys } = this.deps;
    const pipeline = client.pipeline();
    if (withTime) pipeline.time();
    for (const id of ids) {
      pipeline.zcount(keys.slots(id), min, '+inf');
      pipeline.zcount(keys.waiters(id), min, '+inf');
      pipeline.pttl(keys.cooldown(id));
    }
    const results = (await pipeline.exec()) ?? [];
    for (const [err] of results) if (err) throw err;
    const time = withTime ? (results.shift()![1] as string[]) : undefined;
    const values = results.map(([, value]) => Number(value));
    const loads = ids.map((_, i) => toLoad(values[3 * i]!, values[3 * i + 1]!, values[3 * i + 2]!));
    return time ? { loads, time } : { loads };
  }
}

class ClusterTopology implements Topology {
  readonly maxChannelsPerAcquire = 1;

  constructor(private readonly deps: TopologyDeps) {}

  acquire(request: AcquireRequest): Promise<AcquireReply[]> {
    const { client, calls, deadlines, count } = this.deps;
    const call = calls.build([request]);
    count('acquire', 1);
    return deadlines
      .run('acquire', () => SCRIPTS.acquireSlots.call(client, call.keys, call.args))
      .then((codes) => call.read(codes)[0]!);
  }

  release(lease: LeaseRef, viaQueue: boolean): PendingRelease {
    const { client, keys, deadlines, count, releaseArgs, released } = this.deps;
    const id = lease.channelId;
    count('release', 1);
    return sentRelease(
      deadlines.run('release', () =>
        viaQueue
          ? SCRIPTS.releaseSlot
              .call(
                client,
                [keys.slots(id), keys.waiters(id), keys.queue(id)],
                [lease.token, ...releaseArgs(lease)],
              )
              .then((reply) => released(lease, reply))
          : client.zrem(keys.slots(id), lease.token).then((removed) => removed === 1),
      ),
    );
  }

  flushed(): undefined {
    return undefined;
  }

  renewBatches<L extends LeaseRef>(leases: readonly L[]): L[][] {
    const byChannel = new Map<string, L[]>();
    for (const lease of leases) pushTo(byChannel, lease.channelId, lease);
    return [...byChannel.values()].flatMap((group) => chunk(group, BATCH_SIZE));
  }

  async readLoadBatch(ids: readonly string[], min: string, withTime: boolean): Promise<LoadBatch> {
    const { client, keys } = this.deps;
    // one Promise.all for TIME too: a TIME left pending when a load read fails would reject unhandled (and end the
    // process), as when ioredis refuses a whole auto-pipeline while the slot map changes
    const [loads, time] = await Promise.all([
      Promise.all(
        ids.map(async (id) => {
          const [active, waiting, pttl] = await Promise.all([
            client.zcount(keys.slots(id), min, '+inf'),
            client.zcount(keys.waiters(id), min, '+inf'),
            client.pttl(keys.cooldown(id)),
          ]);
          return toLoad(active, waiting, pttl);
        }),
      ),
      withTime ? client.time() : undefined,
    ]);
    return time ? { loads, time: time as unknown as string[] } : { loads };
  }
}

/**
 * Replies that mean Redis did not run the command (or ioredis never sent it): a redirection while a slot moves
 * (MOVED, ASK, TRYAGAIN: some of a script's keys on each master mid-migration), a slot not served, ioredis's own
 * redirections exhausted, and an auto-pipeline refused because the slot map changed between queueing and sending it.
 * ioredis follows these itself only when every command of a pipeline failed alike; in an auto-pipeline shared with
 * commands that ran, they reach the caller. And NOSCRIPT: ioredis counts a script as loaded on a connection once its
 * EVAL is written, so an EVAL that was redirected leaves the next EVALSHA there without the script, and a pipeline's
 * redirected command is sent again without ioredis's own EVAL fallback.
 */
const NOT_RUN =
  /^(?:MOVED|ASK|TRYAGAIN|CLUSTERDOWN|NOSCRIPT) |^Too many Cluster redirections|^All keys in the pipeline should belong to the same slots allocation group/;

/** Longest pause between two tries of a redirected operation. */
const MAX_RETRY_DELAY_MS = 100;

/**
 * The time bound, and on Cluster a redirected operation sent again until it runs or its time is up: a slot being
 * migrated answers every script over its channel's keys with TRYAGAIN until the migration ends, and the slot map is
 * stale until refreshed after a MOVED. Sending again is safe because a redirected command never ran; an operation
 * of several commands is sent again whole, so each one's other commands are reads or idempotent (load reads, renewal
 * batches, the epoch check).
 */
export class ClusterDeadlines extends Deadlines {
  constructor(
    private readonly time: Clock,
    timeoutMs: number,
    private readonly client: Cluster,
  ) {
    super(time, timeoutMs);
  }

  override run<T>(operation: string, work: () => Promise<T>): Promise<T> {
    const until = this.time.now() + this.timeoutMs;
    return super.run(operation, () => this.follow(work, until, 0));
  }

  private follow<T>(work: () => Promise<T>, until: number, attempt: number): Promise<T> {
    return work().catch(async (err: unknown) => {
      const message = err instanceof Error ? err.message : '';
      const delay = Math.min(5 * 2 ** attempt, MAX_RETRY_DELAY_MS);
      if (!NOT_RUN.test(message) || this.time.now() + delay >= until) throw err;
      // a MOVED, or an auto-pipeline refused: the slot map is stale (ioredis refreshes it only for a pipeline that
      // failed whole); the pause covers ASK and TRYAGAIN, which last until the slot's migration ends
      if (!message.startsWith('ASK') && !message.startsWith('TRYAGAIN')) {
        await new Promise<void>((resolve) => this.client.refreshSlotsCache(() => resolve()));
      }
      await this.time.sleep(delay);
      return this.follow(work, until, attempt + 1);
    });
  }
}
