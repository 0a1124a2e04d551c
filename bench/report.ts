/**
 * The closed-loop scenarios' markdown: each scenario's parameters above its tables, the contenders side by side,
 * the cluster beside the single node, and the legend.
 */
import { columns, counts, fmt, highestText, table, type Column } from './format.js';
import { sum, type Meta, type RunRecord } from './records.js';
import type { Scenario } from './scenarios.js';

export interface Figures {
  admPerS: number;
  cmdsPerAdm: number;
  cmdsPerS: number;
  cpuUsPerAdm: number;
  cpuPct: number;
  rtPerAdm: number;
  writesPerAdm: number;
  clientCpuUsPerAdm: number;
  refusalRatio: number;
  /** slotgate: load-read commands per second per instance. */
  loadReadPerSPerInstance: number;
}

export function figures(r: RunRecord): Figures {
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
    loadReadPerSPerInstance: r.purposes ? (r.purposes.load_read ?? 0) / r.windowS / r.params.instances : NaN,
  };
}

export function paramsLine(s: Scenario, r: RunRecord, meta: Meta): string {
  const p = r.params;
  const who =
    s.kind === 'http'
      ? `${p.acquirers} HTTP connections in total (split evenly over the instances)`
      : s.kind === 'scale'
        ? `${p.acquirers} concurrent acquirers in total (split evenly over the instances)`
        : `${p.acquirers} concurrent acquirers`;
  const where =
    s.kind === 'load'
      ? '1 instance (the benchmark process)'
      : `${s.instances.join(' / ')} instances (one process each)`;
  return (
    `**${s.title}** — ${p.channels} bounded channels × max ${p.max} (${p.channels * p.max} slots), ` +
    `${p.candidateSets}, ${who}, hold ${p.holdMs} ms, ${p.durationS} s measured per run after a ` +
    `${s.kind === 'http' ? '1 s' : `${meta.durations.warmupMs / 1000} s`} warm-up, ${where}` +
    (s.kind === 'http' ? '' : ', 5 ms back-off after a refusal') +
    `. Redis: ${meta.redis}. Node ${meta.node}, ${meta.cpu}.`
  );
}

type RunColumn = Column<RunRecord>;
const of = (header: string, cell: (f: Figures, r: RunRecord) => string | number): RunColumn => [
  header,
  (r) => cell(figures(r), r),
];
const instancesOf = (r: RunRecord) => r.params.instances;
const refusalText = (r: RunRecord) => {
  const f = figures(r);
  return f.refusalRatio === 0 ? '0%' : `${fmt(100 * f.refusalRatio, 2)}% (${counts(r.refusals)})`;
};

/** The columns the tables share: a table picks and orders them. */
export const COLUMNS = {
  contender: ['contender', (r) => r.label] as RunColumn,
  instances: ['instances', instancesOf] as RunColumn,
  admPerS: of('admissions/s', (f) => fmt(f.admPerS, 0)),
  cmdsPerAdm: of('Redis cmds/adm', (f) => fmt(f.cmdsPerAdm, 2)),
  cmdsPerS: of('Redis cmds/s', (f) => fmt(f.cmdsPerS, 0)),
  cpuUsPerAdm: of('Redis CPU µs/adm', (f) => fmt(f.cpuUsPerAdm, 1)),
  cpuPct: of('Redis CPU %', (f) => fmt(f.cpuPct, 1)),
  clientCpu: of('client CPU µs/adm', (f) => fmt(f.clientCpuUsPerAdm, 0)),
  rtPerAdm: of('round trips/adm', (f) => fmt(f.rtPerAdm, 2)),
  writesPerAdm: of('socket writes/adm', (f) => fmt(f.writesPerAdm, 3)),
  p50: ['p50 ms', (r) => fmt(r.latency.p50, 2)] as RunColumn,
  p99: ['p99 ms', (r) => fmt(r.latency.p99, 2)] as RunColumn,
  refusals: ['429 ratio', refusalText] as RunColumn,
  highest: ['highest/max', (r) => highestText(r.highest, r.params.max)] as RunColumn,
  loadRead: of('load_read cmds/s per instance', (f) => fmt(f.loadReadPerSPerInstance, 0)),
};
const as = (c: RunColumn, header: string): RunColumn => [header, c[1]];
/** What a run cost Redis and the contender's processes, per admission and per second. */
export const COST: RunColumn[] = [
  COLUMNS.cmdsPerAdm,
  COLUMNS.cmdsPerS,
  COLUMNS.cpuUsPerAdm,
  COLUMNS.cpuPct,
  COLUMNS.clientCpu,
  COLUMNS.rtPerAdm,
];

