/**
 * The fleet simulator (`--only fleetsim`): N slotgate engines over a few worker processes, C channels in overlapping
 * candidate sets, open-loop Poisson arrivals seeded per engine so both contenders of a cell replay the same requests.
 * The parent takes the INFO snapshots over a fixed window and sweeps every hold interval for oversell.
 */
import { DEFAULT_SETTINGS } from 'slotgate';
import { loadContender } from './contenders/index.js';
import { exponentialMs, logNormalMs, meanHoldMs, seededRandom, seedOf, type HoldShape } from './draws.js';
import { jain, sortedWaits, type RequestRecord } from './fairness.js';
import { highestOverlap, percentile } from './load.js';
import { runOnWorkers, WorkerPool } from './pool.js';
import { newNamespace, sum } from './records.js';
import { commandDelta, perNodeDelta, type Footprint, type RedisUnderTest } from './redis.js';
import { channelsOf } from './scenarios.js';
import type { Arrival } from './worker.js';

export const FLEETSIM_ID = 'fleetsim';
export const FLEETSIM_CONTENDERS = ['slotgate', 'slotgate-rollback'];

export type FleetSimGrid = 'full' | 'quick';

export const GRIDS: Record<FleetSimGrid, { instances: number[]; channels: number[] }> = {
  full: { instances: [1, 10, 50, 100], channels: [50, 500, 1000] },
  quick: { instances: [10, 100], channels: [50, 1000] },
};

export interface FleetSimOptions {
  grid: FleetSimGrid;
  /** Seconds measured per cell. */
  durationS: number;
  /** Worker processes the engines are spread over (fewer when N is smaller). */
  workers: number;
}

/** What every cell shares. */
export const FLEETSIM_SHAPE = {
  /** Max concurrency of every channel. */
  max: 8,
  /** Candidate sets, each a seeded draw of setSize(C) distinct channels (they overlap). */
  sets: 20,
  /** Poisson arrivals per second per instance. */
  ratePerInstance: 10,
  // a mean of ~0.5 s (median 440 ms, σ 0.5: mean ≈ 499 ms), LLM-like tail, capped at 4 s
  hold: { medianMs: 440, sigma: 0.5, capMs: 4000 } as HoldShape,
  waitTimeoutMs: 3000,
  seed: 16,
};
export type FleetSimShape = typeof FLEETSIM_SHAPE;

/** Channels per candidate set: 10 at C = 50 and C / 20 above (25 at 500, 50 at 1,000). */
export const setSize = (channels: number): number =>
  Math.min(channels, Math.max(10, Math.round(channels / 20)));

/** `count` seeded sets of `size` distinct channel indices in [0, channels) (a partial Fisher–Yates shuffle each). */
export function candidateSets(channels: number, count: number, size: number, seed: number): number[][] {
  if (size > channels) throw new Error(`a set of ${size} out of ${channels} channels`);
  const random = seededRandom(seed);
  const deck = Array.from({ length: channels }, (_, i) => i);
  return Array.from({ length: count }, () => {
    for (let i = 0; i < size; i++) {
      const j = i + Math.floor(random() * (channels - i));
      [deck[i], deck[j]] = [deck[j]!, deck[i]!];
    }
    return deck.slice(0, size).sort((a, b) => a - b);
  });
}

/** How many channels are in at least one set, and in how many sets such a channel is on average. */
export function coverage(sets: readonly (readonly number[])[]): { channels: number; setsPerChannel: number } {
  const seen = new Map<number, number>();
  for (const set of sets) for (const c of set) seen.set(c, (seen.get(c) ?? 0) + 1);
  const total = sum(sets.map((s) => s.length));
  return { channels: seen.size, setsPerChannel: seen.size ? total / seen.size : 0 };
}

/** The arrivals of engine `instance` in [0, durationMs): Poisson, each to a uniformly drawn set, log-normal holds. */
export function engineArrivals(o: {
  seed: number;
  instance: number;
  ratePerS: number;
  durationMs: number;
  sets: number;
  hold: HoldShape;
}): { at: number; set: number; hold: number }[] {
  const random = seededRandom(seedOf(o.seed, 'engine', o.instance));
  const out: { at: number; set: number; hold: number }[] = [];
  for (let at = exponentialMs(random, o.ratePerS); at < o.durationMs; at += exponentialMs(random, o.ratePerS))
    out.push({ at, set: Math.floor(random() * o.sets), hold: logNormalMs(random, o.hold) });
  return out;
}

/** The engines a worker process hosts: instance i goes to worker i mod workers. */
export function enginesOf(worker: number, workers: number, instances: number): number[] {
  const out: number[] = [];
  for (let i = worker; i < instances; i += workers) out.push(i);
  return out;
}

/** Load-read commands per instance per load TTL: Δ commands.load_read / N / (window / TTL). */
export const perInstancePerTtl = (
  loadReads: number,
  instances: number,
  windowMs: number,
  ttlMs: number,
): number => loadReads / instances / (windowMs / ttlMs);

