/** The fleet scenarios' markdown: parameters above each scenario's tables, the ideal schedulers first. */
import { measuredRatio, type ClientFigures, type ClientsRecord } from './clients.js';
import { holdText, meanHoldMs } from './draws.js';
import { columns, counts, fmt, highestText, ms, pct, slash, type Column } from './format.js';
import { arrivalRate, type ClientsScenario, type FleetScenario } from './openloop.js';
import type { FleetFigures } from './fairness.js';
import type { Meta, RunRecord } from './records.js';
import { COLUMNS, COST, purposeTable, serverCommandTable } from './report.js';

/** A fleet scenario's section: its parameters, then its runs side by side, the ideal schedulers first. */
export function fleetSection(
  s: FleetScenario,
  runs: readonly RunRecord[],
  meta: Meta,
  suffix: string,
): string {
  const cost: Column<RunRecord>[] = [
    ['Redis cost', (r) => r.label],
    COLUMNS.instances,
    ['admissions', (r) => fmt(r.admissions, 0)],
    ...COST,
    ['measured over s', (r) => fmt(r.windowS, 1)],
  ];
  return [
    `\n## ${s.title} (${s.id})${suffix}`,
    `${paramsLine(s, runs[0]!)} Redis: ${meta.redis}. Node ${meta.node}, ${meta.cpu}.`,
    s.kind === 'clients' && clientsTable(runs),
    fleetTable(s, runs),
    fleetInstanceTable(runs),
    columns(runs, cost),
    serverCommandTable(runs),
    purposeTable(runs),
  ]
    .filter(Boolean)
    .join('\n\n');
}

function paramsLine(s: FleetScenario, r: RunRecord): string {
  const durationS = r.params.durationS;
  if (s.kind === 'clients') return clientsParamsLine(s, durationS);
  const slots = s.channels * s.max;
  const base =
    `**${s.title}** — ${s.channels} bounded channels × max ${s.max} (${slots} slots), one candidate set (all ` +
    `${s.channels} channels offered to every request), ${s.instances.join(' / ')} instances (one process each)`;
  if (s.kind === 'fair') {
    return (
      `${base}, closed loop: ${s.workers} workers per instance, each acquire → hold ${s.holdMs} ms → release ` +
      `(5 ms back-off after a refusal), instance i starting i × ${s.staggerMs} ms after the first; admissions ` +
      `counted over the ${durationS} s in which all run; slotgate's queues hold up to ${s.maxWaiting} per channel.`
    );
  }
  return (
    `${base}, open loop: Poisson arrivals at ${fmt(arrivalRate(s), 1)}/s in total = ${s.loadPct} % of capacity ` +
    `(slots / mean hold = ${fmt(slots / (meanHoldMs(s.hold) / 1000), 1)}/s), dealt round-robin; ` +
    `${holdText(s.hold)}; wait time-out ${s.waitTimeoutMs / 1000} s for ` +
    'every contender ' +
    (s.maxWaiting !== undefined
      ? `(slotgate's queues hold up to ${s.maxWaiting} per channel, so only the time-out refuses, as in the ideal)`
      : "(slotgate's default queue bound: a full queue is a 429 at once; no ideal beside it)") +
    `; ${durationS} s of arrivals (${r.fleet?.figures.requests ?? '?'} requests, seed ${s.seed}: the same trace for ` +
    `every contender, instance count and the ideal); each instance sheds arrivals above ${fmt(s.maxInFlight, 0)} ` +
    'in flight. Utilisation from 1 s to the last arrival.'
  );
}

