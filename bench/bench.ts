/**
 * `npm run bench`: the chosen scenarios against the chosen contenders on one Redis, and on a Redis Cluster, in one
 * run: markdown on stdout as each scenario finishes (progress on stderr), JSON and SVG in the output directory. An
 * oversell anywhere fails the run (exit 1) after the tables and files are written.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { variantsFor } from './clients.js';
import { openCluster } from './cluster-redis.js';
import { ALL_IDS, loadContender } from './contenders/index.js';
import {
  clientsTable,
  fleetCostTable,
  fleetInstanceTable,
  fleetLegend,
  fleetNotes,
  fleetParamsLine,
  fleetTable,
} from './fleet-report.js';
import { runFleet } from './fleet.js';
import { simSection } from './fleetsim-report.js';
import { FLEETSIM_ID, runFleetSim, type FleetSimOptions, type SimRecord } from './fleetsim.js';
import { runHttp } from './http.js';
import { FLEET_SCENARIOS, findFleetScenario, type ClientVariant, type FleetScenario } from './openloop.js';
import { WorkerPool } from './pool.js';
import { OversellError, type Meta, type RunRecord } from './records.js';
import { openRedis, type RedisUnderTest } from './redis.js';
import {
  clusterTable,
  figures,
  httpTable,
  legend,
  loadTable,
  paramsLine,
  purposeTable,
  scaleTable,
  serverCommandTable,
} from './report.js';
import { runInProcess, runScaleOut } from './run.js';
import { SCENARIOS, findScenario, type Scenario } from './scenarios.js';
import { chartSvg, simSvg } from './svg.js';
import type { Contender } from './types.js';

export type Topology = 'single' | 'cluster';

/** What the cluster pass runs when no --only is given: the closed loop unsaturated and saturated, and a fleet. */
export const CLUSTER_DEFAULT_IDS = ['W1', 'W2', 'open200w'];

/** The fleet scenarios' contenders when none are named: slotgate, its path without handoff, the closest peer. */
const FLEET_DEFAULT_IDS = ['slotgate', 'slotgate-no-handoff', 'redis-semaphore'];

export interface BenchOptions {
  /** Scenario ids (default: all but fleetsim). */
  only?: readonly string[];
  /** Contender ids (default: all). */
  contenders?: readonly string[];
  /** Contender objects run in this process in addition (tests); not in the multi-process scenarios. */
  extraContenders?: readonly Contender[];
  /** Seconds measured per W run, and by default per scale-out and HTTP run. @default 10 */
  durationS?: number;
  scaleDurationS?: number;
  httpDurationS?: number;
  /** Seconds of arrivals per open-loop run, and of the measured window of fair2 and clients2. @default 10 */
  openDurationS?: number;
  warmupMs?: number;
  redisUrl?: string;
  /** @default ['single', 'cluster'] */
  topologies?: readonly Topology[];
  /** Scenarios of the cluster pass. @default `only`, else CLUSTER_DEFAULT_IDS (HTTP runs on one node only) */
  clusterOnly?: readonly string[];
  /** Seed nodes (host:port) of a cluster to measure instead of a private one. */
  clusterNodes?: readonly string[];
  fleetsim?: Partial<FleetSimOptions>;
  /** Directory for the JSON and SVG files; none written when undefined. */
  outDir?: string;
  out?: (text: string) => void;
  progress?: (text: string) => void;
}

export interface BenchReport {
  meta: Meta;
  runs: RunRecord[];
  fleetsim: SimRecord[];
  failures: string[];
  files: string[];
}

interface Selection {
  scenarios: Scenario[];
  fleet: FleetScenario[];
  sim: boolean;
}

/** The scenarios of `ids`; an unknown id is an error naming the known ones. */
function select(ids: readonly string[]): Selection {
  const out: Selection = { scenarios: [], fleet: [], sim: false };
  for (const id of ids) {
    const s = findScenario(id);
    const f = findFleetScenario(id);
    if (id.toLowerCase() === FLEETSIM_ID) out.sim = true;
    else if (s) out.scenarios.push(s);
    else if (f) out.fleet.push(f);
    else {
      const known = [...[...SCENARIOS, ...FLEET_SCENARIOS].map((x) => x.id), FLEETSIM_ID].join(', ');
      throw new Error(`unknown scenario "${id}" (known: ${known})`);
    }
  }
  return out;
}

