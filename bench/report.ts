/**
 * The closed-loop scenarios' markdown: each scenario's parameters above its tables, the contenders side by side,
 * and the cluster beside the single node.
 */
import { columns, counts, fmt, highestText, type Column } from './format.js';
import { sum, type Meta, type RunRecord } from './records.js';
import type { Scenario } from './scenarios.js';

export function figures(r: RunRecord) {
  const adm = Math.max(1, r.admissions);
  const serverCmds = sum(Object.values(r.serverCommands));
  const refusals = sum(Object.values(r.refusals));
  return {
    admPerS: r.admissions / r.windowS,
    cmdsPerAdm: serverCmds / adm,
    cmdsPerS: serverCmds / r.windowS,
    cpuUsPerAdm: (r.redisCpuMs * 1000) / adm,
    cpuPct: (r.redisCpuMs / (r.windowS * 1000)) * 100,
    rtPerAdm: r.roundTrips / adm,
    writesPerAdm: r.socketWrites / adm,
    clientCpuUsPerAdm: (r.clientCpuMs * 1000) / adm,
    refusalRatio: refusals / Math.max(1, refusals + r.admissions),
    /** slotgate: load-read commands per second per instance. */
    loadReadPerSPerInstance: r.purposes ? (r.purposes.load_read ?? 0) / r.windowS / r.params.instances : NaN,
  };
}
type Figures = ReturnType<typeof figures>;

type RunColumn = Column<RunRecord>;
const of = (header: string, cell: (f: Figures) => string): RunColumn => [header, (r) => cell(figures(r))];
const as = (c: RunColumn, header: string): RunColumn => [header, c[1]];
const refusalText = (r: RunRecord) => {
  const ratio = figures(r).refusalRatio;
  return ratio === 0 ? '0%' : `${fmt(100 * ratio, 2)}% (${counts(r.refusals)})`;
};

/** The columns the tables share: a table picks and orders them. */
export const COLUMNS = {
  contender: ['contender', (r) => r.label] as RunColumn,
  instances: ['instances', (r) => r.params.instances] as RunColumn,
  admPerS: of('admissions/s', (f) => fmt(f.admPerS, 0)),
  writesPerAdm: of('socket writes/adm', (f) => fmt(f.writesPerAdm, 3)),
  p50: ['p50 ms', (r) => fmt(r.latency.p50, 2)] as RunColumn,
  p99: ['p99 ms', (r) => fmt(r.latency.p99, 2)] as RunColumn,
  refusals: ['429 ratio', refusalText] as RunColumn,
  highest: ['highest/max', (r) => highestText(r.highest, r.params.max)] as RunColumn,
  loadRead: of('load_read cmds/s per instance', (f) => fmt(f.loadReadPerSPerInstance, 0)),
};

/** What a run cost Redis and the contender's processes, per admission and per second. */
export const COST: RunColumn[] = [
  of('Redis cmds/adm', (f) => fmt(f.cmdsPerAdm, 2)),
  of('Redis cmds/s', (f) => fmt(f.cmdsPerS, 0)),
  of('Redis CPU µs/adm', (f) => fmt(f.cpuUsPerAdm, 1)),
  of('Redis CPU %', (f) => fmt(f.cpuPct, 1)),
  of('client CPU µs/adm', (f) => fmt(f.clientCpuUsPerAdm, 0)),
  of('round trips/adm', (f) => fmt(f.rtPerAdm, 2)),
];

const perInstance =
  (v: (i: NonNullable<RunRecord['instances']>[number], r: RunRecord) => number) => (r: RunRecord) =>
    (r.instances ?? []).map((i) => fmt(v(i, r), 0)).join(' / ') || '–';

/** Each kind's table of its runs, after the contender column. */
const TABLES: Record<Scenario['kind'], RunColumn[]> = {
  load: [
    COLUMNS.admPerS,
    ...COST,
    COLUMNS.writesPerAdm,
    COLUMNS.p50,
    COLUMNS.p99,
    COLUMNS.refusals,
    COLUMNS.highest,
  ],
  scale: [
    COLUMNS.instances,
    as(COLUMNS.admPerS, 'admissions/s total'),
    ['admissions/s per instance', perInstance((i) => i.admissionsPerS)],
    ...COST,
    [
      'load_read cmds/s per instance',
      (r) => (r.purposes ? perInstance((i, x) => (i.purposes?.load_read ?? 0) / x.windowS)(r) : '–'),
    ],
    COLUMNS.p50,
    COLUMNS.p99,
    COLUMNS.refusals,
    as(COLUMNS.highest, 'highest/max (all processes)'),
  ],
  http: [
    COLUMNS.instances,
    ['responses/s', (r) => fmt(r.http!.requests / r.windowS, 0)],
    ['statuses', (r) => counts(r.http!.statuses)],
    ['HTTP p50 / p99 ms', (r) => `${fmt(r.http!.p50Ms, 1)} / ${fmt(r.http!.p99Ms, 1)}`],
    ['admission p50 / p99 ms (≤ bucket)', (r) => `${fmt(r.latency.p50, 1)} / ${fmt(r.latency.p99, 1)}`],
    COLUMNS.admPerS,
    ...COST.map((c) => (c[0] === 'client CPU µs/adm' ? as(c, 'gateway CPU µs/adm') : c)),
    COLUMNS.loadRead,
    as(COLUMNS.highest, 'upstream highest/max'),
  ],
};

