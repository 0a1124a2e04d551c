/**
 * The fleet simulator's figures for one cell (N instances × C channels, one contender), as pure functions of what
 * the workers sent back and the Redis INFO deltas over the window: throughput, Redis cost, load reads per instance
 * per TTL, admission latency, first-try-full share, oversell and fairness.
 */
import { jain } from './fairness.js';
import { highestOverlap, percentile } from './load.js';
import { perInstancePerTtl } from './fleetsim-shape.js';
import type { EngineCounters, SimRecord } from './fleetsim-worker.js';

/** What a cell was: its parameters, printed beside its results. */
export interface SimCell {
  instances: number;
  channels: number;
  setSize: number;
  sets: number;
  /** Channels in at least one set, and the mean number of sets such a channel is in. */
  coveredChannels: number;
  setsPerChannel: number;
  max: number;
  /** Offered arrivals per second, all instances. */
  ratePerS: number;
  meanHoldMs: number;
  /** Offered Erlangs over the slots of the covered channels. */
  offeredShare: number;
  ttlMs: number;
  durationS: number;
  waitTimeoutMs: number;
  /** Worker processes the engines were spread over. */
  workers: number;
}

export interface SimFigures {
  /** Requests arriving in the window, and how many of them were refused, by reason. */
  requests: number;
  refused: Record<string, number>;
  refusalRatio: number;
  /** Tickets handed out in the window. */
  admitted: number;
  admPerS: number;
  redisCmds: number;
  cmdsPerS: number;
  cmdsPerAdm: number;
  /** used_cpu_user + used_cpu_sys over the window, % of one core (summed over the masters on a cluster). */
  redisCpuPct: number;
  /** On a cluster: the busiest master's CPU %. */
  busiestNodeCpuPct?: number;
  loadReadPerInstPerTtl: number;
  /** The instance that read most. */
  loadReadMaxInstPerTtl: number;
  /** Load-view store rounds and report-only summary exchanges per instance per TTL. */
  fetchesPerInstPerTtl: number;
  reportsPerInstPerTtl: number;
  /** Arrival → ticket, ms, of the admitted requests arriving in the window. */
  latency: { p50: number; p99: number };
  firstTries: number;
  firstTriesFull: number;
  /** firstTriesFull / firstTries. */
  firstTryFull: number;
  /** Most holders seen at once on one channel (every process), and how far above max that is (0: no oversell). */
  peak: number;
  oversell: number;
  oversoldChannels: string[];
  /** Jain's index over the instances' admitted / offered (arrivals in the window). */
  jain: number;
  /** CPU of the worker processes over the window, % of one core, and their dispatch lag. */
  clientCpuPct: number;
  lagP99Ms: number;
  lagMaxMs: number;
}

export interface CellInput {
  cell: SimCell;
  /** Wall times of the window's two ends (the workers' counters are taken on timers at them). */
  startAt: number;
  endAt: number;
  records: readonly SimRecord[];
  intervals: readonly Record<string, number[]>[];
  counters: readonly EngineCounters[];
  server: { commands: number; cpuMs: number; windowMs: number; nodeCpuMs?: number[] };
  clientCpuMs: number;
  lagP99Ms: number;
  lagMaxMs: number;
}

/** Jain's index of admitted / offered per instance; instances with no arrival are left out. */
export function admittedShareJain(records: readonly SimRecord[], instances: number): number {
  const offered = new Array<number>(instances).fill(0);
  const admitted = new Array<number>(instances).fill(0);
  for (const r of records) {
    offered[r.instance]!++;
    if (r.channel !== undefined) admitted[r.instance]!++;
  }
  return jain(offered.flatMap((o, i) => (o > 0 ? [admitted[i]! / o] : [])));
}

export function simFigures(x: CellInput): SimFigures {
  const { cell, startAt, endAt } = x;
  const arrived = x.records.filter((r) => r.arrival >= startAt && r.arrival < endAt);
  const refused: Record<string, number> = {};
  for (const r of arrived) if (r.reason !== undefined) refused[r.reason] = (refused[r.reason] ?? 0) + 1;
  const admitted = x.records.filter(
    (r) => r.channel !== undefined && r.outcome >= startAt && r.outcome < endAt,
  );
  const waits = arrived
    .filter((r) => r.channel !== undefined)
    .map((r) => r.outcome - r.arrival)
    .sort((a, b) => a - b);
  const sum = (f: (c: EngineCounters) => number) => x.counters.reduce((a, c) => a + f(c), 0);
  const windowS = x.server.windowMs / 1000;
  const perTtl = (n: number, instances = cell.instances) =>
    perInstancePerTtl(n, instances, x.server.windowMs, cell.ttlMs);
  const highest = highestOverlap(x.intervals);
  const peak = Math.max(0, ...Object.values(highest));
  const firstTries = sum((c) => c.firstTries);
  const firstTriesFull = sum((c) => c.firstTriesFull);
  const refusedCount = arrived.length - waits.length;
  return {
    requests: arrived.length,
    refused,
    refusalRatio: arrived.length ? refusedCount / arrived.length : NaN,
    admitted: admitted.length,
    admPerS: admitted.length / windowS,
    redisCmds: x.server.commands,
    cmdsPerS: x.server.commands / windowS,
    cmdsPerAdm: x.server.commands / Math.max(1, admitted.length),
    redisCpuPct: (x.server.cpuMs / x.server.windowMs) * 100,
    ...(x.server.nodeCpuMs
      ? { busiestNodeCpuPct: (Math.max(0, ...x.server.nodeCpuMs) / x.server.windowMs) * 100 }
      : {}),
    loadReadPerInstPerTtl: perTtl(sum((c) => c.loadRead)),
    loadReadMaxInstPerTtl: perTtl(Math.max(0, ...x.counters.map((c) => c.loadRead)), 1),
    fetchesPerInstPerTtl: perTtl(sum((c) => c.fetches)),
    reportsPerInstPerTtl: perTtl(sum((c) => c.reports)),
    latency: { p50: percentile(waits, 0.5), p99: percentile(waits, 0.99) },
    firstTries,
    firstTriesFull,
    firstTryFull: firstTries ? firstTriesFull / firstTries : NaN,
    peak,
    oversell: Math.max(0, peak - cell.max),
    oversoldChannels: Object.entries(highest)
      .filter(([, n]) => n > cell.max)
      .map(([c, n]) => `c${c} (${n}/${cell.max})`),
    jain: admittedShareJain(arrived, cell.instances),
    clientCpuPct: (x.clientCpuMs / x.server.windowMs) * 100,
    lagP99Ms: x.lagP99Ms,
    lagMaxMs: x.lagMaxMs,
  };
}
