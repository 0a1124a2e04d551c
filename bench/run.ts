/**
 * The closed-loop runs of W1–W4 (in this process) and scale-out (one worker process per instance), and the RunRecord
 * every run ends in.
 */
import { highestOverlap, percentile, runLoad, type LoadResult } from './load.js';
import { runOnWorkers, type WorkerPool } from './pool.js';
import { addCounts, newNamespace, sum, type InstanceFigures, type RunRecord } from './records.js';
import {
  clientMeter,
  commandDelta,
  perNodeDelta,
  RoundTripCounter,
  type MeterFigures,
  type RedisUnderTest,
  type ServerSnapshot,
} from './redis.js';
import { acquirersOf, candidateSetsOf, channelsOf, describeSets, type Scenario } from './scenarios.js';
import type { Contender } from './types.js';
import type { WorkerResult } from './worker.js';

export function paramsOf(s: Scenario, durationS: number, instances: number): RunRecord['params'] {
  return {
    channels: s.channels,
    max: s.max,
    acquirers: s.acquirers,
    holdMs: s.holdMs,
    durationS,
    instances,
    candidateSets: describeSets(s),
  };
}

export function summarize(
  base: Pick<RunRecord, 'scenario' | 'contender' | 'label' | 'params'>,
  load: Pick<LoadResult, 'admissions' | 'refusals' | 'errors' | 'latencies' | 'refusalLatencies' | 'windowS'>,
  server: { before: ServerSnapshot; after: ServerSnapshot },
  extra: Omit<MeterFigures, 'counters'> & Pick<RunRecord, 'highest' | 'instances'>,
): RunRecord {
  const { before, after } = server;
  const record: RunRecord = {
    ...base,
    windowS: load.windowS,
    admissions: load.admissions,
    refusals: load.refusals,
    errors: load.errors,
    latency: {
      p50: percentile(load.latencies, 0.5),
      p99: percentile(load.latencies, 0.99),
      max: load.latencies.at(-1) ?? NaN,
    },
    refusalLatency: {
      p50: percentile(load.refusalLatencies, 0.5),
      p99: percentile(load.refusalLatencies, 0.99),
    },
    serverCommands: commandDelta(before, after),
    redisCpuMs: (after.cpuSeconds - before.cpuSeconds) * 1000,
    roundTrips: extra.roundTrips,
    socketWrites: extra.socketWrites,
    clientCpuMs: extra.clientCpuMs,
    highest: extra.highest,
    oversold: Object.entries(extra.highest)
      .filter(([, n]) => n > base.params.max)
      .map(([channel, n]) => ({ channel, highest: n, max: base.params.max })),
    purposes: extra.purposes,
    instances: extra.instances,
  };
  const perNode = perNodeDelta(before, after);
  if (perNode) Object.assign(record, { topology: 'cluster', perNode });
  return record;
}

/** The process figures of a run's workers, summed, and the holds of all of them swept together. */
export function workersTotal(results: readonly WorkerResult[]) {
  return {
    roundTrips: sum(results.map((r) => r.roundTrips)),
    socketWrites: sum(results.map((r) => r.socketWrites)),
    clientCpuMs: sum(results.map((r) => r.clientCpuMs)),
    highest: highestOverlap(results.map((r) => r.intervals)),
    purposes: results.some((r) => r.purposes) ? addCounts({}, ...results.map((r) => r.purposes)) : undefined,
  };
}

/** A run in this process: one instance, after a short unmeasured warm-up (connections, scripts, JIT). */
export async function runInProcess(
  redis: RedisUnderTest,
  contender: Contender,
  scenario: Scenario,
  durationS: number,
  opts: { warmupMs?: number } = {},
): Promise<RunRecord> {
  const channels = channelsOf(scenario);
  const candidateSets = candidateSetsOf(scenario, channels);
  const counter = new RoundTripCounter();
  const namespace = newNamespace(scenario.id, contender.id);
  const session = await contender.setup({
    channels,
    namespace,
    client: () => counter.client(redis.url),
  });
  const meter = clientMeter(counter, [session]);
  let before: ServerSnapshot | undefined;
  let after: ServerSnapshot | undefined;
  let load: LoadResult;
  const common = { session, candidateSets, acquirers: scenario.acquirers, holdMs: scenario.holdMs };
  try {
    const warmupMs = opts.warmupMs ?? 500;
    if (warmupMs > 0) await runLoad({ ...common, durationMs: warmupMs });
    load = await runLoad({
      ...common,
      durationMs: durationS * 1000,
      onWindowStart: async () => {
        before = await redis.snapshot();
        meter.start();
      },
      onWindowEnd: async () => {
        meter.end();
        after = await redis.snapshot();
      },
    });
  } finally {
    await session.close();
    await redis.cleanup(namespace);
  }
  return summarize(
    {
      scenario: scenario.id,
      contender: contender.id,
      label: contender.label,
      params: paramsOf(scenario, durationS, 1),
    },
    load,
    { before: before!, after: after! },
    { ...meter.figures(), highest: load.highest },
  );
}

/** Scale-out: the scenario on `instances` worker processes, the holds of all of them swept together. */
export async function runScaleOut(
  redis: RedisUnderTest,
  pool: WorkerPool,
  contender: { id: string; label: string },
  scenario: Scenario,
  instances: number,
  durationS: number,
  warmupMs = 500,
): Promise<RunRecord> {
  const channels = channelsOf(scenario);
  const sets = candidateSetsOf(scenario, channels);
  const { before, after, results } = await runOnWorkers(redis, pool, {
    namespace: newNamespace(`${scenario.id}${instances}`, contender.id),
    setups: Array.from({ length: instances }, (_, i) => ({
      contender: contender.id,
      channels,
      sets,
      instances: [i],
      warmup: { ms: warmupMs, acquirers: acquirersOf(scenario, instances, i), holdMs: scenario.holdMs },
    })),
    run: (i) => ({
      mode: 'load',
      acquirers: acquirersOf(scenario, instances, i),
      holdMs: scenario.holdMs,
      durationMs: durationS * 1000,
    }),
    windowMs: durationS * 1000,
    timeoutMs: durationS * 1000 + 30_000,
  });
  const loads = results.map((r) => r.load!);
  const perInstance: InstanceFigures[] = results.map((r) => ({
    admissions: r.load!.admissions,
    admissionsPerS: r.load!.admissions / r.load!.windowS,
    roundTrips: r.roundTrips,
    socketWrites: r.socketWrites,
    clientCpuMs: r.clientCpuMs,
    p50Ms: percentile(r.load!.latencies, 0.5),
    p99Ms: percentile(r.load!.latencies, 0.99),
    refusals: sum(Object.values(r.load!.refusals)),
    purposes: r.purposes,
  }));
  return summarize(
    {
      scenario: `${scenario.id}×${instances}`,
      contender: contender.id,
      label: contender.label,
      params: paramsOf(scenario, durationS, instances),
    },
    {
      admissions: sum(loads.map((l) => l.admissions)),
      refusals: addCounts({}, ...loads.map((l) => l.refusals)),
      errors: addCounts({}, ...loads.map((l) => l.errors)),
      latencies: loads.flatMap((l) => l.latencies).sort((a, b) => a - b),
      refusalLatencies: loads.flatMap((l) => l.refusalLatencies).sort((a, b) => a - b),
      windowS: durationS,
    },
    { before, after },
    { ...workersTotal(results), instances: perInstance },
  );
}