export function loadTable(runs: readonly RunRecord[]): string {
  const c = COLUMNS;
  return columns(runs, [
    c.contender,
    c.admPerS,
    ...COST,
    c.writesPerAdm,
    c.p50,
    c.p99,
    c.refusals,
    c.highest,
  ]);
}

export function scaleTable(runs: readonly RunRecord[]): string {
  const c = COLUMNS;
  const perInstance =
    (f: (i: NonNullable<RunRecord['instances']>[number], r: RunRecord) => number) => (r: RunRecord) =>
      (r.instances ?? []).map((i) => fmt(f(i, r), 0)).join(' / ');
  return columns(runs, [
    c.contender,
    c.instances,
    as(c.admPerS, 'admissions/s total'),
    ['admissions/s per instance', perInstance((i) => i.admissionsPerS)],
    c.cmdsPerS,
    c.cmdsPerAdm,
    c.cpuUsPerAdm,
    c.cpuPct,
    c.clientCpu,
    [
      'load_read cmds/s per instance',
      (r) => (r.purposes ? perInstance((i, x) => (i.purposes?.load_read ?? 0) / x.windowS)(r) : '–'),
    ],
    c.rtPerAdm,
    c.p50,
    c.p99,
    c.refusals,
    as(c.highest, 'highest/max (all processes)'),
  ]);
}

export function httpTable(runs: readonly RunRecord[]): string {
  const c = COLUMNS;
  return columns(runs, [
    c.contender,
    c.instances,
    ['responses/s', (r) => fmt(r.http!.requests / r.windowS, 0)],
    ['statuses', (r) => counts(r.http!.statuses)],
    ['HTTP p50 / p99 ms', (r) => `${fmt(r.http!.p50Ms, 1)} / ${fmt(r.http!.p99Ms, 1)}`],
    ['admission p50 / p99 ms (≤ bucket)', (r) => `${fmt(r.latency.p50, 1)} / ${fmt(r.latency.p99, 1)}`],
    c.admPerS,
    c.cmdsPerAdm,
    c.cmdsPerS,
    c.cpuUsPerAdm,
    c.cpuPct,
    as(c.clientCpu, 'gateway CPU µs/adm'),
    c.rtPerAdm,
    c.loadRead,
    as(c.highest, 'upstream highest/max'),
  ]);
}

const PURPOSES = ['load_read', 'acquire', 'release', 'wait', 'renew', 'settings', 'cooldown'];
const who = (r: RunRecord) => `${r.label}${r.params.instances > 1 ? ` ×${r.params.instances}` : ''}`;

export function purposeTable(runs: readonly RunRecord[]): string | undefined {
  const mine = runs.filter((r) => r.purposes);
  if (mine.length === 0) return undefined;
  const per = (unit: '/adm' | '/s', p: string): RunColumn => [
    `${p} ${unit}`,
    (r) =>
      unit === '/adm'
        ? fmt((r.purposes![p] ?? 0) / Math.max(1, r.admissions), 3)
        : fmt((r.purposes![p] ?? 0) / r.windowS, 0),
  ];
  return columns(mine, [
    ['slotgate commands by purpose', who],
    COLUMNS.loadRead,
    [
      'load fetch rounds/s per instance',
      (r) => fmt((r.purposes!.fetch_rounds ?? NaN) / r.windowS / r.params.instances, 1),
    ],
    ...PURPOSES.map((p) => per('/adm', p)),
    ...PURPOSES.map((p) => per('/s', p)),
  ]);
}

export function serverCommandTable(runs: readonly RunRecord[]): string {
  const names = [...new Set(runs.flatMap((r) => Object.keys(r.serverCommands)))].sort();
  return columns(runs, [
    ['server-side commands per admission', who],
    ...names.map((n): RunColumn => [
      n,
      (r) => fmt((r.serverCommands[n] ?? 0) / Math.max(1, r.admissions), 2),
    ]),
  ]);
}

