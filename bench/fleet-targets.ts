/**
 * The fleet targets (fairness across instances, FIFO order, grant latency, utilisation, closeness to the ideal
 * scheduler), evaluated on every fleet run: a matrix of runs × targets, and one summary line per target over
 * slotgate's runs (the defaults) for the targets table. The ideal scheduler's figures on each trace go through the
 * same checks, so the matrix shows which targets a perfect FIFO reaches on that trace at all.
 */
import { clientTargetMatrix, evaluateClientTargets } from './clients-targets.js';
import type { FleetFigures } from './fairness.js';
import { fmt, table } from './report.js';
import type { RunRecord } from './run.js';
import type { TargetResult } from './targets.js';

/** What a check looks at: a run's figures (or the ideal's on its trace) and what the run was. */
interface Subject {
  f: FleetFigures;
  instances: number;
  overload: boolean;
  /** The ideal's figures on the same trace; undefined for the closed loop and for the ideal itself. */
  ideal?: FleetFigures;
  /** Highest holders on one channel across instances, and the max; undefined for the ideal. */
  highest?: { seen: number; max: number };
}

interface Check {
  /** Short column name. */
  key: string;
  target: string;
  /** undefined: the target does not apply. */
  check(s: Subject): { measured: string; pass: boolean } | undefined;
}

const ms = (n: number) => fmt(n, n < 10 ? 2 : 1);
const within = (a: number, ideal: number) => Math.abs(a - ideal) <= 0.1 * ideal + 5;

export const FLEET_CHECKS: readonly Check[] = [
  {
    key: 'share & Jain',
    target: 'equal demand on 2 and 4 instances: min/max share ≥ 0.95 and Jain ≥ 0.99',
    check: ({ f, instances }) =>
      instances < 2
        ? undefined
        : { measured: `${fmt(f.share, 3)}, ${fmt(f.jain, 4)}`, pass: f.share >= 0.95 && f.jain >= 0.99 },
  },
  {
    key: 'p90 spread',
    target: 'worst instance p90 wait ≤ 1.2 × best + 20 ms',
    check: ({ f, instances }) => {
      if (instances < 2) return undefined;
      const p90 = f.perInstance.map((p) => p.wait.p90).filter(Number.isFinite);
      if (p90.length < 2) return undefined;
      const worst = Math.max(...p90);
      const best = Math.min(...p90);
      return { measured: `${ms(worst)} vs ${ms(best)}`, pass: worst <= 1.2 * best + 20 };
    },
  },
  {
    key: 'FIFO',
    target: 'FIFO inversions ≤ 1 % of the requests that had to wait',
    check: ({ f }) =>
      f.waiters === 0
        ? undefined
        : { measured: `${fmt(100 * f.inversionRatio, 2)} % of ${f.waiters}`, pass: f.inversionRatio <= 0.01 },
  },
  {
    key: 'utilisation',
    target: 'slot utilisation under overload ≥ 97 %',
    check: ({ f, overload }) =>
      overload ? { measured: `${fmt(100 * f.utilisation, 1)} %`, pass: f.utilisation >= 0.97 } : undefined,
  },
  {
    key: 'grant p99',
    target: 'grant latency p99 ≤ 5 ms',
    check: ({ f }) =>
      f.grantLatency.count === 0
        ? undefined
        : { measured: `${ms(f.grantLatency.p99)} ms`, pass: f.grantLatency.p99 <= 5 },
  },
  {
    key: 'vs ideal',
    target: 'wait p50 and p90 within 10 % (+5 ms) of the ideal FIFO scheduler, at 60 % and at overload',
    check: ({ f, ideal }) => {
      if (!ideal) return undefined;
      return {
        measured: `${ms(f.wait.p50)}/${ms(f.wait.p90)} vs ${ms(ideal.wait.p50)}/${ms(ideal.wait.p90)}`,
        pass: within(f.wait.p50, ideal.wait.p50) && within(f.wait.p90, ideal.wait.p90),
      };
    },
  },
  {
    key: 'oversell',
    target: 'zero oversell (highest concurrency per channel across instances ≤ max)',
    check: ({ highest }) =>
      highest && { measured: `${highest.seen}/${highest.max}`, pass: highest.seen <= highest.max },
  },
];

/** The runs the checks above apply to: the clients scenario has checks of its own (clients-targets.ts). */
const fleetRuns = (runs: readonly RunRecord[]) => runs.filter((r) => r.fleet && r.fleet.kind !== 'clients');

function subject(r: RunRecord, which: 'run' | 'ideal'): Subject {
  const fleet = r.fleet!;
  const base = { instances: r.params.instances, overload: (fleet.loadPct ?? 0) > 100 };
  if (which === 'ideal') return { ...base, f: fleet.ideal! };
  return {
    ...base,
    f: fleet.figures,
    ...(fleet.ideal ? { ideal: fleet.ideal } : {}),
    highest: { seen: Math.max(0, ...Object.values(r.highest)), max: r.params.max },
  };
}

/**
 * Every fleet run against every target that applies to it; before each trace's first run, the ideal on it. The
 * clients scenario's runs follow in a matrix of their own.
 */
export function fleetTargetMatrix(runs: readonly RunRecord[]): string | undefined {
  const tables = [fleetMatrix(runs), clientTargetMatrix(runs)].filter((t) => t !== undefined);
  return tables.length ? tables.join('\n\n') : undefined;
}

function fleetMatrix(runs: readonly RunRecord[]): string | undefined {
  const mine = fleetRuns(runs);
  if (mine.length === 0) return undefined;
  const cells = (s: Subject) =>
    FLEET_CHECKS.map((c) => {
      const v = c.check(s);
      return v ? `${v.pass ? 'PASS' : '**MISS**'} ${v.measured}` : '–';
    });
  const rows: string[][] = [];
  const traces = new Set<string>();
  for (const r of mine) {
    if (r.fleet!.ideal && !traces.has(r.scenario)) {
      traces.add(r.scenario);
      rows.push([`${r.scenario} ideal FIFO`, ...cells(subject(r, 'ideal'))]);
    }
    rows.push([`${r.scenario} ${r.contender}`, ...cells(subject(r, 'run'))]);
  }
  return table(['run', ...FLEET_CHECKS.map((c) => c.key)], rows);
}

/** One line per target over slotgate's fleet runs (PASS when every run it applies to passes), then the clients'. */
export function evaluateFleetTargets(runs: readonly RunRecord[], contender = 'slotgate'): TargetResult[] {
  return [...evaluateChecks(runs, contender), ...evaluateClientTargets(runs, contender)];
}

function evaluateChecks(runs: readonly RunRecord[], contender: string): TargetResult[] {
  const mine = fleetRuns(runs).filter((r) => r.contender === contender);
  return FLEET_CHECKS.map((c) => {
    const target = `Fleet (${contender}): ${c.target}`;
    const results = mine
      .map((r) => ({ r, v: c.check(subject(r, 'run')) }))
      .filter((x): x is { r: RunRecord; v: NonNullable<typeof x.v> } => x.v !== undefined);
    if (results.length === 0) return { target, measured: 'not run', verdict: 'n/a' as const };
    const missed = results.filter((x) => !x.v.pass);
    return {
      target,
      measured: missed.length
        ? `${missed.length} of ${results.length} runs miss: ` +
          missed.map((x) => `${x.r.scenario} ${x.v.measured}`).join('; ')
        : `${results.length} runs pass`,
      verdict: missed.length ? ('MISS' as const) : ('PASS' as const),
    };
  });
}
