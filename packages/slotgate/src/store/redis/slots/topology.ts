/**
 * What differs between one node and a Cluster. On one node a turn shares one pipeline and a call may span channels.
 * On Cluster every script call must stay in one hash slot, so calls and batches are per channel, each sent on its own
 * (auto-pipelined per node).
 */
import type { Cluster, Redis } from 'ioredis';
import { chunk, pushTo } from '../../../core/collections.js';
import { BATCH_SIZE, type AcquireReply, type Purpose } from '../../store.js';
import { isCluster } from '../connection/connection.js';
import { failure, type Deadlines } from '../connection/deadlines.js';
import { SCRIPTS, type Script } from '../scripts.js';
import {
  groupAcquires,
  MAX_CHANNELS_PER_CALL,
  type AcquireRequest,
  type ScriptCall,
} from './acquire-call.js';
import { TurnQueue, type Queued, type ReleaseRequest, type Turn } from './turn.js';

export interface TurnDeps {
  client: Redis | Cluster;
  deadlines: Deadlines;
  count: (purpose: Purpose, n: number) => void;
  acquireCall: (requests: readonly AcquireRequest[]) => ScriptCall<AcquireReply[][]>;
  releaseCall: (lease: ReleaseRequest) => ScriptCall<boolean>;
}

interface Outgoing {
  purpose: 'acquire' | 'release';
  script: Script<unknown>;
  call: ScriptCall<unknown>;
  settle: Pick<Queued<unknown, unknown>, 'resolve' | 'reject'>;
}

/** A turn's calls: its releases first, then its acquires grouped. */
function outgoing(deps: TurnDeps, { releases, acquires }: Turn, perCall: number): Outgoing[] {
  const calls: Outgoing[] = releases.map((q) => ({
    purpose: 'release',
    script: SCRIPTS.releaseSlot,
    call: deps.releaseCall(q.request),
    settle: q as Queued<unknown, unknown>,
  }));
  for (const group of groupAcquires(acquires, perCall)) {
    calls.push({
      purpose: 'acquire',
      script: SCRIPTS.acquireSlots,
      call: deps.acquireCall(group.map((q) => q.request)),
      settle: {
        resolve: (replies) => group.forEach((q, i) => q.resolve((replies as AcquireReply[][])[i]!)),
        reject: (err) => group.forEach((q) => q.reject(err)),
      },
    });
  }
  return calls;
}

/** One node: a turn's calls go out in one pipeline, each under its own time bound. */
class SingleNodeTurns extends TurnQueue {
  readonly maxChannelsPerAcquire = BATCH_SIZE;

  constructor(private readonly deps: TurnDeps) {
    super();
  }

  protected send(turn: Turn): void {
    const { client, deadlines, count } = this.deps;
    const calls = outgoing(this.deps, turn, MAX_CHANNELS_PER_CALL);
    if (calls.length === 0) return;
    const pipeline = client.pipeline();
    for (const { script, call } of calls) script.queue(pipeline, call.keys, call.args);
    const sent = pipeline.exec() as Promise<[Error | null, unknown][]>;
    calls.forEach(({ purpose, call, settle }, i) => {
      count(purpose, 1);
      deadlines
        .run(purpose, () =>
          sent.then((results) => {
            const [err, raw] = results[i]!;
            if (err) throw failure(purpose, err);
            return call.read(raw);
          }),
        )
        .then(settle.resolve, settle.reject);
    });
  }
}

/** Cluster: a turn's acquires of one channel in one call. */
class ClusterTurns extends TurnQueue {
  readonly maxChannelsPerAcquire = 1;

  constructor(private readonly deps: TurnDeps) {
    super();
  }

  protected send(turn: Turn): void {
    const { client, deadlines, count } = this.deps;
    const byChannel = new Map<string, Turn['acquires']>();
    for (const q of turn.acquires) pushTo(byChannel, q.request.targets[0]!.channelId, q);
    const calls = [...byChannel.values()].flatMap((acquires) =>
      outgoing(this.deps, { releases: [], acquires }, MAX_CHANNELS_PER_CALL),
    );
    for (const { purpose, script, call, settle } of [
      ...outgoing(this.deps, { ...turn, acquires: [] }, 0),
      ...calls,
    ]) {
      count(purpose, 1);
      deadlines
        .run(purpose, () => script.send(client, call.keys, call.args).then((raw) => call.read(raw)))
        .then(settle.resolve, settle.reject);
    }
  }
}

export function turnsOf(deps: TurnDeps): TurnQueue {
  return isCluster(deps.client) ? new ClusterTurns(deps) : new SingleNodeTurns(deps);
}

/** Batches of at most BATCH_SIZE items; on Cluster one channel's items per batch (one hash slot per script call). */
export function batchesOf<T extends { channelId: string }>(
  client: Redis | Cluster,
  items: readonly T[],
): T[][] {
  if (!isCluster(client)) return chunk(items, BATCH_SIZE);
  const byChannel = new Map<string, T[]>();
  for (const item of items) pushTo(byChannel, item.channelId, item);
  return [...byChannel.values()].flatMap((group) => chunk(group, BATCH_SIZE));
}
