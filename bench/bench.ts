/**
 * `npm run bench`: every scenario against every contender on one Redis, in one run, with
 * markdown on stdout (progress on stderr), and JSON, SVG and markdown files in the output directory.
 * An oversell anywhere fails the run (exit 1) after the tables and files are written.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { ALL_IDS, loadContenders } from './contenders/index.js';
import {
  fleetCostTable,
  fleetInstanceTable,
  fleetLegend,
  fleetNotes,
  fleetParamsLine,
  fleetTable,
} from './fleet-report.js';
import { fleetTargetMatrix } from './fleet-targets.js';
import { runFleet, WorkerPool } from './fleet.js';
import { runHttp } from './http.js';
import { FLEET_SCENARIOS, findFleetScenario, type FleetScenario } from './openloop.js';
import { openRedis, type RedisUnderTest } from './redis.js';
import {
  figures,
  httpTable,
  legend,
  loadTable,
  paramsLine,
  purposeTable,
  readmeTable,
  scaleTable,
  serverCommandTable,
  type Meta,
} from './report.js';
import { evaluateTargets, targetsTable } from './targets.js';
import { OversellError, runInProcess, type RunRecord } from './run.js';
import { runScaleOut } from './scale.js';
import { SCENARIOS, findScenario, type Scenario } from './scenarios.js';
import { chartSvg } from './svg.js';
import type { Contender } from './types.js';

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
  /** Directory for the JSON, SVG and markdown files; none written when undefined. */
  outDir?: string;
  out?: (text: string) => void;
  progress?: (text: string) => void;
}

export interface BenchReport {
  meta: Meta;
  runs: RunRecord[];
  targets: ReturnType<typeof evaluateTargets>;
  failures: string[];
  files: string[];
}

const LOAD_OVERHEAD_S = 1;
const CHILD_OVERHEAD_S = 4;
/** Set-up, warm-up and close of a fleet run on pooled workers, plus its drain (the wait time-out under overload). */
const fleetOverheadS = (s: FleetScenario) =>
  1.5 + (s.kind === 'open' && s.loadPct > 100 ? s.waitTimeoutMs / 1000 : 1);

/**
 * Fleet runs of a whole run (no --contenders): slotgate, its admission path without handoff, and the closest peer.
 * The rollback mode waits with the same code as the defaults and Bottleneck has no wait time-out; both still run in
 * the fleet scenarios when named, Bottleneck in the closed loop only.
 */
const FLEET_DEFAULT_IDS = ['slotgate', 'slotgate-no-handoff', 'redis-semaphore'];

/** The contenders a fleet scenario runs: by id in worker processes; open loop needs a bounded wait. */
const fleetContenders = (s: FleetScenario, contenders: readonly Contender[]) =>
  contenders.filter((c) => ALL_IDS.includes(c.id) && (s.kind === 'fair' || c.boundedWait));

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
    Array.from({ length: fleetContenders(s, fleet.contenders).length * s.instances.length }, () => s),
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

