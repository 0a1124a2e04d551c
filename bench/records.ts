/**
 * What a run leaves behind (printed as tables, written as JSON), and the small helpers every part of the bench
 * shares. Only types come in from the figures' modules (fairness.ts, clients.ts), so any module may import this one.
 */
import { randomBytes } from 'node:crypto';
import type { ClientsRecord } from './clients.js';
import type { FleetFigures } from './fairness.js';

/** What a fleet run (fleet.ts) adds to its RunRecord. */
export interface FleetRecord {
  kind: 'open' | 'fair' | 'clients';
  loadPct?: number;
  ratePerS?: number;
  meanHoldMs?: number;
  seed?: number;
  waitTimeoutMs?: number;
  figures: FleetFigures;
  /** The ideal FIFO scheduler on the same trace (open loop). */
  ideal?: FleetFigures;
  clients?: ClientsRecord;
  capHits: number;
  /** Dispatch lag of arrivals behind their trace time, and event-loop delay, ms: the worst instance's. */
  lagP99Ms: number;
  lagMaxMs: number;
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
}

/** What the process(es) running the contender did over a window (a run's, or one instance's). */
export interface ProcessFigures {
  /** Requests the contender's code sent (a pipeline or transaction counts once), and its clients' socket writes. */
  roundTrips: number;
  socketWrites: number;
  /** CPU of the process(es), ms. */
  clientCpuMs: number;
  /** slotgate's own counters, summed over its sessions: commands by purpose, load-view rounds, handoffs, first tries. */
  purposes?: Record<string, number>;
}

export interface InstanceFigures extends ProcessFigures {
  admissions: number;
  admissionsPerS: number;
  p50Ms: number;
  p99Ms: number;
  refusals: number;
}

/** One measured run of one scenario and contender. */
export interface RunRecord extends ProcessFigures {
  scenario: string;
  contender: string;
  label: string;
  params: {
    channels: number;
    max: number;
    acquirers: number;
    holdMs: number;
    durationS: number;
    instances: number;
    candidateSets: string;
  };
  windowS: number;
  admissions: number;
  refusals: Record<string, number>;
  errors: Record<string, number>;
  latency: { p50: number; p99: number; max: number };
  refusalLatency: { p50: number; p99: number };
  /** INFO commandstats delta over the window (Lua-internal commands included). */
  serverCommands: Record<string, number>;
  redisCpuMs: number;
  /** Highest concurrency the holders saw per channel (across processes), and the channels seen above their max. */
  highest: Record<string, number>;
  oversold: { channel: string; highest: number; max: number }[];
  instances?: InstanceFigures[];
  http?: {
    generator: string;
    requests: number;
    statuses: Record<string, number>;
    p50Ms: number;
    p99Ms: number;
  };
  fleet?: FleetRecord;
  topology?: 'cluster';
  /** On a cluster: each master's commands and CPU over the window. */
  perNode?: { node: string; commands: number; cpuMs: number }[];
}

/** The machine and durations of one `npm run bench`. */
export interface Meta {
  startedAt: string;
  totalS: number;
  node: string;
  cpu: string;
  os: string;
  redis: string;
  cluster?: string;
  durations: { load: number; scale: number; http: number; open: number; warmupMs: number };
  contenders: { id: string; label: string; behaviour: string }[];
  notes: string[];
}

export class OversellError extends Error {
  constructor(readonly record: RunRecord) {
    super(
      `OVERSELL in ${record.scenario} / ${record.contender}: ` +
        record.oversold.map((o) => `${o.channel} had ${o.highest} holders at once (max ${o.max})`).join('; '),
    );
    this.name = 'OversellError';
  }
}

export const sum = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0);

/** Adds each count of every one of `from` into `into`, and returns `into`. */
export function addCounts(
  into: Record<string, number>,
  ...from: readonly (Record<string, number> | undefined)[]
): Record<string, number> {
  for (const counts of from) for (const [k, v] of Object.entries(counts ?? {})) into[k] = (into[k] ?? 0) + v;
  return into;
}

export function deltaOf(
  before: Record<string, number> | undefined,
  after: Record<string, number> | undefined,
): Record<string, number> | undefined {
  if (!before || !after) return undefined;
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(after)) out[k] = v - (before[k] ?? 0);
  return out;
}

/** Unique to one run: every key a contender writes contains it, so a shared Redis can be cleaned up. */
export function newNamespace(scenario: string, contender: string): string {
  return `sgbench-${randomBytes(3).toString('hex')}-${scenario}-${contender}`.replace(/[^A-Za-z0-9_-]/g, '_');
}