/** Every run made on both topologies (same scenario and contender), side by side, with what each master spent. */
export function clusterTable(
  runs: readonly RunRecord[],
  notOnCluster: readonly string[] = [],
): string | undefined {
  const pairs = runs
    .filter((r) => r.topology === 'cluster')
    .map((cluster) => ({
      cluster,
      single: runs.find(
        (r) => !r.topology && r.scenario === cluster.scenario && r.contender === cluster.contender,
      ),
    }));
  if (pairs.length === 0) return undefined;
  const perSlot = (r: RunRecord) => figures(r).admPerS / (r.params.channels * r.params.max);
  const rows = pairs.map(({ single: s, cluster: c }) => {
    const both = (f: (r: RunRecord) => string) => `${s ? f(s) : '–'} / ${f(c)}`;
    const adm = Math.max(1, c.admissions);
    return [
      c.scenario,
      c.label,
      both((r) => fmt(figures(r).admPerS, 0)),
      both((r) => fmt(perSlot(r), 1)),
      fmt(s ? perSlot(c) / perSlot(s) : NaN, 2),
      both((r) => fmt(figures(r).cmdsPerAdm, 2)),
      fmt(s ? figures(c).cmdsPerAdm / figures(s).cmdsPerAdm : NaN, 2),
      (c.perNode ?? []).map((n) => fmt(n.commands / adm, 2)).join(' / '),
      both((r) => fmt(figures(r).cpuUsPerAdm, 1)),
      (c.perNode ?? []).map((n) => fmt((n.cpuMs / (c.windowS * 1000)) * 100, 1)).join(' / '),
      both((r) => fmt(r.latency.p99, 1)),
      both((r) => highestText(r.highest, r.params.max)),
    ];
  });
  for (const label of notOnCluster) rows.push(['–', label, ...Array<string>(10).fill('n/a')]);
  return table(
    [
      'scenario',
      'contender',
      'admissions/s single / cluster',
      'admissions/s per slot single / cluster',
      'per-slot ratio',
      'Redis cmds/adm single / cluster (all nodes)',
      'cmds ratio',
      'cluster cmds/adm per master',
      'Redis CPU µs/adm single / cluster (all nodes)',
      'cluster Redis CPU % per master',
      'p99 ms single / cluster',
      'highest/max single / cluster',
    ],
    rows,
  );
}

export function legend(meta: Meta): string {
  return [
    '- **admissions/s**: slots granted inside the measured window, divided by its length.',
    '- **Redis cmds/adm, cmds/s**: `INFO commandstats` delta over the window (commands run inside Lua scripts count; ' +
      'the INFO calls of the measurement do not). **Redis CPU**: `used_cpu_user + used_cpu_sys` delta.',
    "- **round trips/adm**: requests the contender's code sent, counted on its ioredis clients (a Lua script 1, a " +
      'pipeline or MULTI 1); background work counts against the admissions of the window. **socket writes/adm**: ' +
      'writes on those sockets; every contender gets the same options (auto-pipelining on), so it falls as ' +
      'concurrency rises.',
    '- **p50 / p99 ms**: asking for a slot → holding it (waiting included). HTTP: the load generator, and the ' +
      "gateway's admission histogram (bucket upper bounds; the worse instance).",
    '- **429 ratio**: refused / (refused + admitted), with the reasons; the acquirer sleeps 5 ms and asks again.',
    '- **highest/max**: the most holders seen at once on a channel (across processes: hold intervals swept on the ' +
      'monotonic clock; HTTP: counted by the upstream). Above max is an oversell and fails the run. W4 holds 0 ms, ' +
      'so it shows 1/max.',
    "- **load_read**: slotgate's own count of load-read commands; **fetch rounds**: its load-view store reads.",
    '- **cluster**: the same scenario and contender on the private 3-master cluster; ratios are cluster / single ' +
      'node; per master: commands per admission and the share of one core.',
    '',
    ...meta.contenders.map((c) => `- **${c.label}**: ${c.behaviour}.`),
  ].join('\n');
}
