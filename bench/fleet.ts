/**
 * Fleet runs: one fleet scenario (openloop.ts) on N instances, each a worker process (fleet-worker.ts) on the same
 * Redis. Workers are kept in a pool and serve run after run (forking four tsx processes per run would cost more than
 * a short run). The parent deals the trace, takes the INFO snapshots from the common start until every instance has
 * drained, checks oversell over the hold intervals of all instances, and computes the fleet figures from every
 * request's record — and the ideal FIFO scheduler's figures on the same trace. A clients run (one variant of the
 * clients scenario) adds the per-client figures and the ideal schedulers' on the same closed loop (clients-figures.ts).
 */
import { askAll, forkChild, sleepUntil, wallNow, type Child } from './children.js';
import { clientRunsOf, type ClientVariant } from './clients.js';
import { clientsRecord, clientsWindow, type ClientsRecord } from './clients-figures.js';
import { fleetFigures, type FleetFigures, type FleetWindow, type RequestRecord } from './fairness.js';
import type { FleetResult, FleetRunMessage, FleetSetup } from './fleet-worker.js';
import { idealFifo } from './ideal.js';
import { highestOverlap, percentile } from './load.js';
import { arrivalRate, fleetChannels, meanHoldMs, traceOf, type FleetScenario } from './openloop.js';
import type { RedisUnderTest } from './redis.js';
import { addCounts, newNamespace, summarize, type InstanceFigures, type RunRecord } from './run.js';

/** What a fleet run adds to its RunRecord. */
export interface FleetRecord {
  kind: FleetScenario['kind'];
  /** Open loop: offered load (% of capacity), arrivals per second in total, the mean hold, seed and wait time-out. */
  loadPct?: number;
  ratePerS?: number;
  meanHoldMs?: number;
  seed?: number;
  waitTimeoutMs?: number;
  figures: FleetFigures;
  /** The ideal FIFO scheduler on the same trace (open loop). */
  ideal?: FleetFigures;
  /** The clients scenario: the variant, per-client figures and the ideal schedulers' on the same loop. */
  clients?: ClientsRecord;
  capHits: number;
  /** Dispatch lag of arrivals behind their trace time, ms, worst instance. */
  lagP99Ms: number;
  lagMaxMs: number;
  /**
   * How late the instances' event loops ran a 1 ms timer, ms: the highest p99 and the highest max over the instances,
   * each on its own (absent in older results).
   */
  loopDelayP99Ms?: number;
  loopDelayMaxMs?: number;
}

/** Worker processes kept across runs; the workers of a failed run are killed, so the next one starts clean. */
export class WorkerPool {
  private children: Child[] = [];

  take(n: number): Child[] {
    while (this.children.length < n) this.children.push(forkChild('fleet-worker'));
    return this.children.slice(0, n);
  }

  /** Kills these workers and forgets them (the ones still in the pool, that is). */
  async discard(children: readonly Child[]): Promise<void> {
    this.children = this.children.filter((c) => !children.includes(c));
    await Promise.all(children.map((c) => c.kill()));
  }

  async close(): Promise<void> {
    const all = this.children;
    this.children = [];
    await Promise.all(all.map((c) => c.kill()));
  }
}

/** A request may finish this long after the last arrival: the wait time-out plus the longest hold, and a margin. */
const drainMs = (s: FleetScenario) => (s.kind === 'fair' ? 5000 : s.waitTimeoutMs + s.hold.capMs) + 15_000;

/** The windows a fleet run's figures are taken over, in ms from the first instance's start. */
export function fleetWindow(s: FleetScenario, durationS: number, instances: number): FleetWindow {
  if (s.kind === 'open') {
    // the first second, while the slots fill, is left out of the utilisation
    const to = durationS * 1000;
    return { from: 0, to: Infinity, utilisation: { from: Math.min(1000, to / 2), to } };
  }
  if (s.kind === 'clients') {
    const { from, to } = clientsWindow(s, durationS);
    return { from, to, utilisation: { from, to } };
  }
  const from = s.staggerMs * (instances - 1);
  const to = from + durationS * 1000;
  return { from, to, utilisation: { from, to } };
}

