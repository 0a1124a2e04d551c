/**
 * `npm run bench`: every scenario against every contender on one Redis, in one run, with
 * markdown on stdout (progress on stderr), and JSON, SVG and markdown files in the output directory.
 * An oversell anywhere fails the run (exit 1) after the tables and files are written.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { ALL_IDS, loadContenders } from './contenders/index.js';
import { runHttp } from './http.js';
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
  /** Whole-run budget in seconds the scale-out and HTTP durations are shortened to fit. @default 570 */
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

function plan(
  scenarios: readonly Scenario[],
  contenders: number,
  slotgates: number,
  o: Required<Pick<BenchOptions, 'durationS' | 'budgetS' | 'warmupMs'>>,
  scaleS?: number,
  httpS?: number,
) {
  const loadRuns = scenarios.filter((s) => s.kind === 'load').length * contenders;
  const scaleRuns =
    scenarios.filter((s) => s.kind === 'scale').reduce((a, s) => a + s.instances.length, 0) * contenders;
  const httpRuns =
    scenarios.filter((s) => s.kind === 'http').reduce((a, s) => a + s.instances.length, 0) * slotgates;
  const loadTotal = loadRuns * (o.durationS + o.warmupMs / 1000 + LOAD_OVERHEAD_S);
  const childTotal = (d: number, dh: number) =>
    scaleRuns * (d + o.warmupMs / 1000 + CHILD_OVERHEAD_S) + httpRuns * (dh + 1 + CHILD_OVERHEAD_S);
  let scale = scaleS ?? o.durationS;
  let http = httpS ?? o.durationS;
  if (scaleS === undefined && httpS === undefined) {
    while (loadTotal + childTotal(scale, http) > o.budgetS && (scale > 3 || http > 3)) {
      scale = Math.max(3, scale - 1);
      http = Math.max(3, http - 1);
    }
  }
  return { scale, http, estimateS: Math.round(loadTotal + childTotal(scale, http)) };
}

export async function runBench(options: BenchOptions = {}): Promise<BenchReport> {
  const out = options.out ?? ((t: string) => process.stdout.write(`${t}\n`));
  const progress = options.progress ?? ((t: string) => process.stderr.write(`${t}\n`));
  const started = new Date();
  const t0 = performance.now();
  const durationS = options.durationS ?? 10;
  const warmupMs = options.warmupMs ?? 500;
  const budgetS = options.budgetS ?? 570;

  const scenarios: Scenario[] = [];
  for (const id of options.only ?? SCENARIOS.map((s) => s.id)) {
    const s = findScenario(id);
    if (!s) throw new Error(`unknown scenario "${id}" (known: ${SCENARIOS.map((x) => x.id).join(', ')})`);
    scenarios.push(s);
  }
  const loaded = loadContenders(options.contenders ?? ALL_IDS);
  const contenders = [...loaded, ...(options.extraContenders ?? [])];
  if (contenders.length === 0) throw new Error('no contender could be loaded');
  const slotgates = contenders.filter((c) => c.id === 'slotgate' || c.id === 'slotgate-rollback');
  const planned = plan(
    scenarios,
    contenders.length,
    slotgates.length,
    { durationS, budgetS, warmupMs },
    options.scaleDurationS,
    options.httpDurationS,
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
    durations: { load: durationS, scale: planned.scale, http: planned.http, warmupMs },
    contenders: contenders.map((c) => ({ id: c.id, label: c.label, behaviour: c.behaviour })),
    notes: [
      'The load generator, the contenders and Redis share this machine; numbers from a busy machine are noisy.',
      'Peers that have no wait queue (redis-semaphore) turn a full candidate set into a 429 at once; slotgate waits up to 5 s in its bounded queue and Bottleneck in its own (unbounded in time) limiter queue — compare 429 ratios and latencies with that in mind.',
    ],
  };
  out(`# slotgate bench\n`);
  out(
    `${started.toISOString()} · Redis: ${redis.label} · Node ${meta.node} · ${meta.cpu} · ${meta.os}\n\n` +
      `Durations: ${durationS} s per W run, ${planned.scale} s per scale-out run, ${planned.http} s per HTTP run ` +
      `(each after a warm-up); estimated ${Math.round(planned.estimateS / 60)} min for ${scenarios.map((s) => s.id).join(', ')} × ` +
      `${contenders.map((c) => c.id).join(', ')}.` +
      (planned.scale < durationS || planned.http < durationS
        ? ` Scale-out and HTTP runs were shortened to fit the ${Math.round(budgetS / 60)}-minute budget.`
        : ''),
  );
  for (const note of meta.notes) out(`\n> ${note}`);

  const runs: RunRecord[] = [];
  const failures: string[] = [];
  let oversell: OversellError | undefined;
  const attempt = async (what: string, work: () => Promise<RunRecord>): Promise<RunRecord | undefined> => {
    progress(`… ${what}`);
    let timer: NodeJS.Timeout | undefined;
    const limitMs = (Math.max(durationS, planned.scale, planned.http) * 3 + 60) * 1000;
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
    meta.totalS = Math.round((performance.now() - t0) / 1000);
    const targets = evaluateTargets(runs);
    out(`\n## Targets\n\n${targetsTable(targets)}`);
    const readme = readmeTable(runs, meta);
    if (readme) out(`\n## README table\n\n${readme}`);
    out(`\n## Legend\n\n${legend(meta)}`);
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
