/**
 * One pipeline per event-loop turn, on a single Redis node: the releases and the acquires queued during a turn go
 * out together at `setImmediate` — the releases first (one ZREM each: cheaper for Redis than a script call carrying
 * them; a releaseSlot call where the channel has waiters, so the slot goes to the oldest), then the acquires (one acquireSlots call per group of up to 200 channels tried). `setImmediate` runs once
 * this turn's timers and I/O callbacks are done, so every acquirer resumed by the same reply flight and every release
 * from the timers that fired are in the batch.
 *
 * A queued release can be withdrawn until the turn ends (the slot passes to another request of this instance with no
 * command at all), at most once per token and turn: a caller that gives a slot back and takes it again in a loop
 * would otherwise never yield to the event loop, every step a resolved promise.
 */
import type { Cluster, Redis } from 'ioredis';
import type { AcquireReply, LeaseRef, PendingRelease, Purpose } from '../store.js';
import {
  groupAcquires,
  MAX_CHANNELS_PER_CALL,
  type AcquireCalls,
  type AcquireRequest,
} from './acquire-call.js';
import { failure, type Deadlines } from './deadlines.js';
import type { KeyBuilder } from './keys.js';
import { SCRIPTS, type ReleaseSlotReply } from './scripts.js';

interface Queued<Req, Res> {
  request: Req;
  resolve: (value: Res) => void;
  reject: (err: unknown) => void;
}

interface QueuedRelease extends Queued<LeaseRef, boolean> {
  /** Taken back before the turn ended: not sent. */
  withdrawn: boolean;
  /** Sent through releaseSlot (the channel has waiters: the slot goes to the oldest) rather than a plain ZREM. */
  viaQueue: boolean;
}

export interface TurnBatcherDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  calls: AcquireCalls;
  deadlines: Deadlines;
  count: (purpose: Purpose, n: number) => void;
  /** The releaseSlot arguments after the token: claim deadline, lease TTL, grants prefix, channel id, instance. */
  releaseArgs: (lease: LeaseRef) => (string | number)[];
  /** Reads a releaseSlot reply (and hands over the grants it made to this instance's waiters). */
  released: (lease: LeaseRef, reply: ReleaseSlotReply) => boolean;
}

export class TurnBatcher {
  private acquires: Queued<AcquireRequest, AcquireReply[]>[] = [];
  private releases: QueuedRelease[] = [];
  private scheduled = false;
  /** Work waiting for this turn's pipeline to go out first. */
  private afterFlush: (() => void)[] = [];
  /** Tokens whose release was withdrawn in this turn. */
  private withdrawnThisTurn = new Set<string>();

  constructor(private readonly deps: TurnBatcherDeps) {}

  acquire(request: AcquireRequest): Promise<AcquireReply[]> {
    return new Promise((resolve, reject) => {
      this.acquires.push({ request, resolve, reject });
      this.schedule();
    });
  }

  release(lease: LeaseRef, viaQueue: boolean): PendingRelease {
    let queued!: QueuedRelease;
    const done = new Promise<boolean>((resolve, reject) => {
      queued = { request: lease, resolve, reject, withdrawn: false, viaQueue };
    });
    this.releases.push(queued);
    this.schedule();
    const turn = this.releases;
    return {
      done,
      held: true,
      withdraw: () => {
        // Still in this turn's queue (not flushed), not withdrawn before, and the token's first withdrawal this turn.
        if (queued.withdrawn || this.releases !== turn || this.withdrawnThisTurn.has(lease.token))
          return false;
        this.withdrawnThisTurn.add(lease.token);
        queued.withdrawn = true;
        queued.resolve(true);
        return true;
      },
    };
  }

  /** Resolves once this turn's pipeline has gone out; undefined when nothing is queued. */
  flushed(): Promise<void> | undefined {
    if (!this.scheduled) return undefined;
    return new Promise((resolve) => this.afterFlush.push(resolve));
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.flush);
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const releases = this.releases.filter((q) => !q.withdrawn);
    const acquires = this.acquires;
    const waiting = this.afterFlush;
    this.releases = [];
    this.acquires = [];
    this.afterFlush = [];
    this.withdrawnThisTurn = new Set();
    const { client, keys, calls, deadlines, count } = this.deps;
    const groups = groupAcquires(acquires, MAX_CHANNELS_PER_CALL);
    if (releases.length === 0 && groups.length === 0) {
      for (const resolve of waiting) resolve();
      return; // every release of the turn was withdrawn
    }
    const pipeline = client.pipeline();
    for (const { request: lease, viaQueue } of releases) {
      const id = lease.channelId;
      if (!viaQueue) pipeline.zrem(keys.slots(id), lease.token);
      else {
        const queueKeys = [keys.slots(id), keys.waiters(id), keys.queue(id)];
        SCRIPTS.releaseSlot.queue(pipeline, queueKeys, [lease.token, ...this.deps.releaseArgs(lease)]);
      }
    }
    const built = groups.map((group) => {
      const call = calls.build(group.map((q) => q.request));
      SCRIPTS.acquireSlots.queue(pipeline, call.keys, call.args);
      return call;
    });
    const sent = pipeline.exec() as Promise<[Error | null, unknown][]>;
    for (const resolve of waiting) resolve();
    // One time bound for the turn's releases, one per acquire call; each command counted for its purpose.
    if (releases.length > 0) {
      count('release', releases.length);
      deadlines
        .run('release', () => sent)
        .then(
          (results) =>
            releases.forEach((q, i) => {
              const [err, removed] = results[i]!;
              if (err) q.reject(failure('release', err));
              else if (q.viaQueue)
                q.resolve(this.deps.released(q.request, SCRIPTS.releaseSlot.reply(removed)));
              else q.resolve(Number(removed) === 1);
            }),
          (err: unknown) => releases.forEach((q) => q.reject(err)),
        );
    }
    groups.forEach((group, g) => {
      const at = releases.length + g;
      count('acquire', 1);
      deadlines
        .run('acquire', () =>
          sent.then((results) => {
            const [err, value] = results[at]!;
            if (err) throw err;
            return built[g]!.read(SCRIPTS.acquireSlots.reply(value));
          }),
        )
        .then(
          (replies) => group.forEach((q, i) => q.resolve(replies[i]!)),
          (err: unknown) => group.forEach((q) => q.reject(err)),
        );
    });
  };
}