export async function runBench(options: BenchOptions = {}): Promise<BenchReport> {
  const out = options.out ?? ((t: string) => process.stdout.write(`${t}\n`));
  const progress = options.progress ?? ((t: string) => process.stderr.write(`${t}\n`));
  const started = new Date();
  const t0 = performance.now();
  const durationS = options.durationS ?? 10;
  const warmupMs = options.warmupMs ?? 500;
  const budgetS = options.budgetS ?? 900;

  const scenarios: Scenario[] = [];
  const fleetScenarios: FleetScenario[] = [];
  for (const id of options.only ?? [...SCENARIOS, ...FLEET_SCENARIOS].map((s) => s.id)) {
    const s = findScenario(id);
    const f = findFleetScenario(id);
    if (s) scenarios.push(s);
    else if (f) fleetScenarios.push(f);
    else {
      const known = [...SCENARIOS, ...FLEET_SCENARIOS].map((x) => x.id).join(', ');
      throw new Error(`unknown scenario "${id}" (known: ${known})`);
    }
  }
  const loaded = loadContenders(options.contenders ?? ALL_IDS);
  const contenders = [...loaded, ...(options.extraContenders ?? [])];
  if (contenders.length === 0) throw new Error('no contender could be loaded');
  const slotgates = contenders.filter((c) => c.id === 'slotgate' || c.id === 'slotgate-rollback');
  const fleetPool = options.contenders
    ? contenders
    : contenders.filter((c) => FLEET_DEFAULT_IDS.includes(c.id));
  const planned = plan(
    scenarios,
    contenders.length,
    slotgates.length,
    { durationS, budgetS, warmupMs },
    options.scaleDurationS,
    options.httpDurationS,
    {
      scenarios: fleetScenarios,
      contenders: fleetPool,
      ...(options.openDurationS ? { openS: options.openDurationS } : {}),
    },
  );

  const redis: RedisUnderTest = await openRedis(options.redisUrl);
  const cpus = os.cpus();
  const meta: Meta = {
    startedAt: started.toISOString(),
    totalS: 0,
    node: process.version,
    cpu: `${cpus.length} × ${cpus[0]?.model.trim() ?? '?'}`,
    os: `${os.type()} ${os.release()} (${os.arch()})`,
    redis: redis.label,
    durations: { load: durationS, scale: planned.scale, http: planned.http, open: planned.open, warmupMs },
    contenders: contenders.map((c) => ({ id: c.id, label: c.label, behaviour: c.behaviour })),
    notes: [
      'The load generator, the contenders and Redis share this machine; numbers from a busy machine are noisy.',
      'Peers that have no wait queue (redis-semaphore) turn a full candidate set into a 429 at once; slotgate waits up to 5 s in its bounded queue and Bottleneck in its own (unbounded in time) limiter queue — compare 429 ratios and latencies with that in mind.',
    ],
  };
  out(`# slotgate bench\n`);
  out(
    `${started.toISOString()} · Redis: ${redis.label} · Node ${meta.node} · ${meta.cpu} · ${meta.os}\n\n` +
      `Durations: ${durationS} s per W run, ${planned.scale} s per scale-out run, ${planned.http} s per HTTP run, ` +
      `${planned.open} s per fleet run (each after a warm-up); estimated ${Math.round(planned.estimateS / 60)} min ` +
      `for ${[...scenarios, ...fleetScenarios].map((s) => s.id).join(', ')} × ` +
      `${contenders.map((c) => c.id).join(', ')}.` +
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

  try {
    for (const s of scenarios) {
      const mine: RunRecord[] = [];
      if (s.kind === 'load') {
        for (const c of contenders) {
          const r = await attempt(`${s.id} / ${c.id}`, () =>
            runInProcess(redis, c, s, durationS, { warmupMs }),
          );
          if (r) mine.push(r);
        }
      } else if (s.kind === 'scale') {
        for (const c of contenders.filter((x) => ALL_IDS.includes(x.id))) {
          for (const n of s.instances) {
            const r = await attempt(`${s.id} / ${c.id} × ${n}`, () =>
              runScaleOut(redis, c, s, n, planned.scale, warmupMs),
            );
            if (r) mine.push(r);
          }
        }
      } else {
        for (const c of slotgates) {
          for (const n of s.instances) {
            const r = await attempt(`${s.id} / ${c.id} × ${n}`, () =>
              runHttp(
                redis,
                { id: c.id as 'slotgate' | 'slotgate-rollback', label: c.label },
                s,
                n,
                planned.http,
              ),
            );
            if (r) mine.push(r);
          }
        }
      }
      if (mine.length === 0) continue;
      out(`\n## ${s.title}\n\n${paramsLine(s, mine[0]!, meta)}\n`);
      out(s.kind === 'load' ? loadTable(mine) : s.kind === 'scale' ? scaleTable(mine) : httpTable(mine));
      const purposes = purposeTable(mine);
      if (purposes) out(`\n${purposes}`);
      if (s.kind !== 'http') out(`\n${serverCommandTable(mine)}`);
      if (oversell) break;
    }
    const pool = new WorkerPool();
    try {
      for (const s of oversell ? [] : fleetScenarios) {
        const mine: RunRecord[] = [];
        for (const c of fleetContenders(s, fleetPool)) {
          for (const n of s.instances) {
            const r = await attempt(`${s.id} / ${c.id} × ${n}`, () =>
              runFleet(redis, pool, { contender: c, scenario: s, instances: n, durationS: planned.open }),
            );
            if (r) mine.push(r);
            else await pool.close(); // a run that timed out may still be using its workers
          }
        }
        if (mine.length === 0) continue;
        out(`\n## ${s.title} (${s.id})\n\n${fleetParamsLine(s, mine, meta)}\n`);
        out(fleetTable(s, mine));
        for (const note of fleetNotes(mine)) out(`\n${note}`);
        out(`\n${fleetInstanceTable(mine)}\n\n${fleetCostTable(mine)}`);
        out(`\n${serverCommandTable(mine)}`);
        const purposes = purposeTable(mine);
        if (purposes) out(`\n${purposes}`);
        if (oversell) break;
      }
    } finally {
      await pool.close();
    }
    meta.totalS = Math.round((performance.now() - t0) / 1000);
    const targets = evaluateTargets(runs);
    out(`\n## Targets\n\n${targetsTable(targets)}`);
    const matrix = fleetTargetMatrix(runs);
    if (matrix) out(`\n### Fleet targets per run\n\n${matrix}`);
    const readme = readmeTable(runs, meta);
    if (readme) out(`\n## README table\n\n${readme}`);
    out(`\n## Legend\n\n${legend(meta)}${runs.some((r) => r.fleet) ? `\n${fleetLegend().join('\n')}` : ''}`);
    if (failures.length) out(`\n## Runs that failed\n\n${failures.map((f) => `- ${f}`).join('\n')}`);
    out(`\nTotal: ${meta.totalS} s.`);

    const files: string[] = [];
    if (options.outDir) {
      await mkdir(options.outDir, { recursive: true });
      const stamp = started.toISOString().replace(/[:.]/g, '-');
      const report = { meta, runs: runs.map((r) => ({ ...r, figures: figures(r) })), targets, failures };
      const json = join(options.outDir, `${stamp}.json`);
      await writeFile(json, `${JSON.stringify(report, null, 2)}\n`);
      files.push(json);
      const svg = chartSvg(runs, `${redis.label} · ${meta.cpu} · ${durationS} s per run`);
      if (svg) {
        const path = join(options.outDir, `${stamp}.svg`);
        await writeFile(path, svg);
        files.push(path);
      }
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
    return { meta, runs, targets, failures, files };
  } finally {
    await redis.close();
  }
}