/** What a fleet scenario runs per instance count: each contender (by id, with a bounded wait unless fair2), in each variant. */
export function fleetRunsOf(
  s: FleetScenario,
  contenders: readonly Contender[],
): { contender: Contender; variant?: ClientVariant }[] {
  return contenders
    .filter((c) => ALL_IDS.includes(c.id) && (s.kind === 'fair' || c.boundedWait))
    .flatMap((contender) =>
      s.kind === 'clients'
        ? variantsFor(s, contender).map((variant) => ({ contender, variant }))
        : [{ contender }],
    );
}

interface Pass {
  redis: RedisUnderTest;
  selection: Selection;
  contenders: readonly Contender[];
  fleetContenders: readonly Contender[];
  meta: Meta;
  /** Appended to each section title and progress line. */
  suffix: string;
}

interface Context {
  out: (text: string) => void;
  /** Runs `work` under a time limit and keeps its record; undefined when it failed (kept as a failure). */
  attempt: (what: string, work: () => Promise<RunRecord>) => Promise<RunRecord | undefined>;
  /** True once an oversell was seen: the pass stops after the scenario it happened in. */
  stopped: () => boolean;
}

async function runPass(p: Pass, { out, attempt, stopped }: Context): Promise<void> {
  const { redis, meta, suffix } = p;
  const d = meta.durations;
  const pool = new WorkerPool();
  try {
    for (const s of p.selection.scenarios) {
      const mine: RunRecord[] = [];
      const keep = async (what: string, work: () => Promise<RunRecord>) => {
        const r = await attempt(`${s.id} / ${what}${suffix}`, work);
        if (r) mine.push(r);
        else if (s.kind !== 'load') await pool.close(); // a run that timed out may still be using its workers
      };
      if (s.kind === 'load') {
        for (const c of p.contenders)
          await keep(c.id, () => runInProcess(redis, c, s, d.load, { warmupMs: d.warmupMs }));
      } else if (s.kind === 'scale') {
        for (const c of p.contenders.filter((x) => ALL_IDS.includes(x.id))) {
          for (const n of s.instances)
            await keep(`${c.id} × ${n}`, () => runScaleOut(redis, pool, c, s, n, d.scale, d.warmupMs));
        }
      } else {
        for (const c of p.contenders.filter((x) => x.id === 'slotgate' || x.id === 'slotgate-rollback')) {
          const contender = { id: c.id as 'slotgate' | 'slotgate-rollback', label: c.label };
          for (const n of s.instances)
            await keep(`${c.id} × ${n}`, () => runHttp(redis, contender, s, n, d.http));
        }
      }
      if (mine.length === 0) continue;
      const tables = { load: loadTable, scale: scaleTable, http: httpTable }[s.kind];
      out(`\n## ${s.title}${suffix}\n\n${paramsLine(s, mine[0]!, meta)}\n\n${tables(mine)}`);
      const purposes = purposeTable(mine);
      if (purposes) out(`\n${purposes}`);
      if (s.kind !== 'http') out(`\n${serverCommandTable(mine)}`);
      if (stopped()) return;
    }
    for (const s of p.selection.fleet) {
      const mine: RunRecord[] = [];
      for (const { contender: c, variant } of fleetRunsOf(s, p.fleetContenders)) {
        for (const n of s.instances) {
          const what = `${s.id}${variant ? ` ${variant.id}` : ''} / ${c.id} × ${n}${suffix}`;
          const r = await attempt(what, () =>
            runFleet(redis, pool, {
              contender: c,
              scenario: s,
              instances: n,
              durationS: d.open,
              ...(variant ? { variant } : {}),
            }),
          );
          if (r) mine.push(r);
          else await pool.close();
        }
      }
      if (mine.length === 0) continue;
      out(`\n## ${s.title} (${s.id})${suffix}\n\n${fleetParamsLine(s, mine, meta)}\n`);
      if (s.kind === 'clients') out(`${clientsTable(mine)}\n`);
      out(fleetTable(s, mine));
      for (const note of fleetNotes(mine)) out(`\n${note}`);
      out(`\n${fleetInstanceTable(mine)}\n\n${fleetCostTable(mine)}\n\n${serverCommandTable(mine)}`);
      const purposes = purposeTable(mine);
      if (purposes) out(`\n${purposes}`);
      if (stopped()) return;
    }
  } finally {
    await pool.close();
  }
}

