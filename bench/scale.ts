/**
 * Scale-out: one scenario on N instances, each its own process (worker.ts) on the same Redis. The parent takes the
 * INFO snapshots over the common window; the children report their own figures; the cross-process oversell check
 * sweeps every hold interval of every child on the machine's monotonic clock.
 */
import { askAll, forkChild, sleepUntil, type Child } from './children.js';
import { highestOverlap, percentile } from './load.js';
import type { RedisUnderTest, ServerSnapshot } from './redis.js';
import { acquirersOf, candidateSetsOf, channelsOf, type Scenario } from './scenarios.js';
import { addCounts, newNamespace, paramsOf, summarize, type InstanceFigures, type RunRecord } from './run.js';
import type { WorkerResult, WorkerSetup } from './worker.js';

export async function runScaleOut(
  redis: RedisUnderTest,
  contender: { id: string; label: string },
  scenario: Scenario,
  instances: number,
  durationS: number,
  warmupMs = 500,
): Promise<RunRecord> {
  const channels = channelsOf(scenario);
  const candidateSets = candidateSetsOf(scenario, channels);
  const namespace = newNamespace(`${scenario.id}${instances}`, contender.id);
  const children: Child[] = [];
  try {
    for (let i = 0; i < instances; i++) children.push(forkChild('worker'));
    await askAll(
      children,
      (i): WorkerSetup => ({
        type: 'setup',
        contender: contender.id,
        redisUrl: redis.url,
        namespace,
        channels,
        candidateSets,
        acquirers: acquirersOf(scenario, instances, i),
        holdMs: scenario.holdMs,
        durationMs: durationS * 1000,
        warmupMs,
      }),
      'ready',
    );
    const startAt = performance.timeOrigin + performance.now() + 300;
    for (const child of children) child.send({ type: 'start', startAt });
    await sleepUntil(startAt);
    const before: ServerSnapshot = await redis.snapshot();
    await sleepUntil(startAt + durationS * 1000);
    const after: ServerSnapshot = await redis.snapshot();
    const results = await Promise.all(
      children.map((c) => c.next<WorkerResult>('result', durationS * 1000 + 30_000)),
    );

    const latencies = results.flatMap((r) => r.load.latencies).sort((a, b) => a - b);
    const refusalLatencies = results.flatMap((r) => r.load.refusalLatencies).sort((a, b) => a - b);
    const refusals: Record<string, number> = {};
    const errors: Record<string, number> = {};
    const purposes: Record<string, number> = {};
    for (const r of results) {
      addCounts(refusals, r.load.refusals);
      addCounts(errors, r.load.errors);
      addCounts(purposes, r.purposes);
    }
    const highest = highestOverlap(results.map((r) => r.load.intervals ?? {}));
    const perInstance: InstanceFigures[] = results.map((r) => ({
      admissions: r.load.admissions,
      admissionsPerS: r.load.admissions / r.load.windowS,
      roundTrips: r.roundTrips,
      socketWrites: r.socketWrites,
      clientCpuMs: r.clientCpuMs,
      p50Ms: percentile(r.load.latencies, 0.5),
      p99Ms: percentile(r.load.latencies, 0.99),
      refusals: Object.values(r.load.refusals).reduce((a, b) => a + b, 0),
      ...(r.purposes ? { purposes: r.purposes } : {}),
    }));
    return summarize(
      {
        scenario: `${scenario.id}×${instances}`,
        contender: contender.id,
        label: contender.label,
        params: paramsOf(scenario, durationS, instances),
      },
      {
        admissions: results.reduce((a, r) => a + r.load.admissions, 0),
        refusals,
        errors,
        latencies,
        refusalLatencies,
        windowS: durationS,
      },
      { before, after },
      {
        roundTrips: results.reduce((a, r) => a + r.roundTrips, 0),
        socketWrites: results.reduce((a, r) => a + r.socketWrites, 0),
        clientCpuMs: results.reduce((a, r) => a + r.clientCpuMs, 0),
        highest,
        instances: perInstance,
        ...(results.some((r) => r.purposes) ? { purposes } : {}),
      },
    );
  } finally {
    await Promise.all(children.map((c) => c.kill()));
    await redis.cleanup(namespace);
  }
}
