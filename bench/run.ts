/**
 * One measured run: a contender set up on the Redis under test, the load applied, and the figures taken over the
 * measurement window — server-side commands and CPU from INFO deltas, round trips from the clients' socket writes,
 * slotgate's own commands by purpose, latencies, refusals and the highest concurrency the holders saw per channel.
 */
import { randomBytes } from 'node:crypto';
import { runLoad, percentile, type LoadResult } from './load.js';
import { commandDelta, RoundTripCounter, type RedisUnderTest, type ServerSnapshot } from './redis.js';
import { candidateSetsOf, channelsOf, describeSets, type Scenario } from './scenarios.js';
import type { FleetRecord } from './fleet.js';
import type { Contender, Session } from './types.js';

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
  serverCommands: Record<string, number>;
  redisCpuMs: number;
  /** Requests the contender's code sent (commands; a pipeline or transaction counts once). */
  roundTrips: number;
  /** Socket writes of its clients (auto-pipelining merges concurrent requests into one). */
  socketWrites: number;
  /** CPU (user + system) of the process(es) running the contender over the window, ms. */
  clientCpuMs: number;
  /** slotgate: client-side commands by purpose in the window (all instances). */
  purposes?: Record<string, number>;
  /** Highest concurrency the holders saw per channel (across processes for multi-instance runs). */
  highest: Record<string, number>;
  /** Channels seen above their max. */
  oversold: { channel: string; highest: number; max: number }[];
  instances?: InstanceFigures[];
  /** HTTP runs: what the load generator saw. */
  http?: {
    generator: string;
    requests: number;
    statuses: Record<string, number>;
    p50Ms: number;
    p99Ms: number;
    admissionP50Ms?: number;
    admissionP99Ms?: number;
  };
  /** Fleet runs (fleet.ts): the per-request figures, fairness and the ideal scheduler's figures. */
  fleet?: FleetRecord;
  /** Set on a run measured on a Redis Cluster (cluster-redis.ts). */
  topology?: 'cluster';
  /** On a cluster: each master's server-side commands and CPU over the window. */
  perNode?: { node: string; commands: number; cpuMs: number }[];
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

export function newNamespace(scenario: string, contender: string): string {
  return `sgbench-${randomBytes(3).toString('hex')}-${scenario}-${contender}`.replace(/[^A-Za-z0-9_-]/g, '_');
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

/** Adds each count of `from` into `into`. */
export function addCounts(into: Record<string, number>, from: Record<string, number> | undefined): void {
  for (const [k, v] of Object.entries(from ?? {})) into[k] = (into[k] ?? 0) + v;
}

export function oversoldOf(highest: Record<string, number>, max: number): RunRecord['oversold'] {
  return Object.entries(highest)
    .filter(([, n]) => n > max)
    .map(([channel, n]) => ({ channel, highest: n, max }));
}

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
  extra: Pick<
    RunRecord,
    'roundTrips' | 'socketWrites' | 'clientCpuMs' | 'purposes' | 'highest' | 'instances'
  >,
): RunRecord {
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
    serverCommands: commandDelta(server.before, server.after),
    redisCpuMs: (server.after.cpuSeconds - server.before.cpuSeconds) * 1000,
    roundTrips: extra.roundTrips,
    socketWrites: extra.socketWrites,
    clientCpuMs: extra.clientCpuMs,
    highest: extra.highest,
    oversold: oversoldOf(extra.highest, base.params.max),
  };
  if (extra.purposes) record.purposes = extra.purposes;
  if (extra.instances) record.instances = extra.instances;
  const nodes = server.after.perNode;
  if (nodes) {
    record.topology = 'cluster';
    record.perNode = nodes.map((n) => {
      const before = server.before.perNode?.find((b) => b.node === n.node);
      const commands = commandDelta(
        { commands: before?.commands ?? {}, cpuSeconds: 0, at: 0 },
        { commands: n.commands, cpuSeconds: 0, at: 0 },
      );
      return {
        node: n.node,
        commands: Object.values(commands).reduce((a, b) => a + b, 0),
        cpuMs: (n.cpuSeconds - (before?.cpuSeconds ?? 0)) * 1000,
      };
    });
  }
  return record;
}

/** What one process measures on its own side of a window: its clients' round trips and writes, its CPU, purposes. */
export interface ClientFigures {
  roundTrips: number;
  socketWrites: number;
  clientCpuMs: number;
  purposes?: Record<string, number>;
}

/** Takes the client-side figures of `session` (whose clients `counter` watches) between start() and end(). */
export function clientMeter(counter: RoundTripCounter, session: Session) {
  let rt = { requests: 0, writes: 0 };
  let cpu = process.cpuUsage();
  let before: Record<string, number> | undefined;
  let after: Record<string, number> | undefined;
  return {
    start(): void {
      rt = counter.snapshot();
      cpu = process.cpuUsage();
      before = session.purposes?.();
    },
    end(): void {
      const now = counter.snapshot();
      rt = { requests: now.requests - rt.requests, writes: now.writes - rt.writes };
      cpu = process.cpuUsage(cpu);
      after = session.purposes?.();
    },
    figures(): ClientFigures {
      const purposes = deltaOf(before, after);
      return {
        roundTrips: rt.requests,
        socketWrites: rt.writes,
        clientCpuMs: (cpu.user + cpu.system) / 1000,
        ...(purposes ? { purposes } : {}),
      };
    },
  };
}

/** A run in this process: one instance. A short unmeasured warm-up first (connections, scripts, JIT). */
export async function runInProcess(
  redis: RedisUnderTest,
  contender: Contender,
  scenario: Scenario,
  durationS: number,
  opts: { warmupMs?: number; acquirers?: number } = {},
): Promise<RunRecord> {
  const channels = channelsOf(scenario);
  const candidateSets = candidateSetsOf(scenario, channels);
  const acquirers = opts.acquirers ?? scenario.acquirers;
  const counter = new RoundTripCounter();
  const namespace = newNamespace(scenario.id, contender.id);
  const session = await contender.setup({
    redisUrl: redis.url,
    channels,
    namespace,
    client: () => counter.client(redis.url),
  });
  const meter = clientMeter(counter, session);
  let before: ServerSnapshot | undefined;
  let after: ServerSnapshot | undefined;
  let load: LoadResult;
  try {
    const warmupMs = opts.warmupMs ?? 500;
    if (warmupMs > 0)
      await runLoad({ session, candidateSets, acquirers, holdMs: scenario.holdMs, durationMs: warmupMs });
    load = await runLoad({
      session,
      candidateSets,
      acquirers,
      holdMs: scenario.holdMs,
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
      params: { ...paramsOf(scenario, durationS, 1), acquirers },
    },
    load,
    { before: before!, after: after! },
    { ...meter.figures(), highest: load.highest },
  );
}
