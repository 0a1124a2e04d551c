/**
 * The worker processes (worker.ts) of the multi-instance runs, kept across runs: forking a tsx process per instance
 * and run would cost more than a short run. A failed run's workers are killed, so the next one starts clean.
 */
import { askAll, forkChild, sleepUntil, wallNow, type Child } from './children.js';
import type { Footprint, RedisUnderTest, ServerSnapshot } from './redis.js';
import type { WorkerResult, WorkerRun, WorkerSetup } from './worker.js';

export class WorkerPool {
  private children: Child[] = [];

  take(n: number): Child[] {
    while (this.children.length < n) this.children.push(forkChild('worker'));
    return this.children.slice(0, n);
  }

  async discard(children: readonly Child[]): Promise<void> {
    this.children = this.children.filter((c) => !children.includes(c));
    await Promise.all(children.map((c) => c.kill()));
  }

  close(): Promise<void> {
    return this.discard(this.children);
  }
}

type Body<T> = T extends unknown ? Omit<T, 'type' | 'startAt'> & { startAt?: number } : never;
/** What one worker runs; `startAt` defaults to the common start. */
export type RunBody = Body<WorkerRun>;

export interface WorkersRun {
  /** The common start (wall time), the snapshots around the window, each worker's result. */
  startAt: number;
  before: ServerSnapshot;
  after: ServerSnapshot;
  results: WorkerResult[];
  /** With `footprint`: the run's keys at the end of the window, read after its snapshot. */
  footprint?: Footprint | undefined;
}

/**
 * One run on a worker per setup: set up, started together, the INFO snapshots taken at the start and `windowMs` after
 * it (undefined: once every worker is done); the run's keys deleted after.
 */
export async function runOnWorkers(
  redis: RedisUnderTest,
  pool: WorkerPool,
  o: {
    namespace: string;
    setups: readonly Omit<WorkerSetup, 'type' | 'redisUrl' | 'namespace'>[];
    run: (i: number, startAt: number) => RunBody;
    windowMs?: number;
    timeoutMs: number;
    footprint?: boolean;
  },
): Promise<WorkersRun> {
  const children = pool.take(o.setups.length);
  let ok = false;
  try {
    const setup = (i: number): WorkerSetup => ({
      type: 'setup',
      redisUrl: redis.url,
      namespace: o.namespace,
      ...o.setups[i]!,
    });
    await askAll(children, setup, 'ready', 120_000);
    const startAt = wallNow() + 500;
    const running = askAll<WorkerResult>(
      children,
      (i): WorkerRun => ({ type: 'run', startAt, ...o.run(i, startAt) }),
      'result',
      o.timeoutMs,
    );
    running.catch(() => {}); // awaited below; a worker's failure must not go unhandled meanwhile
    await sleepUntil(startAt);
    const before = await redis.snapshot();
    let after: ServerSnapshot | undefined;
    if (o.windowMs !== undefined) {
      await sleepUntil(startAt + o.windowMs);
      after = await redis.snapshot();
    }
    const footprint = o.footprint ? await redis.footprint?.(o.namespace) : undefined;
    const results = await running;
    after ??= await redis.snapshot();
    await askAll(children, () => ({ type: 'close' }), 'closed');
    ok = true;
    return { startAt, before, after, results, footprint };
  } finally {
    if (!ok) await pool.discard(children);
    await redis.cleanup(o.namespace);
  }
}
