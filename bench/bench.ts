/**
 * `npm run bench`: every scenario against every contender on one Redis, in one run, with
 * markdown on stdout (progress on stderr), and JSON, SVG and markdown files in the output directory.
 * An oversell anywhere fails the run (exit 1) after the tables and files are written.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { openCluster } from './cluster-redis.js';
import { clusterLegend, clusterTable, clusterTargets } from './cluster-report.js';
import { ALL_IDS, loadContenders } from './contenders/index.js';
import { fleetLegend } from './fleet-report.js';
import { fleetTargetMatrix } from './fleet-targets.js';
import { FLEETSIM_ID, FleetSimSession, type FleetSimOptions, type FleetSimRecord } from './fleetsim.js';
import { FLEET_SCENARIOS, findFleetScenario, type FleetScenario } from './openloop.js';
import { fleetRunsOf, runPass, type Pass } from './pass.js';
import { openRedis, type RedisUnderTest } from './redis.js';
import { figures, legend, readmeTable, type Meta } from './report.js';
import { evaluateTargets, targetsTable } from './targets.js';
import { OversellError, type RunRecord } from './run.js';
import { SCENARIOS, findScenario, type Scenario } from './scenarios.js';
import { chartSvg } from './svg.js';
import type { Contender } from './types.js';

export type Topology = 'single' | 'cluster';

/** What the cluster pass runs when no --only is given: the closed loop unsaturated and saturated, and a fleet. */
export const CLUSTER_DEFAULT_IDS = ['W1', 'W2', 'open200w'];

export interface BenchOptions {
  /** Scenario ids (default: all). */
  only?: readonly string[];
  /** Contender ids (default: all). */
  contenders?: readonly string[];
  /** Contender objects used in-process in addition (tests); scale-out and HTTP use ids only. */
  extraContenders?: readonly Contender[];
  /** Seconds measured per W run. @default 10 */
  durationS?: number;
  /** @default durationS, shortened to fit the budget */
  scaleDurationS?: number;
  httpDurationS?: number;
  /** Seconds of arrivals per open-loop run, and of the common window of a closed-loop fairness run. @default 10 */
  openDurationS?: number;
  /** Whole-run budget in seconds the scale-out, HTTP and fleet durations are shortened to fit. @default 900 */
  budgetS?: number;
  warmupMs?: number;
  redisUrl?: string;
  /**
   * Where to run: on one node, and/or on a 3-master Redis Cluster (the same scenarios, side by side).
   * @default ['single', 'cluster']
   */
  topologies?: readonly Topology[];
  /** Scenarios of the cluster pass. @default `only`, else CLUSTER_DEFAULT_IDS (HTTP runs on one node only) */
  clusterOnly?: readonly string[];
  /** Seed nodes (host:port) of a cluster to measure instead of a private one. */
  clusterNodes?: readonly string[];
  /** The fleet simulator (scenario id `fleetsim`, never in the default set): its grid, seconds per cell, workers. */
  fleetsim?: Partial<FleetSimOptions>;
  /** Directory for the JSON, SVG and markdown files; none written when undefined. */
  outDir?: string;
  out?: (text: string) => void;
  progress?: (text: string) => void;
}

export interface BenchReport {
  meta: Meta;
  runs: RunRecord[];
  targets: ReturnType<typeof evaluateTargets>;
  /** The fleet simulator's cells, when it ran. */
  fleetsim: FleetSimRecord[];
  failures: string[];
  files: string[];
}

const LOAD_OVERHEAD_S = 1;
const CHILD_OVERHEAD_S = 4;
/** Set-up, warm-up and close of a fleet run on pooled workers, plus its drain (the wait time-out under overload). */
const fleetOverheadS = (s: FleetScenario) =>
  s.kind === 'clients'
    ? 1.5 + s.settleMs / 1000 + 4 // settling, then the queue drains (~3 s in FIFO)
    : 1.5 + (s.kind === 'open' && s.loadPct > 100 ? s.waitTimeoutMs / 1000 : 1);

/**
 * Fleet runs of a whole run (no --contenders): slotgate, its admission path without handoff, and the closest peer.
 * The rollback mode waits with the same code as the defaults and Bottleneck has no wait time-out; both still run in
 * the fleet scenarios when named, Bottleneck in the closed loop only.
 */
const FLEET_DEFAULT_IDS = ['slotgate', 'slotgate-no-handoff', 'redis-semaphore'];

