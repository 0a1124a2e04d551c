/**
 * What differs between one Redis node and a Redis Cluster, in one place. On a single node the commands of one
 * event-loop turn share a pipeline (TurnBatcher), one acquire call may try many channels, and a load read is one
 * pipeline. On Cluster every script call must stay within one hash slot, so an acquire tries one channel per call,
 * renewals are grouped by channel, and load reads go out per key (ioredis's auto-pipelining groups them per node;
 * cross-slot pipelines are not allowed). Releases and acquires are still held to the end of the turn as on one node:
 * a held release can be withdrawn (the slot passes to another request of this instance with no command: without it,
 * every admission on Cluster cost an acquire and a release), and the turn's acquires of one channel share one call.
 * A command Redis redirected while slots move is sent again (cluster-deadlines.ts).
 */
import type { Cluster, Redis } from 'ioredis';
import { chunk, pushTo } from '../../core/collections.js';
import {
  BATCH_SIZE,
  type AcquireReply,
  type ChannelLoad,
  type LeaseRef,
  type PendingRelease,
  type Purpose,
} from '../store.js';
import {
  groupAcquires,
  MAX_CHANNELS_PER_CALL,
  type AcquireCalls,
  type AcquireRequest,
} from './acquire-call.js';
import { isCluster } from './connection.js';
import type { Deadlines } from './deadlines.js';
import type { KeyBuilder } from './keys.js';
import { SCRIPTS, type ReleaseSlotReply } from './scripts.js';
import { TurnBatcher } from './turn-batcher.js';
import { TurnQueue, type QueuedAcquire, type QueuedRelease, type Turn } from './turn-queue.js';

export interface TopologyDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  calls: AcquireCalls;
  deadlines: Deadlines;
  count: (purpose: Purpose, n: number) => void;
  /** The releaseSlot arguments after the token: claim deadline, lease TTL, grants prefix, channel id. */
  releaseArgs: (lease: LeaseRef) => (string | number)[];
  released: (lease: LeaseRef, reply: ReleaseSlotReply) => boolean;
  /**
   * Whether the channel counts as queued when a release goes out (decided then, not when it was asked for: a
   * registration sent meanwhile goes out ahead of it).
   */
  viaQueue: (channelId: string) => boolean;
  /**
   * A plain-ZREM release goes out; the callback returned is called when it is answered, `ok` false when it failed
   * (QueueMarks.plainRelease).
   */
  plainRelease: (lease: LeaseRef) => (ok: boolean) => void;
}

/** The exclusive lower bounds, as ZCOUNT takes them, of a live lease's expiry (ms) and a live registration's arrival (µs). */
export interface LoadBounds {
  slots: string;
  queue: string;
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
  /**
   * Active, waiting and cooldown of up to BATCH_SIZE channels, live members counted from `min` (exclusive): a live
   * lease's expiry and a live registration's arrival.
   */
  readLoadBatch(ids: readonly string[], min: LoadBounds, withTime: boolean): Promise<LoadBatch>;
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

  async readLoadBatch(ids: readonly string[], min: LoadBounds, withTime: boolean): Promise<LoadBatch> {
    const { client, keys } = this.deps;
    const pipeline = client.pipeline();
    if (withTime) pipeline.time();
    for (const id of ids) {
      pipeline.zcount(keys.slots(id), min.slots, '+inf');
      pipeline.zcount(keys.queue(id), min.queue, '+inf');
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

/**
 * One turn's commands go out at `setImmediate`, as TurnBatcher's pipeline does on one node, but each as a command of
 * its own — the releases first (a ZREM, or releaseSlot where the channel has waiters), then one acquireSlots call per
 * channel for the turn's acquires of that channel — which auto-pipelining writes once per node.
 */
class ClusterTopology extends TurnQueue implements Topology {
  readonly maxChannelsPerAcquire = 1;

  constructor(private readonly deps: TopologyDeps) {
    super();
  }

  protected send({ releases, acquires, waiting }: Turn): void {
    for (const q of releases) this.sendRelease(q);
    const byChannel = new Map<string, QueuedAcquire[]>();
    for (const q of acquires) pushTo(byChannel, q.request.targets[0]!.channelId, q);
    for (const queue of byChannel.values()) {
      for (const group of groupAcquires(queue, MAX_CHANNELS_PER_CALL)) this.sendAcquire(group);
    }
    // commands sent later (load reads) queue behind these on each node's auto-pipeline
    for (const resolve of waiting) resolve();
  }

  private sendAcquire(group: readonly QueuedAcquire[]): void {
    const { client, calls, deadlines, count } = this.deps;
    const call = calls.build(group.map((q) => q.request));
    count('acquire', 1);
    deadlines
      .run('acquire', () => SCRIPTS.acquireSlots.call(client, call.keys, call.args))
      .then((codes) => call.read(codes))
      .then(
        (replies) => group.forEach((q, i) => q.resolve(replies[i]!)),
        (err: unknown) => group.forEach((q) => q.reject(err)),
      );
  }

  private sendRelease(q: QueuedRelease): void {
    const { client, keys, deadlines, count, releaseArgs, released, viaQueue, plainRelease } = this.deps;
    const lease = q.request;
    const id = lease.channelId;
    count('release', 1);
    if (q.viaQueue || viaQueue(id)) {
      deadlines
        .run('release', () =>
          SCRIPTS.releaseSlot
            .call(client, [keys.slots(id), keys.queue(id)], [lease.token, ...releaseArgs(lease)])
            .then((reply) => released(lease, reply)),
        )
        .then(q.resolve, q.reject);
      return;
    }
    const answered = plainRelease(lease);
    // answered when the run settles: a command Redis redirected is sent again (cluster-deadlines.ts)
    deadlines
      .run('release', () => client.zrem(keys.slots(id), lease.token).then((removed) => removed === 1))
      .then(
        (removed) => {
          answered(true);
          q.resolve(removed);
        },
        (err: unknown) => {
          answered(false);
          q.reject(err);
        },
      );
  }

  renewBatches<L extends LeaseRef>(leases: readonly L[]): L[][] {
    const byChannel = new Map<string, L[]>();
    for (const lease of leases) pushTo(byChannel, lease.channelId, lease);
    return [...byChannel.values()].flatMap((group) => chunk(group, BATCH_SIZE));
  }

  async readLoadBatch(ids: readonly string[], min: LoadBounds, withTime: boolean): Promise<LoadBatch> {
    const { client, keys } = this.deps;
    // one Promise.all for TIME too: a TIME left pending when a load read fails would reject unhandled (and end the
    // process), as when ioredis refuses a whole auto-pipeline while the slot map changes
    const [loads, time] = await Promise.all([
      Promise.all(
        ids.map(async (id) => {
          const [active, waiting, pttl] = await Promise.all([
            client.zcount(keys.slots(id), min.slots, '+inf'),
            client.zcount(keys.queue(id), min.queue, '+inf'),
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