/** A closed-loop scenario's section: its parameters, then its runs side by side. */
export function scenarioSection(s: Scenario, runs: readonly RunRecord[], meta: Meta, suffix: string): string {
  const p = runs[0]!.params;
  const split = s.kind === 'load' ? '' : ' in total (split evenly over the instances)';
  const params =
    `**${s.title}** — ${p.channels} bounded channels × max ${p.max} (${p.channels * p.max} slots), ` +
    `${p.candidateSets}, ${p.acquirers} ${s.kind === 'http' ? 'HTTP connections' : 'concurrent acquirers'}${split}, ` +
    `hold ${p.holdMs} ms, ${p.durationS} s measured per run after a ` +
    `${s.kind === 'http' ? 1 : meta.durations.warmupMs / 1000} s warm-up, ` +
    (s.kind === 'load'
      ? '1 instance (the benchmark process)'
      : `${s.instances.join(' / ')} instances (one process each)`) +
    (s.kind === 'http' ? '' : ', 5 ms back-off after a refusal') +
    `. Redis: ${meta.redis}. Node ${meta.node}, ${meta.cpu}.`;
  const tables = [columns(runs, [COLUMNS.contender, ...TABLES[s.kind]]), purposeTable(runs)];
  if (s.kind !== 'http') tables.push(serverCommandTable(runs));
  return [`\n## ${s.title}${suffix}`, params, ...tables.filter(Boolean)].join('\n\n');
}

const PURPOSES = ['load_read', 'acquire', 'release', 'wait', 'renew', 'settings', 'cooldown'];
const who: RunColumn[1] = (r) => `${r.label}${r.params.instances > 1 ? ` ×${r.params.instances}` : ''}`;

export function purposeTable(runs: readonly RunRecord[]): string | undefined {
  const mine = runs.filter((r) => r.purposes);
  if (mine.length === 0) return undefined;
  const per = (p: string, unit: 'adm' | 's'): RunColumn => [
    `${p} /${unit}`,
    (r) =>
      unit === 'adm'
        ? fmt((r.purposes![p] ?? 0) / Math.max(1, r.admissions), 3)
        : fmt((r.purposes![p] ?? 0) / r.windowS, 0),
  ];
  const rounds = (r: RunRecord) => (r.purposes!.fetch_rounds ?? NaN) / r.windowS / r.params.instances;
  return columns(mine, [
    ['slotgate commands by purpose', who],
    COLUMNS.loadRead,
    ['load fetch rounds/s per instance', (r) => fmt(rounds(r), 1)],
    ...PURPOSES.map((p) => per(p, 'adm')),
    ...PURPOSES.map((p) => per(p, 's')),
  ]);
}

export function serverCommandTable(runs: readonly RunRecord[]): string {
  const names = [...new Set(runs.flatMap((r) => Object.keys(r.serverCommands)))].sort();
  const perAdm = (n: string): RunColumn => [
    n,
    (r) => fmt((r.serverCommands[n] ?? 0) / Math.max(1, r.admissions), 2),
  ];
  return columns(runs, [['server-side commands per admission', who], ...names.map(perAdm)]);
}

/** Every run made on both topologies (same scenario and contender), side by side, with what each master spent. */
export function clusterTable(
  runs: readonly RunRecord[],
  notOnCluster: readonly string[] = [],
): string | undefined {
  const pairs = runs
    .filter((r) => r.topology === 'cluster')
    .map((c) => ({
      c,
      s: runs.find((r) => !r.topology && r.scenario === c.scenario && r.contender === c.contender),
    }));
  if (pairs.length === 0) return undefined;
  type Pair = (typeof pairs)[number] | { c: undefined; label: string };
  const perSlot = (r: RunRecord) => figures(r).admPerS / (r.params.channels * r.params.max);
  const col = (header: string, f: (x: { c: RunRecord; s?: RunRecord }) => string): Column<Pair> => [
    header,
    (x) => (x.c ? f(x) : 'n/a'),
  ];
  const both = (header: string, f: (r: RunRecord) => string) =>
    col(`${header} single / cluster`, ({ c, s }) => `${s ? f(s) : '–'} / ${f(c)}`);
  const ratio = (header: string, f: (r: RunRecord) => number) =>
    col(header, ({ c, s }) => fmt(s ? f(c) / f(s) : NaN, 2));
  const perMaster = (
    header: string,
    f: (n: NonNullable<RunRecord['perNode']>[number], c: RunRecord) => number,
    d: number,
  ) =>
    col(`cluster ${header} per master`, ({ c }) => (c.perNode ?? []).map((n) => fmt(f(n, c), d)).join(' / '));
  return columns<Pair>(
    [...pairs, ...notOnCluster.map((label) => ({ c: undefined, label }))],
    [
      ['scenario', (x) => (x.c ? x.c.scenario : '–')],
      ['contender', (x) => (x.c ? x.c.label : x.label)],
      both('admissions/s', (r) => fmt(figures(r).admPerS, 0)),
      both('admissions/s per slot', (r) => fmt(perSlot(r), 1)),
      ratio('per-slot ratio', perSlot),
      both('Redis cmds/adm (all nodes)', (r) => fmt(figures(r).cmdsPerAdm, 2)),
      ratio('cmds ratio', (r) => figures(r).cmdsPerAdm),
      perMaster('cmds/adm', (n, c) => n.commands / Math.max(1, c.admissions), 2),
      both('Redis CPU µs/adm (all nodes)', (r) => fmt(figures(r).cpuUsPerAdm, 1)),
      perMaster('Redis CPU %', (n, c) => (n.cpuMs / (c.windowS * 1000)) * 100, 1),
      both('p99 ms', (r) => fmt(r.latency.p99, 1)),
      both('highest/max', (r) => highestText(r.highest, r.params.max)),
    ],
  );
}