export interface FleetRunOptions {
  contender: { id: string; label: string };
  scenario: FleetScenario;
  instances: number;
  /** Seconds of arrivals (open loop), or of the window in which every instance runs (closed loop). */
  durationS: number;
  /** Unmeasured closed-loop warm-up of each worker's session. @default 300 */
  warmupMs?: number;
  /** The clients scenario: which of its variants (required there). */
  variant?: ClientVariant;
}

export async function runFleet(
  redis: RedisUnderTest,
  pool: WorkerPool,
  run: FleetRunOptions,
): Promise<RunRecord> {
  const { contender, scenario, instances, durationS, warmupMs = 300 } = run;
  if (scenario.kind === 'clients' && !run.variant) throw new Error(`${scenario.id}: no variant given`);
  const channels = fleetChannels(scenario);
  const namespace = newNamespace(`${scenario.id}${instances}`, contender.id);
  const children = pool.take(instances);
  const trace = scenario.kind === 'open' ? traceOf(scenario, durationS, instances) : [];
  let ok = false;
  try {
    const setup: FleetSetup = {
      type: 'setup',
      redisUrl: redis.url,
      namespace,
      channels,
      warmupMs,
      contender: contender.id,
    };
    if (scenario.maxWaiting !== undefined) setup.maxWaiting = scenario.maxWaiting;
    if (scenario.kind !== 'fair') setup.waitTimeoutMs = scenario.waitTimeoutMs;
    await askAll(children, () => setup, 'ready');
    const startAt = wallNow() + 300;
    const loopEnd = scenario.kind !== 'open' ? fleetWindow(scenario, durationS, instances).to : 0;
    const running = askAll<FleetResult>(
      children,
      (i): FleetRunMessage => {
        const mine = trace.filter((t) => t.instance === i);
        if (scenario.kind === 'clients') {
          return {
            type: 'run',
            instance: i,
            mode: 'clients',
            startAt,
            endAt: startAt + loopEnd,
            clients: clientRunsOf(scenario, run.variant!, i),
            hold: scenario.hold,
          };
        }
        return scenario.kind === 'open'
          ? {
              type: 'run',
              instance: i,
              mode: 'open',
              startAt,
              arrivals: mine.map((t) => t.at),
              holds: mine.map((t) => t.hold),
              maxInFlight: scenario.maxInFlight,
            }
          : {
              type: 'run',
              instance: i,
              mode: 'closed',
              startAt: startAt + i * scenario.staggerMs,
              endAt: startAt + loopEnd,
              workers: scenario.workers,
              holdMs: scenario.holdMs,
            };
      },
      'result',
      durationS * 1000 + drainMs(scenario) + 300,
    );
    running.catch(() => {}); // awaited below, after the first snapshot; a worker's failure must not go unhandled
    await sleepUntil(startAt);
    const before = await redis.snapshot();
    const results = await running;
    const after = await redis.snapshot();
    await askAll(children, () => ({ type: 'close' }), 'closed');
    ok = true;
    return fleetRecord(run, channels, trace.length, {
      startAt,
      results,
      server: { before, after },
      ideal:
        scenario.kind === 'open' && scenario.maxWaiting !== undefined
          ? idealFifo(trace, channels, scenario.waitTimeoutMs)
          : undefined,
    });
  } finally {
    if (!ok) await pool.discard(children);
    await redis.cleanup(namespace);
  }
}

