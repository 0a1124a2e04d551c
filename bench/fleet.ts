/**
 * Fleet runs: one fleet scenario (openloop.ts) on N worker processes sharing one Redis; INFO snapshots from the
 * common start until every instance drained, the oversell sweep, and the fleet figures beside the ideal schedulers'.
 */
import { clientRunsOf, clientsRecord, clientsWindow } from './clients.js';
import { meanHoldMs } from './draws.js';
import { fleetFigures, sortedWaits, type FleetWindow, type RequestRecord } from './fairness.js';
import { idealFifo } from './ideal.js';
import { arrivalRate, traceOf, type ClientVariant, type FleetScenario } from './openloop.js';
import { runOnWorkers, type RunBody, type WorkerPool } from './pool.js';
import { addCounts, newNamespace, sum, type RunRecord } from './records.js';
import type { RedisUnderTest } from './redis.js';
import { summarize, workersTotal } from './run.js';
import { channelsOf } from './scenarios.js';
import type { ClosedWorker } from './worker.js';

/** The windows a fleet run's figures are taken over, in ms from the first instance's start. */
export function fleetWindow(s: FleetScenario, durationS: number, instances: number): FleetWindow {
  if (s.kind === 'open') {
    // the first second, while the slots fill, is left out of the utilisation
    const to = durationS * 1000;
    return { from: 0, to: Infinity, utilisation: { from: Math.min(1000, to / 2), to } };
  }
  const { from, to } =
    s.kind === 'clients'
      ? clientsWindow(s, durationS)
      : { from: s.staggerMs * (instances - 1), to: s.staggerMs * (instances - 1) + durationS * 1000 };
  return { from, to, utilisation: { from, to } };
}

export interface FleetRunOptions {
  contender: { id: string; label: string };
  scenario: FleetScenario;
  instances: number;
  /** Seconds of arrivals (open loop), or of the window in which every instance runs (closed loop). */
  durationS: number;
  /** @default 300 */
  warmupMs?: number;
  /** clients2: which of its variants (required there). */
  variant?: ClientVariant;
}

export async function runFleet(
  redis: RedisUnderTest,
  pool: WorkerPool,
  run: FleetRunOptions,
): Promise<RunRecord> {
  const { contender, scenario: s, instances, durationS, variant, warmupMs = 300 } = run;
  if (s.kind === 'clients' && !variant) throw new Error(`${s.id}: no variant given`);
  const channels = channelsOf(s);
  const trace = s.kind === 'open' ? traceOf(s, durationS, instances) : [];
  const window = fleetWindow(s, durationS, instances);
  const workload = (i: number, startAt: number): RunBody => {
    if (s.kind === 'open') {
      const arrivals = trace
        .filter((t) => t.instance === i)
        .map((t) => ({ at: t.at, hold: t.hold, session: 0, set: 0 }));
      return { mode: 'open', arrivals, maxInFlight: s.maxInFlight };
    }
    const workers: ClosedWorker[] =
      s.kind === 'fair'
        ? Array.from({ length: s.workers }, () => ({ session: 0, holdMs: s.holdMs }))
        : clientRunsOf(s, variant!, i).flatMap((c) =>
            c.seeds.map((seed) => ({ session: 0, seed, client: c.client })),
          );
    // fair2's instance i starts i × staggerMs after the first
    const late = s.kind === 'fair' ? i * s.staggerMs : 0;
    const hold = s.kind === 'clients' ? { hold: s.hold } : {};
    return { mode: 'closed', startAt: startAt + late, endAt: startAt + window.to, workers, ...hold };
  };
  const drainMs = (s.kind === 'fair' ? 5000 : s.waitTimeoutMs + s.hold.capMs) + 15_000;
  const done = await runOnWorkers(redis, pool, {
    namespace: newNamespace(`${s.id}${instances}`, contender.id),
    setups: Array.from({ length: instances }, (_, i) => ({
      contender: contender.id,
      channels,
      sets: [channels],
      instances: [i],
      maxWaiting: s.maxWaiting,
      waitTimeoutMs: s.kind === 'fair' ? undefined : s.waitTimeoutMs,
      warmup: { ms: warmupMs, acquirers: 2, holdMs: 0 },
    })),
    run: workload,
    timeoutMs: durationS * 1000 + drainMs + 500,
  });
  const { results, startAt } = done;
  // every time in ms from the first instance's start, as the ideal's are from the trace's 0
  const records = results.flatMap((r) =>
    r.records.map((x): RequestRecord => ({
      ...x,
      arrival: x.arrival - startAt,
      outcome: x.outcome - startAt,
      dispatched: x.dispatched && x.dispatched - startAt,
      release: x.release && x.release - startAt,
    })),
  );
  if (s.kind === 'open' && records.length !== trace.length)
    throw new Error(`${records.length} records for a trace of ${trace.length} requests`);
  const slots = s.channels * s.max;
  const figures = fleetFigures(records, { slots, instances, window });
  const ideal =
    s.kind === 'open' && s.maxWaiting !== undefined
      ? fleetFigures(idealFifo(trace, channels, s.waitTimeoutMs), { slots, instances, window })
      : undefined;
  const errors: Record<string, number> = {};
  const refusals: Record<string, number> = {};
  for (const [reason, n] of Object.entries(figures.refusals))
    addCounts(reason.startsWith('error: ') ? errors : refusals, { [reason]: n });
  const inWindow = records.filter((r) => r.arrival >= window.from && r.arrival < window.to);
  const record = summarize(
    {
      // a clients run names its variant: runs are told apart by scenario and contender
      scenario: `${s.id}${variant ? `/${variant.id}` : ''}×${instances}`,
      contender: contender.id,
      label: variant ? `${contender.label} · ${variant.label}` : contender.label,
      params: {
        channels: s.channels,
        max: s.max,
        acquirers:
          s.kind === 'fair'
            ? s.workers * instances
            : s.kind === 'clients'
              ? sum(s.clients.map((c) => c.workersPerInstance)) * instances
              : 0,
        holdMs: s.kind === 'fair' ? s.holdMs : s.hold.medianMs,
        durationS,
        instances,
        candidateSets: `one candidate set (all ${s.channels})`,
      },
    },
    {
      admissions: figures.admitted,
      refusals,
      errors,
      latencies: sortedWaits(inWindow),
      refusalLatencies: sortedWaits(inWindow, false),
      windowS: (done.after.at - done.before.at) / 1000,
    },
    done,
    workersTotal(results),
  );
  record.fleet = {
    kind: s.kind,
    ...(s.kind === 'open'
      ? {
          loadPct: s.loadPct,
          ratePerS: arrivalRate(s),
          meanHoldMs: meanHoldMs(s.hold),
          seed: s.seed,
          waitTimeoutMs: s.waitTimeoutMs,
        }
      : {}),
    figures,
    ideal,
    ...(s.kind === 'clients'
      ? {
          clients: clientsRecord(s, variant!, {
            instances,
            durationS,
            records,
            intervals: results.map((r) => r.clientIntervals),
          }),
        }
      : {}),
    capHits: sum(results.map((r) => r.capHits)),
    lagP99Ms: Math.max(0, ...results.map((r) => r.lagP99Ms)),
    lagMaxMs: Math.max(0, ...results.map((r) => r.lagMaxMs)),
    loopDelayP99Ms: Math.max(0, ...results.map((r) => r.loopDelay.p99Ms)),
    loopDelayMaxMs: Math.max(0, ...results.map((r) => r.loopDelay.maxMs)),
  };
  return record;
}