/** Offered load in Erlangs (mean holds in flight) over the slots of the channels in some set. */
export function offeredShare(shape: FleetSimShape, instances: number, coveredChannels: number): number {
  const erlangs = instances * shape.ratePerInstance * (meanHoldMs(shape.hold) / 1000);
  return erlangs / (coveredChannels * shape.max);
}

/** A cell's parameters (printed beside its results) and its candidate sets. */
export function cellOf(instances: number, channels: number, o: FleetSimOptions, shape = FLEETSIM_SHAPE) {
  const size = setSize(channels);
  const sets = candidateSets(channels, shape.sets, size, seedOf(shape.seed, 'sets', channels));
  const cover = coverage(sets);
  return {
    sets,
    cell: {
      instances,
      channels,
      setSize: size,
      sets: shape.sets,
      coveredChannels: cover.channels,
      setsPerChannel: cover.setsPerChannel,
      max: shape.max,
      ratePerS: instances * shape.ratePerInstance,
      meanHoldMs: meanHoldMs(shape.hold),
      offeredShare: offeredShare(shape, instances, cover.channels),
      ttlMs: DEFAULT_SETTINGS.load_cache_ttl_ms,
      durationS: o.durationS,
      waitTimeoutMs: shape.waitTimeoutMs,
      workers: Math.min(o.workers, instances),
    },
  };
}

/** Jain's index of admitted / offered per instance; instances with no arrival are left out. */
export function admittedShareJain(
  records: readonly Pick<RequestRecord, 'instance' | 'channel'>[],
  instances: number,
) {
  const offered = new Array<number>(instances).fill(0);
  const admitted = new Array<number>(instances).fill(0);
  for (const r of records) {
    offered[r.instance]!++;
    if (r.channel !== undefined) admitted[r.instance]!++;
  }
  return jain(offered.flatMap((o, i) => (o > 0 ? [admitted[i]! / o] : [])));
}

export interface CellInput {
  cell: SimCell;
  /** Wall times of the window's two ends. */
  startAt: number;
  endAt: number;
  records: readonly RequestRecord[];
  intervals: readonly Record<string, number[]>[];
  /** Each engine's counters over the window (the slotgate session's: load_read, first_tries, …). */
  counters: readonly Record<string, number>[];
  server: { commands: number; cpuMs: number; windowMs: number; nodeCpuMs?: number[] };
  clientCpuMs: number;
  lagP99Ms: number;
  lagMaxMs: number;
}

export type SimCell = ReturnType<typeof cellOf>['cell'];
export type SimFigures = ReturnType<typeof simFigures>;

export interface SimRecord {
  topology: 'single' | 'cluster';
  contender: string;
  label: string;
  cell: SimCell;
  f: SimFigures;
  serverCommands: Record<string, number>;
  /** The run's keys at the end of its window (single node only). */
  footprint?: Footprint | undefined;
}

export function simFigures(x: CellInput) {
  const { cell, startAt, endAt } = x;
  const arrived = x.records.filter((r) => r.arrival >= startAt && r.arrival < endAt);
  const refused: Record<string, number> = {};
  for (const r of arrived) if (r.reason !== undefined) refused[r.reason] = (refused[r.reason] ?? 0) + 1;
  const admitted = x.records.filter(
    (r) => r.channel !== undefined && r.outcome >= startAt && r.outcome < endAt,
  );
  const waits = sortedWaits(arrived);
  const total = (key: string) => sum(x.counters.map((c) => c[key] ?? 0));
  const windowS = x.server.windowMs / 1000;
  const perTtl = (n: number, instances = cell.instances) =>
    perInstancePerTtl(n, instances, x.server.windowMs, cell.ttlMs);
  const highest = highestOverlap(x.intervals);
  const peak = Math.max(0, ...Object.values(highest));
  const firstTries = total('first_tries');
  const firstTriesFull = total('first_tries_full');
  return {
    requests: arrived.length,
    refused,
    refusalRatio: arrived.length ? (arrived.length - waits.length) / arrived.length : NaN,
    admitted: admitted.length,
    admPerS: admitted.length / windowS,
    redisCmds: x.server.commands,
    cmdsPerS: x.server.commands / windowS,
    cmdsPerAdm: x.server.commands / Math.max(1, admitted.length),
    redisCpuPct: (x.server.cpuMs / x.server.windowMs) * 100,
    ...(x.server.nodeCpuMs
      ? { busiestNodeCpuPct: (Math.max(0, ...x.server.nodeCpuMs) / x.server.windowMs) * 100 }
      : {}),
    loadReadPerInstPerTtl: perTtl(total('load_read')),
    loadReadMaxInstPerTtl: perTtl(Math.max(0, ...x.counters.map((c) => c.load_read ?? 0)), 1),
    fetchesPerInstPerTtl: perTtl(total('fetch_rounds')),
    reportsPerInstPerTtl: perTtl(total('load_reports')),
    latency: { p50: percentile(waits, 0.5), p99: percentile(waits, 0.99) },
    firstTries,
    firstTriesFull,
    firstTryFull: firstTries ? firstTriesFull / firstTries : NaN,
    peak,
    oversell: Math.max(0, peak - cell.max),
    oversoldChannels: Object.entries(highest)
      .filter(([, n]) => n > cell.max)
      .map(([c, n]) => `${c} (${n}/${cell.max})`),
    jain: admittedShareJain(arrived, cell.instances),
    clientCpuPct: (x.clientCpuMs / x.server.windowMs) * 100,
    lagP99Ms: x.lagP99Ms,
    lagMaxMs: x.lagMaxMs,
  };
}

