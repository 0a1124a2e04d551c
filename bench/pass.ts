/**
 * One pass of the benchmark: every scenario of the pass against its contenders on one Redis (a single node or a
 * cluster), each scenario's tables printed as its runs finish. bench.ts runs a pass per topology.
 */
import { clientsTable } from './clients-report.js';
import { variantsFor, type ClientVariant } from './clients.js';
import { ALL_IDS } from './contenders/index.js';
import {
  fleetCostTable,
  fleetInstanceTable,
  fleetNotes,
  fleetParamsLine,
  fleetTable,
} from './fleet-report.js';
import { runFleet, WorkerPool } from './fleet.js';
import { runHttp } from './http.js';
import type { FleetScenario } from './openloop.js';
import type { RedisUnderTest } from './redis.js';
import {
  httpTable,
  loadTable,
  paramsLine,
  purposeTable,
  scaleTable,
  serverCommandTable,
  type Meta,
} from './report.js';
import { runInProcess, type RunRecord } from './run.js';
import { runScaleOut } from './scale.js';
import type { Scenario } from './scenarios.js';
import type { Contender } from './types.js';

/** The contenders a fleet scenario runs: by id in worker processes; open loop and clients need a bounded wait. */
export const fleetContenders = (s: FleetScenario, contenders: readonly Contender[]): Contender[] =>
  contenders.filter((c) => ALL_IDS.includes(c.id) && (s.kind === 'fair' || c.boundedWait));

/** What a fleet scenario runs per instance count: each contender, in each of its variants (clients scenario). */
export function fleetRunsOf(
  s: FleetScenario,
  contenders: readonly Contender[],
): { contender: Contender; variant?: ClientVariant }[] {
  return fleetContenders(s, contenders).flatMap((contender) =>
    s.kind === 'clients'
      ? variantsFor(s, contender).map((variant) => ({ contender, variant }))
      : [{ contender }],
  );
}

export interface Pass {
  redis: RedisUnderTest;
  scenarios: readonly Scenario[];
  fleetScenarios: readonly FleetScenario[];
  contenders: readonly Contender[];
  /** The contenders of the fleet scenarios. */
  fleetPool: readonly Contender[];
  durations: { load: number; scale: number; http: number; open: number; warmupMs: number };
  /** The run's meta, with this pass's Redis as `redis`. */
  meta: Meta;
  /** Runs `work` under the run's time limit, records it; undefined when it failed (recorded as a failure). */
  attempt: (what: string, work: () => Promise<RunRecord>) => Promise<RunRecord | undefined>;
  /** True once an oversell was seen: the pass stops after the scenario it happened in. */
  stopped: () => boolean;
  out: (text: string) => void;
  /** Appended to each section title and progress line (e.g. " on the cluster"). */
  suffix?: string;
}

export async function runPass(p: Pass): Promise<RunRecord[]> {
  const { redis, durations: d, attempt, out } = p;
  const suffix = p.suffix ?? '';
  const all: RunRecord[] = [];
  const slotgates = p.contenders.filter((c) => c.id === 'slotgate' || c.id === 'slotgate-rollback');
  for (const s of p.scenarios) {
    const mine: RunRecord[] = [];
    const keep = (r: RunRecord | undefined) => r && mine.push(r);
    if (s.kind === 'load') {
      for (const c of p.contenders) {
        keep(
          await attempt(`${s.id} / ${c.id}${suffix}`, () =>
            runInProcess(redis, c, s, d.load, { warmupMs: d.warmupMs }),
          ),
        );
      }
    } else if (s.kind === 'scale') {
      for (const c of p.contenders.filter((x) => ALL_IDS.includes(x.id))) {
        for (const n of s.instances) {
          keep(
            await attempt(`${s.id} / ${c.id} × ${n}${suffix}`, () =>
              runScaleOut(redis, c, s, n, d.scale, d.warmupMs),
            ),
          );
        }
      }
    } else {
      for (const c of slotgates) {
        for (const n of s.instances) {
          const contender = { id: c.id as 'slotgate' | 'slotgate-rollback', label: c.label };
          keep(
            await attempt(`${s.id} / ${c.id} × ${n}${suffix}`, () => runHttp(redis, contender, s, n, d.http)),
          );
        }
      }
    }
    all.push(...mine);
    if (mine.length === 0) continue;
    out(`\n## ${s.title}${suffix}\n\n${paramsLine(s, mine[0]!, p.meta)}\n`);
    out(s.kind === 'load' ? loadTable(mine) : s.kind === 'scale' ? scaleTable(mine) : httpTable(mine));
    const purposes = purposeTable(mine);
    if (purposes) out(`\n${purposes}`);
    if (s.kind !== 'http') out(`\n${serverCommandTable(mine)}`);
    if (p.stopped()) return all;
  }
  const pool = new WorkerPool();
  try {
    for (const s of p.fleetScenarios) {
      const mine: RunRecord[] = [];
      for (const { contender: c, variant } of fleetRunsOf(s, p.fleetPool)) {
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
          else await pool.close(); // a run that timed out may still be using its workers
        }
      }
      all.push(...mine);
      if (mine.length === 0) continue;
      out(`\n## ${s.title} (${s.id})${suffix}\n\n${fleetParamsLine(s, mine, p.meta)}\n`);
      if (s.kind === 'clients') out(`${clientsTable(mine)}\n`);
      out(fleetTable(s, mine));
      for (const note of fleetNotes(mine)) out(`\n${note}`);
      out(`\n${fleetInstanceTable(mine)}\n\n${fleetCostTable(mine)}`);
      out(`\n${serverCommandTable(mine)}`);
      const purposes = purposeTable(mine);
      if (purposes) out(`\n${purposes}`);
      if (p.stopped()) break;
    }
  } finally {
    await pool.close();
  }
  return all;
}