function clientsParamsLine(s: ClientsScenario, durationS: number): string {
  const workers = s.clients.map(
    (c) => `${c.id}: ${c.workersPerInstance} per instance (${c.workersPerInstance * s.instances[0]!} in all)`,
  );
  const limits = (v: ClientsScenario['variants'][number]) =>
    Object.entries(v.limits)
      .map(([id, n]) => `${id} maxConcurrency ${n}`)
      .join(', ') || 'no maxConcurrency';
  return (
    `**${s.title}** — 1 bounded channel × max ${s.max}, ${s.instances.join(' / ')} instances (one process each), ` +
    `closed-loop workers of every client, weights 1 (5 ms back-off after a 429). Workers: ${workers.join('; ')}. ` +
    `Holds: ${holdText(s.hold)}, each worker's from its own seeded stream (seed ${s.seed}), the same in every run and in ` +
    `the ideal schedulers. Wait time-out ${s.waitTimeoutMs / 1000} s, queues of up to ${s.maxWaiting} per channel ` +
    `and per limited client. Figures over requests arriving in a ${durationS} s window after ` +
    `${s.settleMs / 1000} s of settling. Variants: ${s.variants.map((v) => `"${v.label}" (${limits(v)})`).join(', ')}; ` +
    "peers without clients run the first. Ideal schedulers: the same loop in memory with each variant's limits."
  );
}

/** A row's figures, and its run (absent for an ideal scheduler). */
interface Row {
  name: string;
  instances: string;
  f: FleetFigures;
  r?: RunRecord;
}

const whole = (n: number) => fmt(n, 0);
const versus = (a: number, b: number) => `${a - b >= 0 ? '+' : '−'}${ms(Math.abs(a - b))}`;
const ofRun = (cell: (r: RunRecord) => string) => (x: Row) => (x.r ? cell(x.r) : '–');
const inversions = ({ f }: Row) =>
  f.waiters
    ? `${pct(f.inversionRatio)} (${fmt(f.overtaken, 0)})` +
      (f.overtaken ? `, ≤ ${ms(f.overtakerGapMs)} ms later` : '') +
      (f.overtakenByDispatch !== undefined ? `; by dispatch ${fmt(f.overtakenByDispatch, 0)}` : '')
    : '–';

/** Waits, 429s, FIFO order, grant latency and utilisation: the ideal first (open loop), then every run. */
export function fleetTable(s: FleetScenario, runs: readonly RunRecord[]): string {
  const ideal = runs.find((r) => r.fleet?.ideal)?.fleet?.ideal;
  const vsIdeal = ({ f, r }: Row) =>
    ideal && r ? `${versus(f.wait.p50, ideal.wait.p50)} / ${versus(f.wait.p90, ideal.wait.p90)}` : '0 / 0';
  // clients2 starts every worker at once and asks again right after each release: "had to wait" then hangs on how
  // the first arrivals race the first admissions, so the columns built on it are left out (and shedding, lag)
  const open = s.kind === 'open';
  const queued = s.kind !== 'clients';
  const cols: [string, (x: Row) => string, boolean?][] = [
    ['contender', (x) => x.name],
    ['instances', (x) => x.instances],
    ['requests', (x) => fmt(x.f.requests, 0)],
    ['admitted', (x) => fmt(x.f.admitted, 0)],
    [
      '429 ratio (reasons)',
      ({ f }) => pct(f.refusalRatio) + (counts(f.refusals) ? ` (${counts(f.refusals)})` : ''),
    ],
    ['wait p50 / p90 / p99 ms', ({ f }) => slash([f.wait.p50, f.wait.p90, f.wait.p99], ms)],
    ['p50 / p90 vs ideal ms', vsIdeal, open],
    ['slot utilisation', (x) => pct(x.f.utilisation)],
    ['had to wait', (x) => fmt(x.f.waiters, 0), queued],
    ['FIFO inversions', inversions, queued],
    [
      'grant latency p50 / p99 ms',
      ({ f: { grantLatency: g } }) => (g.count ? slash([g.p50, g.p99], ms) : '–'),
      queued,
    ],
    [
      'event-loop delay p99 / max ms',
      ofRun((r) => slash([r.fleet!.loopDelayP99Ms, r.fleet!.loopDelayMaxMs], ms)),
    ],
    ['highest/max (all processes)', ofRun((r) => highestText(r.highest, r.params.max))],
    ['shed at cap', ofRun((r) => `${r.fleet!.capHits}`), queued],
    ['dispatch lag p99 / max ms', ofRun((r) => slash([r.fleet!.lagP99Ms, r.fleet!.lagMaxMs], ms)), queued],
  ];
  const rows: Row[] = [
    ...(open && ideal ? [{ name: 'ideal FIFO (same trace, in memory)', instances: 'any', f: ideal }] : []),
    ...runs.map((r) => ({ name: r.label, instances: String(r.params.instances), f: r.fleet!.figures, r })),
  ];
  return columns(
    rows,
    cols.filter(([, , shown]) => shown !== false).map(([header, cell]): Column<Row> => [header, cell]),
  );
}

