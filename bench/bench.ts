/**
 * `npm run bench`: the chosen scenarios and contenders on one Redis and on a Redis Cluster: markdown on stdout
 * (progress on stderr), every record as JSON in the output directory. An oversell fails the run after the report.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { ADAPTIVE_ID, runAdaptiveGrid, type AdaptiveOptions } from './adaptive/grid.js';
import { variantsFor } from './clients.js';
import { openCluster } from './cluster-redis.js';
import { ALL_IDS, KNOWN_IDS, loadContender } from './contenders/index.js';
import { fleetSection } from './fleet-report.js';
import { runFleet } from './fleet.js';
import { simSection } from './fleetsim-report.js';
import { FLEETSIM_ID, runFleetSim, type FleetSimOptions, type SimRecord } from './fleetsim.js';
import { runHttp } from './http.js';
import { FLEET_SCENARIOS, findFleetScenario, type FleetScenario } from './openloop.js';
import { WorkerPool } from './pool.js';
import { OversellError, type Meta, type RunRecord } from './records.js';
import { openRedis, type RedisUnderTest } from './redis.js';
import { clusterTable, figures, scenarioSection } from './report.js';
import { runInProcess, runScaleOut } from './run.js';
import { SCENARIOS, findScenario, type Scenario } from './scenarios.js';
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
  /** The adaptive scenario (only when named in `only`): its grid and time scale. */
  adaptive?: Pick<AdaptiveOptions, 'grid' | 'timeScale'>;
  /** Directory for the JSON file; none written when undefined. */
  outDir?: string;
  out?: (text: string) => void;
  progress?: (text: string) => void;
}

interface Selection {
  scenarios: (Scenario | FleetScenario)[];
  sim: boolean;
}

const isFleet = (s: Scenario | FleetScenario): s is FleetScenario =>
  s.kind === 'open' || s.kind === 'fair' || s.kind === 'clients';

/** The scenarios of `ids`; an unknown id is an error naming the known ones. */
function select(ids: readonly string[]): Selection {
  const out: Selection = { scenarios: [], sim: false };
  for (const id of ids) {
    const s = findScenario(id) ?? findFleetScenario(id);
    if (id.toLowerCase() === FLEETSIM_ID) out.sim = true;
    else if (s) out.scenarios.push(s);
    else {
      const known = [...[...SCENARIOS, ...FLEET_SCENARIOS].map((x) => x.id), FLEETSIM_ID].join(', ');
      throw new Error(`unknown scenario "${id}" (known: ${known})`);
    }
  }
  return out;
}