export async function runBench(options: BenchOptions = {}): Promise<BenchReport> {
  const out = options.out ?? ((t: string) => process.stdout.write(`${t}\n`));
  const progress = options.progress ?? ((t: string) => process.stderr.write(`${t}\n`));
  const started = new Date();
  const t0 = performance.now();
  const durationS = options.durationS ?? 10;
  const warmupMs = options.warmupMs ?? 500;
  const topologies = options.topologies ?? ['single', 'cluster'];
  const none: Selection = { scenarios: [], fleet: [], sim: false };
  const single = topologies.includes('single')
    ? select(options.only ?? [...SCENARIOS, ...FLEET_SCENARIOS].map((s) => s.id))
    : none;
  // the gateway's HTTP runs stay on one node: its config names one Redis URL
  const onCluster = topologies.includes('cluster')
    ? select(options.clusterOnly ?? options.only ?? CLUSTER_DEFAULT_IDS)
    : none;
  onCluster.scenarios = onCluster.scenarios.filter((s) => s.kind !== 'http');
  const contenders = [
    ...(options.contenders ?? ALL_IDS).map(loadContender),
    ...(options.extraContenders ?? []),
  ];
  if (contenders.length === 0) throw new Error('no contender given');
  const fleetContenders = options.contenders
    ? contenders
    : contenders.filter((c) => FLEET_DEFAULT_IDS.includes(c.id));
  const sim: FleetSimOptions = { grid: 'full', durationS: 10, workers: 2, ...options.fleetsim };
  const runs = (x: Selection) => x.scenarios.length + x.fleet.length > 0 || x.sim;

  const redis = runs(single) ? await openRedis(options.redisUrl) : undefined;
  let cluster: RedisUnderTest | undefined;
  try {
    cluster = runs(onCluster) ? await openCluster(options.clusterNodes) : undefined;
  } catch (err) {
    await redis?.close();
    throw err;
  }
  const cpus = os.cpus();
  const durations = {
    load: durationS,
    scale: options.scaleDurationS ?? durationS,
    http: options.httpDurationS ?? durationS,
    open: options.openDurationS ?? 10,
    warmupMs,
  };
  const meta: Meta = {
    startedAt: started.toISOString(),
    totalS: 0,
    node: process.version,
    cpu: `${cpus.length} × ${cpus[0]?.model.trim() ?? '?'}`,
    os: `${os.type()} ${os.release()} (${os.arch()})`,
    redis: (redis ?? cluster)?.label ?? '?',
    ...(cluster ? { cluster: cluster.label } : {}),
    durations,
    contenders: contenders.map((c) => ({ id: c.id, label: c.label, behaviour: c.behaviour })),
    notes: [
      'The load generator, the contenders and Redis share this machine; numbers from a busy machine are noisy.',
      'Peers without a wait queue (redis-semaphore) turn a full candidate set into a 429 at once; slotgate waits up to ' +
        '5 s in its bounded queue and Bottleneck in its own limiter queue: compare 429 ratios and latencies with that ' +
        'in mind.',
    ],
  };
  out(`# slotgate bench\n`);
  out(
    `${meta.startedAt} · Redis: ${meta.redis}${cluster && redis ? ` · Cluster: ${cluster.label}` : ''} · ` +
      `Node ${meta.node} · ${meta.cpu} · ${meta.os}\n\n` +
      `Durations: ${durations.load} s per W run, ${durations.scale} s per scale-out run, ${durations.http} s per ` +
      `HTTP run, ${durations.open} s per fleet run (each after a warm-up)` +
      (single.sim || onCluster.sim
        ? `; fleet simulator: ${sim.grid} grid, ${sim.durationS} s per cell, up to ${sim.workers} worker processes.`
        : '.'),
  );
  for (const note of meta.notes) out(`\n> ${note}`);

  const records: RunRecord[] = [];
  const simRecords: SimRecord[] = [];
  const plots: { name: string; svg: string }[] = [];
  const failures: string[] = [];
  let oversell: OversellError | undefined;
  const limitMs = (Math.max(durations.load, durations.scale, durations.http, durations.open) * 3 + 60) * 1000;
  const context: Context = {
    out,
    stopped: () => oversell !== undefined,
    async attempt(what, work) {
      progress(`… ${what}`);
      let timer: NodeJS.Timeout | undefined;
      try {
        const record = await Promise.race([
          work(),
          new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(new Error(`no result within ${limitMs / 1000} s`)), limitMs);
          }),
        ]);
        records.push(record);
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
    },
  };
  const pass = async (
    on: RedisUnderTest,
    selection: Selection,
    own: readonly Contender[],
    suffix: string,
  ) => {
    await runPass(
      {
        redis: on,
        selection,
        contenders: own,
        fleetContenders: fleetContenders.filter((c) => own.includes(c)),
        meta: { ...meta, redis: on.label },
        suffix,
      },
      context,
    );
    if (!selection.sim || oversell) return;
    const done = await runFleetSim(on, { ...sim, progress, suffix });
    failures.push(...done.failures); // an oversell or a failed cell of the fleet simulator fails the run
    if (done.records.length === 0) return;
    simRecords.push(...done.records);
    out(simSection(done.records, sim, on.label, suffix));
    const title = `Redis CPU against fleet size and channel count${suffix}`;
    const subtitle = `${on.label} · ${sim.durationS} s per cell`;
    const name = on.topology === 'cluster' ? 'fleetsim-cluster' : 'fleetsim';
    plots.push({ name, svg: simSvg(done.records, title, subtitle) });
  };

  try {
    if (redis) await pass(redis, single, contenders, '');
    const notOnCluster = contenders.filter((c) => c.notOnCluster);
    if (cluster && !oversell) {
      out(`\n# On a Redis Cluster\n\nThe same scenarios on ${cluster.label}.`);
      await pass(
        cluster,
        onCluster,
        contenders.filter((c) => !c.notOnCluster),
        ' — on the cluster',
      );
    }
    meta.totalS = Math.round((performance.now() - t0) / 1000);
    const side = clusterTable(
      records,
      notOnCluster.map((c) => `${c.label}: ${c.notOnCluster}`),
    );
    if (side) out(`\n## Cluster beside single node\n\n${side}`);
    if (records.length)
      out(
        `\n## Legend\n\n${legend(meta)}${records.some((r) => r.fleet) ? `\n\nFleet scenarios:\n\n${fleetLegend()}` : ''}`,
      );
    if (failures.length) out(`\n## Runs that failed\n\n${failures.map((f) => `- ${f}`).join('\n')}`);
    out(`\nTotal: ${meta.totalS} s.`);

    const files: string[] = [];
    if (options.outDir) {
      await mkdir(options.outDir, { recursive: true });
      const stamp = started.toISOString().replace(/[:.]/g, '-');
      const write = async (name: string, text: string) => {
        const path = join(options.outDir!, `${stamp}${name}`);
        await writeFile(path, text);
        files.push(path);
      };
      const runs = records.map((r) => ({ ...r, figures: figures(r) }));
      const report = { meta, runs, ...(simRecords.length ? { fleetsim: simRecords } : {}), failures };
      await write('.json', `${JSON.stringify(report, null, 2)}\n`);
      const svg = chartSvg(
        records.filter((r) => !r.topology),
        `${meta.redis} · ${meta.cpu} · ${durationS} s per run`,
      );
      if (svg) await write('.svg', svg);
      for (const plot of plots) await write(`.${plot.name}.svg`, plot.svg);
      out(`\nWrote ${files.join(', ')}.`);
    }
    if (oversell) {
      out(`\n**FAILED: ${oversell.message}**`);
      throw oversell;
    }
    return { meta, runs: records, fleetsim: simRecords, failures, files };
  } finally {
    await redis?.close();
    await cluster?.close();
  }
}
