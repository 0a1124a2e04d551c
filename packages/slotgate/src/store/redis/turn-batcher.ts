/**
 * One pipeline per event-loop turn, on a single Redis node (turn-queue.ts queues the turn and its withdrawable
 * releases): the releases first (one ZREM each: cheaper for Redis than a script call carrying them; a releaseSlot
 * call where the channel has waiters, so the slot goes to the oldest), then the acquires (one acquireSlots call per
 * group of up to 200 channels tried).
 */
import type { Cluster, Redis } from 'ioredis';
import type { LeaseRef, Purpose } from '../store.js';
import { groupAcquires, MAX_CHANNELS_PER_CALL, type AcquireCalls } from './acquire-call.js';
import { failure, type Deadlines } from './deadlines.js';
import type { KeyBuilder } from './keys.js';
import { SCRIPTS, type ReleaseSlotReply } from './scripts.js';
import { TurnQueue, type Turn } from './turn-queue.js';

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
  /** Whether the channel counts as queued now, when the turn goes out (topology.ts). */
  viaQueue: (channelId: string) => boolean;
  /** A plain-ZREM release goes out; the callback returned is called when it is answered. */
  plainRelease: (lease: LeaseRef) => (ok: boolean) => void;
}

export class TurnBatcher extends TurnQueue {
  constructor(private readonly deps: TurnBatcherDeps) {
    super();
  }

  protected send({ releases, acquires, waiting }: Turn): void {
    const { client, keys, calls, deadlines, count } = this.deps;
    const groups = groupAcquires(acquires, MAX_CHANNELS_PER_CALL);
    if (releases.length === 0 && groups.length === 0) {
      for (const resolve of waiting) resolve();
      return; // every release of the turn was withdrawn
    }
    const pipeline = client.pipeline();
    // decided now, not when each was asked for: a registration sent meanwhile is ahead of them on the connection
    const answered: ((ok: boolean) => void)[] = [];
    for (const q of releases) {
      const lease = q.request;
      const id = lease.channelId;
      q.viaQueue ||= this.deps.viaQueue(id);
      if (!q.viaQueue) {
        pipeline.zrem(keys.slots(id), lease.token);
        answered.push(this.deps.plainRelease(lease));
      } else {
        const queueKeys = [keys.slots(id), keys.queue(id)];
        SCRIPTS.releaseSlot.queue(pipeline, queueKeys, [lease.token, ...this.deps.releaseArgs(lease)]);
      }
    }
    const built = groups.map((group) => {
      const call = calls.build(group.map((q) => q.request));
      SCRIPTS.acquireSlots.queue(pipeline, call.keys, call.args);
      return call;
    });
    const sent = pipeline.exec() as Promise<[Error | null, unknown][]>;
    if (answered.length > 0) {
      sent.then(
        (results) => {
          let i = 0;
          releases.forEach((q, at) => {
            if (!q.viaQueue) answered[i++]!(!results[at]![0]);
          });
        },
        () => answered.forEach((f) => f(false)),
      );
    }
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
  }
}