export async function runBench(options: BenchOptions = {}) {
  const out = options.out ?? ((t: string) => process.stdout.write(`${t}\n`));
  const progress = options.progress ?? ((t: string) => process.stderr.write(`${t}\n`));
  const started = new Date();
  const durationS = options.durationS ?? 10;
  const topologies = options.topologies ?? ['single', 'cluster'];
  const none: Selection = { scenarios: [], sim: false };
  const all = [...SCENARIOS, ...FLEET_SCENARIOS].map((s) => s.id);
  // the adaptive scenario brings its own Redis and gateways, on one node only
  const isAdaptive = (id: string) => id.toLowerCase() === ADAPTIVE_ID;
  const adaptive = options.only?.some(isAdaptive) ?? false;
  const only = options.only?.filter((id) => !isAdaptive(id));
  const single = topologies.includes('single') ? select(only ?? all) : none;
  const onCluster = topologies.includes('cluster')
    ? select(options.clusterOnly ?? only ?? CLUSTER_DEFAULT_IDS)
    : none;
  // the gateway's HTTP runs stay on one node: its config names one Redis URL
  onCluster.scenarios = onCluster.scenarios.filter((s) => s.kind !== 'http');
  const contenders = [
    ...(options.contenders ?? ALL_IDS).map(loadContender),
    ...(options.extraContenders ?? []),
  ];
  if (contenders.length === 0) throw new Error('no contender given');
  const sim: FleetSimOptions = {
    grid: options.fleetsim?.grid ?? 'full',
    durationS: options.fleetsim?.durationS ?? 10,
    workers: options.fleetsim?.workers ?? 2,
  };
  const used = (x: Selection) => x.scenarios.length > 0 || x.sim;

  const redis = used(single) ? await openRedis(options.redisUrl) : undefined;
  let cluster: RedisUnderTest | undefined;
  try {
    cluster = used(onCluster) ? await openCluster(options.clusterNodes) : undefined;
  } catch (err) {
    await redis?.close();
    throw err;
  }
  const cpus = os.cpus();
  const d = {
    load: durationS,
    scale: options.scaleDurationS ?? durationS,
    http: options.httpDurationS ?? durationS,
    open: options.openDurationS ?? 10,
    warmupMs: options.warmupMs ?? 500,
  };
  const meta: Meta = {
    startedAt: started.toISOString(),
    totalS: 0,
    node: process.version,
    cpu: `${cpus.length} × ${cpus[0]?.model.trim() ?? '?'}`,
    os: `${os.type()} ${os.release()} (${os.arch()})`,
    redis: (redis ?? cluster)?.label ?? '?',
    cluster: cluster?.label,
    durations: d,
    contenders: contenders.map((c) => ({ id: c.id, label: c.label, behaviour: c.behaviour })),
    notes: [
      'The load generator, the contenders and Redis share this machine; numbers from a busy machine are noisy.',
      'Peers without a wait queue (redis-semaphore) turn a full candidate set into a 429 at once; slotgate waits up ' +
        'to 5 s in its bounded queue and Bottleneck in its own limiter queue: read 429 ratios and latencies with that ' +
        'in mind.',
    ],
  };
  out(
    `# slotgate bench\n\n${meta.startedAt} · Redis: ${meta.redis}${cluster && redis ? ` · Cluster: ${cluster.label}` : ''}` +
      ` · Node ${meta.node} · ${meta.cpu} · ${meta.os}\n\nDurations: ${d.load} s per W run, ${d.scale} s per ` +
      `scale-out run, ${d.http} s per HTTP run, ${d.open} s per fleet run (each after a warm-up)` +
      (single.sim || onCluster.sim
        ? `; fleet simulator: ${sim.grid} grid, ${sim.durationS} s per cell, up to ${sim.workers} worker processes.`
        : '.'),
  );
  for (const note of meta.notes) out(`\n> ${note}`);

  const records: RunRecord[] = [];
  const simRecords: SimRecord[] = [];
  const failures: string[] = [];
  let oversell: OversellError | undefined;
  const limitMs = (Math.max(d.load, d.scale, d.http, d.open) * 3 + 60) * 1000;

  /** Runs `work` under the time limit and keeps its record; undefined when it failed (kept as a failure). */
  const attempt = async (what: string, work: () => Promise<RunRecord>) => {
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
      failures.push(`${what} failed: ${err instanceof Error ? err.message : String(err)}`);
      progress(failures.at(-1)!);
      return undefined;
    } finally {
      clearTimeout(timer);
    }
  };

  /** Every scenario of `selection` on `on`, each printed as its runs finish; an oversell stops the pass. */
  const pass = async (
    on: RedisUnderTest,
    selection: Selection,
    own: readonly Contender[],
    suffix: string,
  ) => {
    const byId = own.filter((c) => KNOWN_IDS.includes(c.id)); // the multi-process runs load contenders by id
    const fleetOwn = options.contenders ? byId : byId.filter((c) => FLEET_DEFAULT_IDS.includes(c.id));
    const passMeta = { ...meta, redis: on.label };
    const pool = new WorkerPool();
    const jobs = (s: Scenario | FleetScenario) => {
      const list: [what: string, work: () => Promise<RunRecord>][] = [];
      const add = (c: Contender, n: number, work: () => Promise<RunRecord>, variant = '') =>
        list.push([`${variant}${c.id} × ${n}`, work]);
      if (isFleet(s)) {
        // the open loop and clients2 need a bounded wait; clients2 runs each variant the contender knows
        for (const c of fleetOwn.filter((x) => s.kind === 'fair' || x.boundedWait)) {
          for (const variant of s.kind === 'clients' ? variantsFor(s, c) : [undefined]) {
            const o = { contender: c, scenario: s, durationS: d.open, variant };
            for (const n of s.instances)
              add(c, n, () => runFleet(on, pool, { ...o, instances: n }), variant && `${variant.id} / `);
          }
        }
      } else if (s.kind === 'load') {
        for (const c of own)
          list.push([c.id, () => runInProcess(on, c, s, d.load, { warmupMs: d.warmupMs })]);
      } else if (s.kind === 'scale') {
        for (const c of byId)
          for (const n of s.instances) add(c, n, () => runScaleOut(on, pool, c, s, n, d.scale, d.warmupMs));
      } else {
        for (const c of own.filter((x) => x.id === 'slotgate' || x.id === 'slotgate-rollback'))
          for (const n of s.instances) add(c, n, () => runHttp(on, c, s, n, d.http));
      }
      return list;
    };
    try {
      for (const s of selection.scenarios) {
        const mine: RunRecord[] = [];
        for (const [what, work] of jobs(s)) {
          const r = await attempt(`${s.id} / ${what}${suffix}`, work);
          if (r) mine.push(r);
          else if (s.kind !== 'load') await pool.close(); // a run that timed out may still be using its workers
        }
        if (mine.length)
          out(
            isFleet(s) ? fleetSection(s, mine, passMeta, suffix) : scenarioSection(s, mine, passMeta, suffix),
          );
        if (oversell) return;
      }
    } finally {
      await pool.close();
    }
    if (!selection.sim) return;
    const done = await runFleetSim(on, { ...sim, progress, suffix });
    failures.push(...done.failures); // an oversell or a failed cell of the fleet simulator fails the run
    if (done.records.length === 0) return;
    simRecords.push(...done.records);
    out(simSection(done.records, sim, on.label, suffix));
  };

  try {
    if (adaptive) {
      const done = await runAdaptiveGrid({ ...options.adaptive, outDir: options.outDir, out, progress });
      failures.push(...done.failures);
    }
    if (redis) await pass(redis, single, contenders, '');
    if (cluster && !oversell) {
      out(`\n# On a Redis Cluster\n\nThe same scenarios on ${cluster.label}.`);
      const own = contenders.filter((c) => !c.notOnCluster);
      await pass(cluster, onCluster, own, ' — on the cluster');
    }
    meta.totalS = Math.round((Date.now() - started.getTime()) / 1000);
    const notOnCluster = contenders.flatMap((c) => (c.notOnCluster ? [`${c.label}: ${c.notOnCluster}`] : []));
    const side = clusterTable(records, notOnCluster);
    if (side) out(`\n## Cluster beside single node\n\n${side}`);
    if (records.length)
      out(`\n## Contenders\n\n${meta.contenders.map((c) => `- **${c.label}**: ${c.behaviour}.`).join('\n')}`);
    if (failures.length) out(`\n## Runs that failed\n\n${failures.map((f) => `- ${f}`).join('\n')}`);
    out(`\nTotal: ${meta.totalS} s.`);

    const files: string[] = [];
    if (options.outDir) {
      await mkdir(options.outDir, { recursive: true });
      const file = join(options.outDir, `${started.toISOString().replace(/[:.]/g, '-')}.json`);
      const runs = records.map((r) => ({ ...r, figures: figures(r) }));
      const fleetsim = simRecords.length ? { fleetsim: simRecords } : {};
      await writeFile(file, `${JSON.stringify({ meta, runs, ...fleetsim, failures }, null, 2)}\n`);
      files.push(file);
      out(`\nWrote ${file}.`);
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