function fleetRecord(
  { contender, scenario, instances, durationS, variant }: FleetRunOptions,
  channels: ReturnType<typeof fleetChannels>,
  traceLength: number,
  run: {
    startAt: number;
    results: FleetResult[];
    server: Parameters<typeof summarize>[2];
    ideal: RequestRecord[] | undefined;
  },
): RunRecord {
  const { results, startAt } = run;
  const slots = channels.reduce((a, c) => a + c.max, 0);
  // every time in ms from the first instance's start, as the ideal's are from the trace's 0
  const shift = (r: RequestRecord): RequestRecord => ({
    ...r,
    arrival: r.arrival - startAt,
    outcome: r.outcome - startAt,
    ...(r.release !== undefined ? { release: r.release - startAt } : {}),
  });
  const records = results.flatMap((r) => r.records.map(shift));
  const window = fleetWindow(scenario, durationS, instances);
  const figures = fleetFigures(records, { slots, instances, window });
  const ideal = run.ideal && fleetFigures(run.ideal, { slots, instances, window });
  if (scenario.kind === 'open' && records.length !== traceLength)
    throw new Error(`${records.length} records for a trace of ${traceLength} requests`);
  const windowS = (run.server.after.at - run.server.before.at) / 1000;
  const errors: Record<string, number> = {};
  const refusals: Record<string, number> = {};
  for (const [reason, n] of Object.entries(figures.refusals)) {
    addCounts(reason.startsWith('error: ') ? errors : refusals, { [reason]: n });
  }
  const purposes: Record<string, number> = {};
  for (const r of results) addCounts(purposes, r.purposes);
  const inWindow = records.filter((r) => r.arrival >= window.from && r.arrival < window.to);
  const waitsOf = (admitted: boolean) =>
    inWindow
      .filter((r) => (r.channel !== undefined) === admitted)
      .map((r) => r.outcome - r.arrival)
      .sort((a, b) => a - b);
  const perInstance: InstanceFigures[] = results.map((r, i) => ({
    admissions: figures.perInstance[i]!.admitted,
    admissionsPerS: figures.perInstance[i]!.admitted / windowS,
    roundTrips: r.roundTrips,
    socketWrites: r.socketWrites,
    clientCpuMs: r.clientCpuMs,
    p50Ms: figures.perInstance[i]!.wait.p50,
    p99Ms: figures.perInstance[i]!.wait.p99,
    refusals: Math.round(figures.perInstance[i]!.refusalRatio * figures.perInstance[i]!.requests),
    ...(r.purposes ? { purposes: r.purposes } : {}),
  }));
  const lags = results.map((r) => r.lags);
  const record = summarize(
    {
      // a clients run names its variant: runs are told apart by scenario and contender (cluster-report.ts too)
      scenario: `${scenario.id}${variant ? `/${variant.id}` : ''}×${instances}`,
      contender: contender.id,
      label: variant ? `${contender.label} · ${variant.label}` : contender.label,
      params: {
        channels: scenario.channels,
        max: scenario.max,
        acquirers:
          scenario.kind === 'fair'
            ? scenario.workers * instances
            : scenario.kind === 'clients'
              ? scenario.clients.reduce((a, c) => a + c.workersPerInstance, 0) * instances
              : 0,
        holdMs: scenario.kind === 'fair' ? scenario.holdMs : scenario.hold.medianMs,
        durationS,
        instances,
        candidateSets: `one candidate set (all ${scenario.channels})`,
      },
    },
    {
      admissions: figures.admitted,
      refusals,
      errors,
      latencies: waitsOf(true),
      refusalLatencies: waitsOf(false),
      windowS,
    },
    run.server,
    {
      roundTrips: results.reduce((a, r) => a + r.roundTrips, 0),
      socketWrites: results.reduce((a, r) => a + r.socketWrites, 0),
      clientCpuMs: results.reduce((a, r) => a + r.clientCpuMs, 0),
      highest: highestOverlap(results.map((r) => r.intervals)),
      instances: perInstance,
      ...(results.some((r) => r.purposes) ? { purposes } : {}),
    },
  );
  record.fleet = {
    kind: scenario.kind,
    ...(scenario.kind === 'open'
      ? {
          loadPct: scenario.loadPct,
          ratePerS: arrivalRate(scenario),
          meanHoldMs: meanHoldMs(scenario.hold),
          seed: scenario.seed,
          waitTimeoutMs: scenario.waitTimeoutMs,
        }
      : {}),
    figures,
    ...(ideal ? { ideal } : {}),
    ...(scenario.kind === 'clients'
      ? {
          clients: clientsRecord(scenario, variant!, {
            instances,
            durationS,
            records,
            intervals: results.map((r) => r.clientIntervals ?? {}),
          }),
        }
      : {}),
    capHits: results.reduce((a, r) => a + r.capHits, 0),
    lagP99Ms: Math.max(0, ...lags.map((l) => percentile(l, 0.99) || 0)),
    lagMaxMs: Math.max(0, ...lags.map((l) => l.at(-1) ?? 0)),
    loopDelayP99Ms: Math.max(0, ...results.map((r) => r.loopDelay.p99Ms)),
    loopDelayMaxMs: Math.max(0, ...results.map((r) => r.loopDelay.maxMs)),
  };
  return record;
}
