import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../../../core/clock.js';
import { isCluster } from './connection.js';
import { Deadlines } from './deadlines.js';

/** The time bound of a store's operations; on Cluster it also sends redirected operations again. */
export function deadlinesFor(client: Redis | Cluster, clock: Clock, timeoutMs: number): Deadlines {
  return isCluster(client) ? new ClusterDeadlines(clock, timeoutMs, client) : new Deadlines(clock, timeoutMs);
}

/**
 * Replies meaning the command did not run: redirections while a slot moves, a slot not served, an auto-pipeline
 * refused for a changed slot map (ioredis follows these itself only when a whole pipeline failed alike), and NOSCRIPT
 * (ioredis marks a script loaded once its EVAL is written, even one that was then redirected).
 */
const NOT_RUN =
  /^(?:MOVED|ASK|TRYAGAIN|CLUSTERDOWN|NOSCRIPT) |^Too many Cluster redirections|^All keys in the pipeline should belong to the same slots allocation group/;

/** Longest pause between two tries of a redirected operation. */
const MAX_RETRY_DELAY_MS = 100;

/**
 * On Cluster, a redirected operation is sent again until it runs or its time is up (a migrating slot answers TRYAGAIN
 * until the migration ends). Safe because a redirected command never ran; an operation of several commands is sent
 * again whole, so their other commands must be reads or idempotent (load reads, renewal batches, the epoch check).
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
      // anything but ASK and TRYAGAIN (which last until the migration ends) means a stale slot map
      if (!message.startsWith('ASK') && !message.startsWith('TRYAGAIN')) {
        await new Promise<void>((resolve) => this.client.refreshSlotsCache(() => resolve()));
      }
      await this.time.sleep(delay);
      return this.follow(work, until, attempt + 1);
    });
  }
}