/** Per instance: admitted, 429 ratio and waits, and the fairness across instances (the ideal's before its runs). */
export function fleetInstanceTable(runs: readonly RunRecord[]): string {
  const rows: { name: string; r: RunRecord; f: FleetFigures }[] = [];
  const seen = new Set<number>();
  for (const r of runs) {
    const ideal = r.fleet?.ideal;
    if (ideal && !seen.has(r.params.instances)) {
      seen.add(r.params.instances);
      rows.push({ name: 'ideal FIFO (same trace)', r, f: ideal });
    }
    rows.push({ name: r.label, r, f: r.fleet!.figures });
  }
  type P = FleetFigures['perInstance'][number];
  const each = (
    header: string,
    v: (p: P) => number,
    f: (n: number) => string,
  ): Column<(typeof rows)[number]> => [header, (x) => slash(x.f.perInstance.map(v), f)];
  return columns(rows, [
    ['per instance', (x) => x.name],
    ['instances', (x) => x.r.params.instances],
    each('admitted', (p) => p.admitted, whole),
    each('429 ratio', (p) => p.refusalRatio, pct),
    each('wait p50 ms', (p) => p.wait.p50, ms),
    each('wait p90 ms', (p) => p.wait.p90, ms),
    each('wait p99 ms', (p) => p.wait.p99, ms),
    ["Jain's index", (x) => fmt(x.f.jain, 4)],
    ['min/max share', (x) => fmt(x.f.share, 3)],
  ]);
}

/** clients2, one row per client: the ideal schedulers of each variant's loop first, then every run. */
function clientsTable(runs: readonly RunRecord[]): string {
  type ClientRow = { name: string; c: ClientsRecord; f: ClientFigures; ratio: number; r?: RunRecord };
  const rows: ClientRow[] = [];
  const add = (name: string, c: ClientsRecord, figures: readonly ClientFigures[], r?: RunRecord) => {
    for (const f of figures) rows.push({ name, c, f, ratio: measuredRatio(c, figures), r });
  };
  const seen = new Set<string>();
  for (const r of runs) {
    const c = r.fleet!.clients!;
    if (seen.has(`${c.variant.id}×${r.params.instances}`)) continue;
    seen.add(`${c.variant.id}×${r.params.instances}`);
    add(`ideal weighted-fair (${c.variant.label}; in memory)`, c, c.ideal['weighted-fair']);
    add(`ideal FIFO (${c.variant.label}; in memory)`, c, c.ideal.fifo);
  }
  for (const r of runs) add(r.label, r.fleet!.clients!, r.fleet!.clients!.clients, r);
  const over = (f: ClientFigures) => (f.limit !== undefined && f.highest > f.limit ? ' **OVER**' : '');
  const ratio = ({ c, f, ratio }: ClientRow) =>
    f.client !== c.measured
      ? ''
      : ratio === Infinity
        ? 'starved (0 admitted in the window)'
        : `${fmt(ratio, 2)} ×`;
  return columns(rows, [
    ['run', (x) => x.name],
    ['client', (x) => x.f.client],
    ['workers', (x) => fmt(x.f.workers, 0)],
    ['limit', (x) => (x.f.limit !== undefined ? fmt(x.f.limit, 0) : '–')],
    ['admitted', (x) => fmt(x.f.admitted, 0)],
    ['admissions/s', (x) => fmt(x.f.admittedPerS, 1)],
    ['429s', (x) => fmt(x.f.refused, 0)],
    ['wait p50 / p90 / p99 ms', ({ f }) => slash([f.wait.p50, f.wait.p90, f.wait.p99], ms)],
    ['share of slot-time', (x) => pct(x.f.slotShare)],
    ['highest in flight/limit (all processes)', ({ f }) => `${f.highest}/${f.limit ?? '–'}${over(f)}`],
    ['p90 ÷ ideal weighted-fair', ratio],
  ]);
}