async function runCell(
  redis: RedisUnderTest,
  pool: WorkerPool,
  contender: string,
  { cell, sets }: ReturnType<typeof cellOf>,
  shape: FleetSimShape,
): Promise<SimRecord> {
  const channels = channelsOf(cell);
  const durationMs = cell.durationS * 1000;
  const engines = Array.from({ length: cell.workers }, (_, w) => enginesOf(w, cell.workers, cell.instances));
  const arrivals = (w: number): Arrival[] =>
    engines[w]!.flatMap((instance, session) =>
      engineArrivals({
        seed: shape.seed,
        instance,
        ratePerS: shape.ratePerInstance,
        durationMs,
        sets: sets.length,
        hold: shape.hold,
      }).map((a) => ({ ...a, session })),
    ).sort((a, b) => a.at - b.at);
  const { startAt, before, after, results, footprint } = await runOnWorkers(redis, pool, {
    namespace: newNamespace(`sim${cell.instances}x${cell.channels}`, contender),
    setups: engines.map((instances) => ({
      contender,
      channels,
      sets: sets.map((set) => set.map((i) => channels[i]!)),
      instances,
      waitTimeoutMs: cell.waitTimeoutMs,
      warmup: { ms: 1, acquirers: 1, holdMs: 0 }, // about one acquire per engine: connections, scripts
    })),
    run: (w, at) => ({ mode: 'open', arrivals: arrivals(w), windowEndAt: at + durationMs }),
    windowMs: durationMs,
    timeoutMs: durationMs + cell.waitTimeoutMs + shape.hold.capMs + 60_000,
    footprint: true,
  });
  const serverCommands = commandDelta(before, after);
  const nodeCpuMs = perNodeDelta(before, after)?.map((n) => n.cpuMs);
  const f = simFigures({
    cell,
    startAt,
    endAt: startAt + durationMs,
    records: results.flatMap((r) => r.records),
    intervals: results.map((r) => r.intervals),
    counters: results.flatMap((r) => r.counters ?? []),
    server: {
      commands: sum(Object.values(serverCommands)),
      cpuMs: (after.cpuSeconds - before.cpuSeconds) * 1000,
      windowMs: after.at - before.at,
      nodeCpuMs,
    },
    clientCpuMs: sum(results.map((r) => r.clientCpuMs)),
    lagP99Ms: Math.max(0, ...results.map((r) => r.lagP99Ms)),
    lagMaxMs: Math.max(0, ...results.map((r) => r.lagMaxMs)),
  });
  const label = loadContender(contender).label;
  return { topology: redis.topology, contender, label, cell, f, serverCommands, footprint };
}

/** Every cell of the grid, both contenders, on `redis`; an oversell or a failed cell is a failure. */
export async function runFleetSim(
  redis: RedisUnderTest,
  o: FleetSimOptions & { progress: (text: string) => void; suffix?: string },
): Promise<{ records: SimRecord[]; failures: string[] }> {
  const shape = FLEETSIM_SHAPE;
  const grid = GRIDS[o.grid];
  const suffix = o.suffix ?? '';
  const records: SimRecord[] = [];
  const failures: string[] = [];
  const pool = new WorkerPool();
  try {
    for (const channels of grid.channels) {
      for (const instances of grid.instances) {
        const x = cellOf(instances, channels, o, shape);
        for (const contender of FLEETSIM_CONTENDERS) {
          const what = `fleetsim N = ${instances} × C = ${channels} / ${contender}${suffix}`;
          o.progress(`… ${what}`);
          try {
            const r = await runCell(redis, pool, contender, x, shape);
            records.push(r);
            if (r.f.oversell > 0)
              failures.push(`${what}: OVERSELL ${r.f.oversoldChannels.slice(0, 5).join(', ')}`);
          } catch (err) {
            const message = `${what} failed: ${err instanceof Error ? err.message : String(err)}`;
            failures.push(message);
            o.progress(message);
          }
        }
      }
    }
  } finally {
    await pool.close();
  }
  return { records, failures };
}