function plan(
  scenarios: readonly Scenario[],
  contenders: number,
  slotgates: number,
  o: Required<Pick<BenchOptions, 'durationS' | 'budgetS' | 'warmupMs'>>,
  scaleS?: number,
  httpS?: number,
  fleet: { scenarios: readonly FleetScenario[]; contenders: readonly Contender[]; openS?: number } = {
    scenarios: [],
    contenders: [],
  },
) {
  const loadRuns = scenarios.filter((s) => s.kind === 'load').length * contenders;
  const scaleRuns =
    scenarios.filter((s) => s.kind === 'scale').reduce((a, s) => a + s.instances.length, 0) * contenders;
  const httpRuns =
    scenarios.filter((s) => s.kind === 'http').reduce((a, s) => a + s.instances.length, 0) * slotgates;
  const loadTotal = loadRuns * (o.durationS + o.warmupMs / 1000 + LOAD_OVERHEAD_S);
  const childTotal = (d: number, dh: number) =>
    scaleRuns * (d + o.warmupMs / 1000 + CHILD_OVERHEAD_S) + httpRuns * (dh + 1 + CHILD_OVERHEAD_S);
  const fleetRuns = fleet.scenarios.flatMap((s) =>
    Array.from({ length: fleetRunsOf(s, fleet.contenders).length * s.instances.length }, () => s),
  );
  const fleetTotal = (d: number) =>
    (fleetRuns.length ? CHILD_OVERHEAD_S : 0) + fleetRuns.reduce((a, s) => a + d + fleetOverheadS(s), 0);
  const total = (d: number, dh: number, df: number) => loadTotal + childTotal(d, dh) + fleetTotal(df);
  let scale = scaleS ?? o.durationS;
  let http = httpS ?? o.durationS;
  let open = fleet.openS ?? 10;
  if (scaleS === undefined && httpS === undefined && fleet.openS === undefined) {
    while (total(scale, http, open) > o.budgetS && (scale > 3 || http > 3 || open > 6)) {
      scale = Math.max(3, scale - 1);
      http = Math.max(3, http - 1);
      open = Math.max(6, open - 1);
    }
  }
  return { scale, http, open, estimateS: Math.round(total(scale, http, open)) };
}

/**
 * The load/scale/HTTP and fleet scenarios of `ids`, and whether the fleet simulator is among them; an unknown id is
 * an error naming the known ones.
 */
function scenariosOf(ids: readonly string[]): {
  scenarios: Scenario[];
  fleet: FleetScenario[];
  sim: boolean;
} {
  const scenarios: Scenario[] = [];
  const fleet: FleetScenario[] = [];
  let sim = false;
  for (const id of ids) {
    if (id.toLowerCase() === FLEETSIM_ID) {
      sim = true;
      continue;
    }
    const s = findScenario(id);
    const f = findFleetScenario(id);
    if (s) scenarios.push(s);
    else if (f) fleet.push(f);
    else {
      const known = [...[...SCENARIOS, ...FLEET_SCENARIOS].map((x) => x.id), FLEETSIM_ID].join(', ');
      throw new Error(`unknown scenario "${id}" (known: ${known})`);
    }
  }
  return { scenarios, fleet, sim };
}

