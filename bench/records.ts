/**
 * What runs leave behind (printed as tables, written as JSON), and the small helpers every part of the bench shares.
 * Types only and leaf functions: every other module may import this one, and it imports none of them.
 */
import { randomBytes } from 'node:crypto';

/** One request as its instance saw it; times in ms on one time base for every process (children.ts, wallNow). */
export interface RequestRecord {
  instance: number;
  arrival: number;
  /** When it was admitted, or refused. */
  outcome: number;
  /** The channel it was admitted on; undefined when refused. */
  channel?: string;
  /** Why it was refused: the contender's reason, `in_flight_cap` (shed by the bench) or `error: …`. */
  reason?: string;
  client?: string;
  hold: number;
  /** Open loop: when the load generator handed it to its contender (the trace time plus the dispatch lag). */
  dispatched?: number;
  /** When the holder gave the slot back (admitted only). */
  release?: number;
}

export interface Waits {
  p50: number;
  p90: number;
  p99: number;
}

/** The fleet figures of one run, or of an ideal scheduler on the same trace (fairness.ts). */
export interface FleetFigures {
  requests: number;
  admitted: number;
  refusals: Record<string, number>;
  refusalRatio: number;
  wait: Waits;
  perInstance: { requests: number; admitted: number; refusalRatio: number; wait: Waits }[];
  jain: number;
  share: number;
  waiters: number;
  overtaken: number;
  inversionRatio: number;
  overtakerGapMs: number;
  /** The same waiters overtaken by a request dispatched after them; undefined unless every record has a dispatch. */
  overtakenByDispatch?: number;
  grantLatency: { count: number; p50: number; p99: number };
  utilisation: number;
}

export type ClientPolicy = 'fifo' | 'weighted-fair';

/** One client's figures in a clients run (clients.ts). */
export interface ClientFigures {
  client: string;
  workers: number;
  weight: number;
  limit?: number;
  requests: number;
  admitted: number;
  admittedPerS: number;
  refused: number;
  wait: Waits;
  /** Its held slot-time inside the window over every client's. */
  slotShare: number;
  /** The most of its requests holding slots at once, across every instance. */
  highest: number;
}

export interface ClientsRecord {
  variant: { id: string; label: string };
  judged?: string;
  /** The client whose wait is compared with the ideal weighted-fair scheduler's. */
  measured: string;
  settleMs: number;
  clients: ClientFigures[];
  /** The ideal schedulers on the same closed loop, with the variant's limits. */
  ideal: Record<ClientPolicy, ClientFigures[]>;
}

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

export interface InstanceFigures {
  admissions: number;
  admissionsPerS: number;
  roundTrips: number;
  socketWrites: number;
  clientCpuMs: number;
  purposes?: Record<string, number>;
  p50Ms: number;
  p99Ms: number;
  refusals: number;
}

/** One measured run of one scenario and contender. */
export interface RunRecord {
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
  /** Requests the contender's code sent (a pipeline or transaction counts once), and its clients' socket writes. */
  roundTrips: number;
  socketWrites: number;
  /** CPU of the process(es) running the contender over the window, ms. */
  clientCpuMs: number;
  /** slotgate's own counters over the window: commands by purpose, load-view rounds, handoffs, first tries. */
  purposes?: Record<string, number>;
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

export const sum = (values: Iterable<number>): number => {
  let s = 0;
  for (const v of values) s += v;
  return s;
};

export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

/** Adds each count of `from` into `into`. */
export function addCounts(into: Record<string, number>, from: Record<string, number> | undefined): void {
  for (const [k, v] of Object.entries(from ?? {})) into[k] = (into[k] ?? 0) + v;
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
