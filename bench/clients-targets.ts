/**
 * The clients scenario's targets (issue #15): the light client's p90 wait against the ideal weighted-fair scheduler
 * on the same loop, every client's highest in flight against its limit, and zero oversell. A matrix of runs ×
 * targets (with the ideal FIFO scheduler's figures through the same fair-share check, to show what arrival order
 * alone gives), and one summary line per target for the Targets table.
 */
import type { ClientFigures, ClientsRecord } from './clients-figures.js';
import { IDEAL_LABEL, measuredRatio, ratioText } from './clients-report.js';
import { fmt, table } from './report.js';
import type { RunRecord } from './run.js';
import type { TargetResult } from './targets.js';

/** What a check looks at: a run's clients figures (or an ideal's) and, for a run, the channel's highest. */
interface Subject {
  c: ClientsRecord;
  figures: readonly ClientFigures[];
  channel?: { seen: number; max: number };
}

interface Check {
  key: string;
  target: string;
  /** undefined: does not apply. */
  check(s: Subject): { measured: string; pass: boolean } | undefined;
}

const ms = (n: number) => fmt(n, n < 10 ? 2 : n < 100 ? 1 : 0);

export const FAIR_SHARE_RATIO = 1.2;

export const CLIENT_CHECKS: readonly Check[] = [
  {
    key: 'light p90 vs ideal WF',
    target: `light client's p90 wait ≤ ${FAIR_SHARE_RATIO} × the ideal weighted-fair scheduler's on the same loop`,
    check: ({ c, figures }) => {
      const ratio = measuredRatio(c, figures);
      if (Number.isNaN(ratio)) return undefined;
      const mine = figures.find((f) => f.client === c.measured)!.wait.p90;
      const ideal = c.ideal['weighted-fair'].find((f) => f.client === c.measured)!.wait.p90;
      return {
        measured:
          ratio === Infinity
            ? `${ratioText(ratio)} vs ${ms(ideal)} ms`
            : `${ms(mine)} vs ${ms(ideal)} ms = ${ratioText(ratio)}`,
        pass: ratio <= FAIR_SHARE_RATIO,
      };
    },
  },
  {
    key: 'client limits',
    target: 'highest in flight per client (across instances) ≤ its limit',
    check: ({ figures }) => {
      const limited = figures.filter((f) => f.limit !== undefined);
      if (limited.length === 0) return undefined;
      return {
        measured: limited.map((f) => `${f.client} ${f.highest}/${f.limit}`).join(', '),
        pass: limited.every((f) => f.highest <= f.limit!),
      };
    },
  },
  {
    key: 'oversell',
    target: 'zero oversell (highest concurrency on the channel across instances ≤ max)',
    check: ({ channel }) =>
      channel && { measured: `${channel.seen}/${channel.max}`, pass: channel.seen <= channel.max },
  },
];

const clientRuns = (runs: readonly RunRecord[]) => runs.filter((r) => r.fleet?.clients);

const subjectOf = (r: RunRecord): Subject => ({
  c: r.fleet!.clients!,
  figures: r.fleet!.clients!.clients,
  channel: { seen: Math.max(0, ...Object.values(r.highest)), max: r.params.max },
});

/**
 * Every clients run (scenario/variant×instances) against every target; before each variant's first run, the ideal
 * FIFO scheduler on its loop.
 */
export function clientTargetMatrix(runs: readonly RunRecord[]): string | undefined {
  const mine = clientRuns(runs);
  if (mine.length === 0) return undefined;
  const cells = (s: Subject) =>
    CLIENT_CHECKS.map((check) => {
      const v = check.check(s);
      return v ? `${v.pass ? 'PASS' : '**MISS**'} ${v.measured}` : '–';
    });
  const rows: string[][] = [];
  const seen = new Set<string>();
  for (const r of mine) {
    const c = r.fleet!.clients!;
    if (!seen.has(r.scenario)) {
      seen.add(r.scenario);
      rows.push([`${r.scenario} ${IDEAL_LABEL.fifo}`, ...cells({ c, figures: c.ideal.fifo })]);
    }
    rows.push([`${r.scenario} ${r.contender}`, ...cells(subjectOf(r))]);
  }
  return table(['run', ...CLIENT_CHECKS.map((c) => c.key)], rows);
}

/**
 * One line per target: the fair share over `contender`'s runs of the judged variants (clients.ts), the limits and
 * oversell over every clients run of every contender.
 */
export function evaluateClientTargets(runs: readonly RunRecord[], contender = 'slotgate'): TargetResult[] {
  const all = clientRuns(runs);
  const judged = all.filter((r) => r.contender === contender && r.fleet!.clients!.judged !== undefined);
  return CLIENT_CHECKS.map((check, k) => {
    const pool = k === 0 ? judged : all;
    const who = k === 0 ? `${contender}, ${judgedLabels(judged)}` : 'every run';
    const target = `Clients (${who}): ${check.target}`;
    const results = pool
      .map((r) => ({ r, v: check.check(subjectOf(r)) }))
      .filter((x): x is { r: RunRecord; v: NonNullable<typeof x.v> } => x.v !== undefined);
    if (results.length === 0) return { target, measured: 'not run', verdict: 'n/a' as const };
    const missed = results.filter((x) => !x.v.pass);
    const line = (x: (typeof results)[number]) => `${x.r.scenario} ${x.r.contender} ${x.v.measured}`;
    return {
      target,
      measured: missed.length
        ? `${missed.length} of ${results.length} runs miss: ${missed.map(line).join('; ')}`
        : `${results.length} runs pass: ${results.map(line).join('; ')}`,
      verdict: missed.length ? ('MISS' as const) : ('PASS' as const),
    };
  });
}

const judgedLabels = (runs: readonly RunRecord[]) =>
  [...new Set(runs.map((r) => `${r.fleet!.clients!.variant.label}: ${r.fleet!.clients!.judged!}`))].join(
    '; ',
  ) || 'judged variant';
