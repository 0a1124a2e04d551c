/**
 * The registrations of one job go out together when it ends, each with its arrival lead measured then (else one
 * asked for early would stand later for waiting on the others). One call for all on one node; one each on Cluster.
 */
import type { Cluster, Redis } from 'ioredis';
import { preciseNow, type Clock } from '../../../core/clock.js';
import { clampArrivalLead, type EnqueueReply } from '../../store.js';
import { isCluster } from '../connection/connection.js';
import { SCRIPTS } from '../scripts.js';

const MAX_PER_CALL = 100;
/** The arguments of one registration, its arrival lead (µs) last. */
const ENQUEUE_ARGS = 8;

type Arg = string | number;

interface Pending {
  keys: string[];
  /** Without the arrival lead. */
  args: Arg[];
  /** When its request arrived (preciseNow()). */
  arrivedAt: number;
  resolve: (reply: EnqueueReply) => void;
  reject: (err: unknown) => void;
}

export class EnqueueBatch {
  private pending: Pending[] = [];

  constructor(
    private readonly client: Redis | Cluster,
    private readonly clock: Clock,
    private readonly count: () => void,
  ) {}

  send(keys: string[], args: Arg[], arrivedAt: number): Promise<EnqueueReply> {
    if (args.length !== ENQUEUE_ARGS - 1)
      throw new RangeError(`enqueueWaiter takes ${ENQUEUE_ARGS} arguments`);
    return new Promise((resolve, reject) => {
      this.pending.push({ keys, args, arrivedAt, resolve, reject });
      if (this.pending.length === 1) queueMicrotask(() => this.flush());
    });
  }

  private flush(): void {
    const all = this.pending;
    this.pending = [];
    const now = preciseNow(this.clock);
    const leads = all.map((e) => Math.round(1000 * clampArrivalLead(now - e.arrivedAt)));
    const perCall = isCluster(this.client) ? 1 : MAX_PER_CALL;
    for (let i = 0; i < all.length; i += perCall)
      this.call(all.slice(i, i + perCall), leads.slice(i, i + perCall));
  }

  private call(batch: Pending[], leads: number[]): void {
    this.count();
    const args = batch.map((e, j) => [...e.args, leads[j]!]);
    const sent =
      batch.length === 1
        ? SCRIPTS.enqueueWaiter.call(this.client, batch[0]!.keys, args[0]!).then((reply) => [reply])
        : SCRIPTS.enqueueWaiters.call(
            this.client,
            batch.flatMap((e) => e.keys),
            args.flat(),
          );
    sent.then(
      (replies) => {
        if (replies.length !== batch.length) {
          const err = new TypeError(
            `enqueueWaiter answered ${replies.length} of ${batch.length} registrations`,
          );
          return batch.forEach((e) => e.reject(err));
        }
        batch.forEach((e, j) => {
          const reply = replies[j]!;
          if (reply instanceof Error) e.reject(reply);
          else e.resolve(reply);
        });
      },
      (err: unknown) => batch.forEach((e) => e.reject(err)),
    );
  }
}
