/**
 * The time bound of a store's operations on Redis Cluster: a redirected operation is sent again until it runs or its
 * time is up (see ClusterDeadlines).
 */
import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../../../core/clock.js';
import { isCluster } from './connection.js';
import { Deadlines } from './deadlines.js';

/** The time bound of a store's operations; on Cluster it also sends redirected operations again. */
export function deadlinesFor(client: Redis | Cluster, clock: Clock, timeoutMs: number): Deadlines {
  return isCluster(client) ? new ClusterDeadlines(clock, timeoutMs, client) : new Deadlines(clock, timeoutMs);
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
