/**
 * The closed loop of W1–W4 and scale-out: N acquirers, each acquire → hold → release, 5 ms back-off after a refusal.
 * Holders count how many hold each channel at once, and can record each hold on the monotonic clock so a parent can
 * sweep several processes together.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { sleepUntil } from './children.js';
import { Refused, type BenchChannel, type Session } from './types.js';

export interface LoadOptions {
  session: Session;
  candidateSets: readonly (readonly BenchChannel[])[];
  acquirers: number;
  holdMs: number;
  durationMs: number;
  /** Record every hold as [start, end] µs on the monotonic clock, per channel (multi-process oversell check). */
  recordIntervals?: boolean;
  /** Called right before the first acquire and right when the window ends (snapshots). */
  onWindowStart?: () => Promise<void> | void;
  onWindowEnd?: () => Promise<void> | void;
  /** Start the window at this wall time (children.ts, wallNow), for processes in step. */
  startAt?: number;
}

export interface LoadResult {
  /** Inside the measurement window: admissions, refusals and other errors by reason, their latencies (sorted, ms). */
  admissions: number;
  refusals: Record<string, number>;
  errors: Record<string, number>;
  latencies: number[];
  refusalLatencies: number[];
  /** Highest number of holders seen at once on each channel (this process). */
  highest: Record<string, number>;
  windowS: number;
  /** channel → flat [start, end, start, end, …] in µs on the monotonic clock (recordIntervals). */
  intervals?: Record<string, number[]>;
}

export const monotonicUs = (): number => Number(process.hrtime.bigint() / 1000n);

export async function runLoad(opts: LoadOptions): Promise<LoadResult> {
  const { session, candidateSets, holdMs } = opts;
  const inFlight = new Map<string, number>();
  const highest: Record<string, number> = {};
  const refusals: Record<string, number> = {};
  const errors: Record<string, number> = {};
  const latencies: number[] = [];
  const refusalLatencies: number[] = [];
  const intervals: Record<string, number[]> | undefined = opts.recordIntervals ? {} : undefined;
  let admissions = 0;

  if (opts.startAt !== undefined) await sleepUntil(opts.startAt);
  await opts.onWindowStart?.();
  const deadline = performance.now() + opts.durationMs;
  let windowEnd: Promise<void> | undefined;
  const endTimer = setTimeout(() => {
    windowEnd = Promise.resolve(opts.onWindowEnd?.());
  }, opts.durationMs);

  async function acquirer(index: number) {
    let k = index;
    while (performance.now() < deadline) {
      const set = candidateSets[k++ % candidateSets.length]!;
      const t0 = performance.now();
      let admitted;
      try {
        admitted = await session.acquire(set);
      } catch (err) {
        const t1 = performance.now();
        if (t1 <= deadline) {
          if (err instanceof Refused) {
            refusals[err.reason] = (refusals[err.reason] ?? 0) + 1;
            refusalLatencies.push(t1 - t0);
          } else {
            const name = err instanceof Error ? `${err.name}: ${err.message.slice(0, 80)}` : String(err);
            errors[name] = (errors[name] ?? 0) + 1;
          }
        }
        await sleep(5);
        continue;
      }
      const t1 = performance.now();
      const id = admitted.channel;
      const n = (inFlight.get(id) ?? 0) + 1;
      inFlight.set(id, n);
      if (n > (highest[id] ?? 0)) highest[id] = n;
      const holdStart = intervals ? monotonicUs() : 0;
      if (t1 <= deadline) {
        admissions++;
        latencies.push(t1 - t0);
      }
      if (holdMs > 0) await sleep(holdMs);
      inFlight.set(id, inFlight.get(id)! - 1);
      if (intervals) (intervals[id] ??= []).push(holdStart, monotonicUs());
      try {
        await admitted.release();
      } catch (err) {
        const name = `release: ${err instanceof Error ? err.message.slice(0, 80) : String(err)}`;
        errors[name] = (errors[name] ?? 0) + 1;
      }
    }
  }

  await Promise.all(Array.from({ length: opts.acquirers }, (_, i) => acquirer(i)));
  if (!windowEnd) {
    clearTimeout(endTimer);
    windowEnd = Promise.resolve(opts.onWindowEnd?.());
  }
  await windowEnd;
  latencies.sort((a, b) => a - b);
  refusalLatencies.sort((a, b) => a - b);
  return {
    admissions,
    refusals,
    errors,
    latencies,
    refusalLatencies,
    highest,
    windowS: opts.durationMs / 1000,
    intervals,
  };
}

/**
 * Highest number of intervals open at once per key (channel, or client), over flat [start, end, …] lists of several
 * processes on one clock; at equal times an end counts first. A hold ends before its release is sent and the next
 * holder's starts after its admission came back, so a legitimate successor never overlaps its predecessor.
 */
export function highestOverlap(
  all: readonly Readonly<Record<string, readonly number[]>>[],
): Record<string, number> {
  const events = new Map<string, [number, number][]>();
  for (const intervals of all) {
    for (const [id, flat] of Object.entries(intervals)) {
      const list = events.get(id) ?? [];
      for (let i = 0; i + 1 < flat.length; i += 2) list.push([flat[i]!, 1], [flat[i + 1]!, -1]);
      events.set(id, list);
    }
  }
  const highest: Record<string, number> = {};
  for (const [id, list] of events) {
    list.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let current = 0;
    let top = 0;
    for (const [, step] of list) top = Math.max(top, (current += step));
    highest[id] = top;
  }
  return highest;
}

export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}