export async function runBench(options: BenchOptions = {}): Promise<BenchReport> {
  const out = options.out ?? ((t: string) => process.stdout.write(`${t}\n`));
  const progress = options.progress ?? ((t: string) => process.stderr.write(`${t}\n`));
  const started = new Date();
  const t0 = performance.now();
  const durationS = options.durationS ?? 10;
  const warmupMs = options.warmupMs ?? 500;
  const budgetS = options.budgetS ?? 900;
  const topologies = options.topologies ?? ['single', 'cluster'];

  const single = topologies.includes('single')
    ? scenariosOf(options.only ?? [...SCENARIOS, ...FLEET_SCENARIOS].map((s) => s.id))
    : { scenarios: [], fleet: [], sim: false };
  // the gateway's HTTP runs stay on one node: its config names one Redis URL in the benchmark's set-up
  const onCluster = topologies.includes('cluster')
    ? scenariosOf(options.clusterOnly ?? options.only ?? CLUSTER_DEFAULT_IDS)
    : { scenarios: [], fleet: [], sim: false };
  onCluster.scenarios = onCluster.scenarios.filter((s) => s.kind !== 'http');
  const loaded = loadContenders(options.contenders ?? ALL_IDS);
  const contenders = [...loaded, ...(options.extraContenders ?? [])];
  if (contenders.length === 0) throw new Error('no contender could be loaded');
  const slotgates = contenders.filter((c) => c.id === 'slotgate' || c.id === 'slotgate-rollback');
  const fleetPool = options.contenders
    ? contenders
    : contenders.filter((c) => FLEET_DEFAULT_IDS.includes(c.id));
  const clusterContenders = contenders.filter((c) => !c.notOnCluster);
  const notOnCluster = contenders.filter((c) => c.notOnCluster);
  const planned = plan(
    single.scenarios,
    contenders.length,
    slotgates.length,
    { durationS, budgetS, warmupMs },
    options.scaleDurationS,
    options.httpDurationS,
    {
      scenarios: single.fleet,
      contenders: fleetPool,
      ...(options.openDurationS ? { openS: options.openDurationS } : {}),
    },
  );
  // the cluster pass takes the single pass's durations; its time comes on top of the budget
  const clusterPlan = plan(
    onCluster.scenarios,
    clusterContenders.length,
    0,
    { durationS, budgetS, warmupMs },
    planned.scale,
    planned.http,
    { scenarios: onCluster.fleet, contenders: fleetPool.filter((c) => !c.notOnCluster), openS: planned.open },
  );
  const clusterRuns = onCluster.scenarios.length + onCluster.fleet.length > 0 || onCluster.sim;
  const sim = new FleetSimSession(options.fleetsim, { out, progress });
  const simS = sim.estimateS(Number(single.sim) + Number(onCluster.sim));

  const redis: RedisUnderTest | undefined =
    single.scenarios.length + single.fleet.length > 0 || single.sim
      ? await openRedis(options.redisUrl)
      : undefined;
  let cluster: RedisUnderTest | undefined;
  try {
    cluster = clusterRuns ? await openCluster(options.clusterNodes) : undefined;
  } catch (err) {
    await redis?.close();
    throw err;
  }
  const cpus = os.cpus();
  const meta: Meta = {
    startedAt: started.toISOString(),
    totalS: 0,
    node: process.version,
    cpu: `${cpus.length} × ${cpus[0]?.model.trim() ?? '?'}`,
    os: `${os.type()} ${os.release()} (${os.arch()})`,
    redis: (redis ?? cluster)?.label ?? '?',
    ...(cluster ? { cluster: cluster.label } : {}),
    durations: { load: durationS, scale: planned.scale, http: planned.http, open: planned.open, warmupMs },
    contenders: contenders.map((c) => ({ id: c.id, label: c.label, behaviour: c.behaviour })),
    notes: [
      'The load generator, the contenders and Redis share this machine; numbers from a busy machine are noisy.',
      'Peers that have no wait queue (redis-semaphore) turn a full candidate set into a 429 at once; slotgate waits up to 5 s in its bounded queue and Bottleneck in its own (unbounded in time) limiter queue — compare 429 ratios and latencies with that in mind.',
    ],
  };
  // what a pass runs: its scenarios × its contenders, and the fleet simulator (its two load views) beside them
  const what = (
    x: { scenarios: Scenario[]; fleet: FleetScenario[]; sim: boolean },
    own: readonly Contender[],
  ) =>
    [
      ...(x.scenarios.length + x.fleet.length
        ? [`${[...x.scenarios, ...x.fleet].map((s) => s.id).join(', ')} × ${own.map((c) => c.id).join(', ')}`]
        : []),
      ...(x.sim ? [`${FLEETSIM_ID} × slotgate, slotgate-per-channel`] : []),
    ].join(' and ');
  out(`# slotgate bench\n`);
  out(
    `${started.toISOString()} · Redis: ${meta.redis}${cluster && redis ? ` · Cluster: ${cluster.label}` : ''} · ` +
      `Node ${meta.node} · ${meta.cpu} · ${meta.os}\n\n` +
      `Durations: ${durationS} s per W run, ${planned.scale} s per scale-out run, ${planned.http} s per HTTP run, ` +
      `${planned.open} s per fleet run (each after a warm-up); estimated ` +
      `${Math.round((planned.estimateS + clusterPlan.estimateS + simS) / 60)} min for ` +
      (redis ? `${what(single, contenders)} on one node` : '') +
      (redis && clusterRuns ? '; ' : '') +
      (clusterRuns ? `${what(onCluster, clusterContenders)} on the cluster` : '') +
      '.' +
      (single.sim || onCluster.sim ? ` ${sim.describe()}` : '') +
      (planned.scale < durationS || planned.http < durationS || planned.open < (options.openDurationS ?? 10)
        ? ` Scale-out, HTTP and fleet runs were shortened to fit the ${Math.round(budgetS / 60)}-minute budget.`
        : ''),
  );
  for (const note of meta.notes) out(`\n> ${note}`);

  const runs: RunRecord[] = [];
  const failures: string[] = [];
  let oversell: OversellError | undefined;
  const attempt = async (what: string, work: () => Promise<RunRecord>): Promise<RunRecord | undefined> => {
    progress(`… ${what}`);
    let timer: NodeJS.Timeout | undefined;
    const limitMs = (Math.max(durationS, planned.scale, planned.http, planned.open) * 3 + 60) * 1000;
    try {
      const record = await Promise.race([
        work(),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no result within ${limitMs / 1000} s`)), limitMs);
        }),
      ]);
      runs.push(record);
      if (record.oversold.length) oversell ??= new OversellError(record);
      return record;
    } catch (err) {
      const message = `${what} failed: ${err instanceof Error ? err.message : String(err)}`;
      failures.push(message);
      progress(message);
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  };
  const pass = (on: RedisUnderTest, which: typeof single, own: readonly Contender[], suffix = ''): Pass => ({
    redis: on,
    scenarios: which.scenarios,
    fleetScenarios: which.fleet,
    contenders: own,
    fleetPool: fleetPool.filter((c) => own.includes(c)),
    durations: { load: durationS, scale: planned.scale, http: planned.http, open: planned.open, warmupMs },
    meta: { ...meta, redis: on.label },
    attempt,
    stopped: () => oversell !== undefined,
    out,
    suffix,
  });

  try {
    if (redis) await runPass(pass(redis, single, contenders));
    if (redis && single.sim && !oversell) await sim.pass(redis, '', 'fleetsim');
    if (cluster && !oversell) {
      out(`\n# On a Redis Cluster\n\nThe same scenarios on ${cluster.label}.`);
      await runPass(pass(cluster, onCluster, clusterContenders, ' — on the cluster'));
      if (onCluster.sim && !oversell) await sim.pass(cluster, ' — on the cluster', 'fleetsim-cluster');
    }
    failures.push(...sim.failures); // an oversell or a failed cell of the fleet simulator fails the run
    meta.totalS = Math.round((performance.now() - t0) / 1000);
    // the single-node targets compare runs on one node; the cluster has targets of its own, against them
    const oneNode = runs.filter((r) => !r.topology);
    const targets = runs.length ? [...evaluateTargets(oneNode), ...clusterTargets(runs)] : [];
    // a fleet-simulator-only run has its own targets block (fleetsim-targets.ts), printed with its tables
    if (runs.length) out(`\n## Targets\n\n${targetsTable(targets)}`);
    const matrix = fleetTargetMatrix(oneNode);
    if (matrix) out(`\n### Fleet targets per run\n\n${matrix}`);
    const side = clusterTable(
      runs,
      notOnCluster.map((c) => `${c.label}: ${c.notOnCluster}`),
    );
    if (side) out(`\n## Cluster beside single node\n\n${side}\n\n${clusterLegend()}`);
    const readme = readmeTable(oneNode, meta);
    if (readme) out(`\n## README table\n\n${readme}`);
    if (runs.length)
      out(
        `\n## Legend\n\n${legend(meta)}${runs.some((r) => r.fleet) ? `\n${fleetLegend().join('\n')}` : ''}`,
      );
    if (failures.length) out(`\n## Runs that failed\n\n${failures.map((f) => `- ${f}`).join('\n')}`);
    out(`\nTotal: ${meta.totalS} s.`);

    const files: string[] = [];
    if (options.outDir) {
      await mkdir(options.outDir, { recursive: true });
      const stamp = started.toISOString().replace(/[:.]/g, '-');
      const report = {
        meta,
        runs: runs.map((r) => ({ ...r, figures: figures(r) })),
        targets,
        ...(sim.records.length ? { fleetsim: sim.records } : {}),
        failures,
      };
      const json = join(options.outDir, `${stamp}.json`);
      await writeFile(json, `${JSON.stringify(report, null, 2)}\n`);
      files.push(json);
      const svg = chartSvg(oneNode, `${meta.redis} · ${meta.cpu} · ${durationS} s per run`);
      if (svg) {
        const path = join(options.outDir, `${stamp}.svg`);
        await writeFile(path, svg);
        files.push(path);
      }
      files.push(...(await sim.writePlots(options.outDir, stamp)));
      if (readme) {
        const path = join(options.outDir, `${stamp}.readme.md`);
        await writeFile(path, `${readme}\n`);
        files.push(path);
      }
      out(`\nWrote ${files.join(', ')}.`);
    }
    if (oversell) {
      out(`\n**FAILED: ${oversell.message}**`);
      throw oversell;
    }
    return { meta, runs, targets, fleetsim: sim.records, failures, files };
  } finally {
    await redis?.close();
    await cluster?.close();
  }
}
