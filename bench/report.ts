/**
 * What the benchmark prints and writes: markdown tables (parameters above each), a legend and a README-ready table
 * (the acceptance targets are in targets.ts).
 */
import type { RunRecord } from './run.js';
import type { Scenario } from './scenarios.js';

export interface Meta {
  startedAt: string;
  totalS: number;
  node: string;
  cpu: string;
  os: string;
  redis: string;
  /** The Redis Cluster of the cluster pass, when there was one. */
  cluster?: string;
  durations: { load: number; scale: number; http: number; open?: number; warmupMs: number };
  contenders: { id: string; label: string; behaviour: string }[];
  notes: string[];
}

export interface Figures {
  admPerS: number;
  serverCmds: number;
  cmdsPerAdm: number;
  cmdsPerS: number;
  cpuUsPerAdm: number;
  cpuPct: number;
  rtPerAdm: number;
  writesPerAdm: number;
  /** CPU of the process(es) running the contender, µs per admission. */
  clientCpuUsPerAdm: number;
  refusals: number;
  refusalRatio: number;
  highestMax: number;
  /** slotgate: client-side load-read commands per second per instance. */
  loadReadPerSPerInstance: number;
}

const sum = (values: Iterable<number>) => {
  let s = 0;
  for (const v of values) s += v;
  return s;
};

export function figures(r: RunRecord): Figures {
  const adm = Math.max(1, r.admissions);
  const serverCmds = sum(Object.values(r.serverCommands));
  const refusals = sum(Object.values(r.refusals));
  return {
    admPerS: r.admissions / r.windowS,
    serverCmds,
    cmdsPerAdm: serverCmds / adm,
    cmdsPerS: serverCmds / r.windowS,
    cpuUsPerAdm: (r.redisCpuMs * 1000) / adm,
    cpuPct: (r.redisCpuMs / (r.windowS * 1000)) * 100,
    rtPerAdm: r.roundTrips / adm,
    writesPerAdm: r.socketWrites / adm,
    clientCpuUsPerAdm: (r.clientCpuMs * 1000) / adm,
    refusals,
    refusalRatio: refusals / Math.max(1, refusals + r.admissions),
    highestMax: Math.max(0, ...Object.values(r.highest)),
    loadReadPerSPerInstance: r.purposes ? (r.purposes.load_read ?? 0) / r.windowS / r.params.instances : NaN,
  };
}

export const fmt = (n: number, digits = 1): string =>
  Number.isFinite(n)
    ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 })
    : '–';

export function table(headers: readonly string[], rows: readonly (readonly (string | number)[])[]): string {
  const line = (cells: readonly (string | number)[]) => `| ${cells.join(' | ')} |`;
  return [line(headers), line(headers.map(() => '---')), ...rows.map(line)].join('\n');
}

function refusalText(r: RunRecord, f: Figures): string {
  if (f.refusals === 0) return '0%';
  const reasons = Object.entries(r.refusals)
    .filter(([, v]) => v > 0)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  return `${fmt(100 * f.refusalRatio, 2)}% (${reasons})`;
}

function highestText(r: RunRecord, f: Figures): string {
  return `${f.highestMax}/${r.params.max}${r.oversold.length ? ' **OVERSOLD**' : ''}`;
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

/** A table column: its header and its cell for one run. */
interface Column {
  header: string;
  cell: (r: RunRecord, f: Figures) => string | number;
}

const column = (header: string, cell: Column['cell']): Column => ({ header, cell });
/** The same cell under another header. */
const renamed = (c: Column, header: string): Column => ({ ...c, header });

const COLUMNS = {
  contender: column('contender', (r) => r.label),
  instances: column('instances', (r) => r.params.instances),
  admPerS: column('admissions/s', (_, f) => fmt(f.admPerS, 0)),
  cmdsPerAdm: column('Redis cmds/adm', (_, f) => fmt(f.cmdsPerAdm, 2)),
  cmdsPerS: column('Redis cmds/s', (_, f) => fmt(f.cmdsPerS, 0)),
  cpuUsPerAdm: column('Redis CPU µs/adm', (_, f) => fmt(f.cpuUsPerAdm, 1)),
  cpuPct: column('Redis CPU %', (_, f) => fmt(f.cpuPct, 1)),
  clientCpu: column('client CPU µs/adm', (_, f) => fmt(f.clientCpuUsPerAdm, 0)),
  rtPerAdm: column('round trips/adm', (_, f) => fmt(f.rtPerAdm, 2)),
  writesPerAdm: column('socket writes/adm', (_, f) => fmt(f.writesPerAdm, 3)),
  p50: column('p50 ms', (r) => fmt(r.latency.p50, 2)),
  p99: column('p99 ms', (r) => fmt(r.latency.p99, 2)),
  refusals: column('429 ratio', refusalText),
  highest: column('highest/max', highestText),
};

function figureTable(runs: readonly RunRecord[], columns: readonly Column[]): string {
  return table(
    columns.map((c) => c.header),
    runs.map((r) => {
      const f = figures(r);
      return columns.map((c) => c.cell(r, f));
    }),
  );
}

export function loadTable(runs: readonly RunRecord[]): string {
  const c = COLUMNS;
  return figureTable(runs, [
    c.contender,
    c.admPerS,
    c.cmdsPerAdm,
    c.cmdsPerS,
    c.cpuUsPerAdm,
    c.cpuPct,
    c.clientCpu,
    c.rtPerAdm,
    c.writesPerAdm,
    c.p50,
    c.p99,
    c.refusals,
    c.highest,
  ]);
}

const PURPOSES = ['load_read', 'acquire', 'release', 'wait', 'renew', 'settings', 'cooldown'];

export function purposeTable(runs: readonly RunRecord[]): string | undefined {
  const withPurposes = runs.filter((r) => r.purposes);
  if (withPurposes.length === 0) return undefined;
  return table(
    [
      'slotgate commands by purpose',
      'load_read cmds/s per instance',
      'load fetch rounds/s per instance',
      ...PURPOSES.map((p) => `${p} /adm`),
      ...PURPOSES.map((p) => `${p} /s`),
    ],
    withPurposes.map((r) => {
      const f = figures(r);
      return [
        `${r.label}${r.params.instances > 1 ? ` ×${r.params.instances}` : ''}`,
        fmt(f.loadReadPerSPerInstance, 0),
        fmt((r.purposes!.fetch_rounds ?? NaN) / r.windowS / r.params.instances, 1),
        ...PURPOSES.map((p) => fmt((r.purposes![p] ?? 0) / Math.max(1, r.admissions), 3)),
        ...PURPOSES.map((p) => fmt((r.purposes![p] ?? 0) / r.windowS, 0)),
      ];
    }),
  );
}

export function serverCommandTable(runs: readonly RunRecord[]): string {
  const names = [...new Set(runs.flatMap((r) => Object.keys(r.serverCommands)))].sort();
  return table(
    ['server-side commands per admission', ...names],
    runs.map((r) => [
      `${r.label}${r.params.instances > 1 ? ` ×${r.params.instances}` : ''}`,
      ...names.map((n) => fmt((r.serverCommands[n] ?? 0) / Math.max(1, r.admissions), 2)),
    ]),
  );
}

export function scaleTable(runs: readonly RunRecord[]): string {
  const c = COLUMNS;
  return figureTable(runs, [
    c.contender,
    c.instances,
    renamed(c.admPerS, 'admissions/s total'),
    column('admissions/s per instance', (r) =>
      (r.instances ?? []).map((i) => fmt(i.admissionsPerS, 0)).join(' / '),
    ),
    c.cmdsPerS,
    c.cmdsPerAdm,
    c.cpuUsPerAdm,
    c.cpuPct,
    c.clientCpu,
    column('load_read cmds/s per instance', (r) =>
      r.instances?.some((i) => i.purposes)
        ? r.instances.map((i) => fmt((i.purposes?.load_read ?? 0) / r.windowS, 0)).join(' / ')
        : '–',
    ),
    c.rtPerAdm,
    c.p50,
    c.p99,
    c.refusals,
    renamed(c.highest, 'highest/max (all processes)'),
  ]);
}

export function httpTable(runs: readonly RunRecord[]): string {
  const c = COLUMNS;
  return figureTable(runs, [
    c.contender,
    c.instances,
    column('responses/s', (r) => fmt(r.http!.requests / r.windowS, 0)),
    column('statuses', (r) =>
      Object.entries(r.http!.statuses)
        .map(([k, v]) => `${k}: ${v}`)
        .join(', '),
    ),
    column('HTTP p50 / p99 ms', (r) => `${fmt(r.http!.p50Ms, 1)} / ${fmt(r.http!.p99Ms, 1)}`),
    column('admission p50 / p99 ms (≤ bucket)', (r) => `${fmt(r.latency.p50, 1)} / ${fmt(r.latency.p99, 1)}`),
    c.admPerS,
    c.cmdsPerAdm,
    c.cmdsPerS,
    c.cpuUsPerAdm,
    c.cpuPct,
    renamed(c.clientCpu, 'gateway CPU µs/adm'),
    c.rtPerAdm,
    column('load_read cmds/s per instance', (_, f) => fmt(f.loadReadPerSPerInstance, 0)),
    renamed(c.highest, 'upstream highest/max'),
  ]);
}

/** The W1 / W2 / W4 table for the README, with the machine and parameters it was measured on. */
export function readmeTable(runs: readonly RunRecord[], meta: Meta): string | undefined {
  const picked = runs.filter((r) => ['W1', 'W2', 'W4'].includes(r.scenario));
  if (picked.length === 0) return undefined;
  const c = COLUMNS;
  return [
    `50 bounded channels × max 4, one candidate set, hold 20 ms (W4: 0), 150 acquirers (W2: 300), ` +
      `${meta.durations.load} s per run, 1 instance; Redis: ${meta.redis}; Node ${meta.node}; ${meta.cpu}; ` +
      `measured ${meta.startedAt.slice(0, 10)} with \`npm run bench\`.`,
    '',
    figureTable(picked, [
      column('scenario', (r) => r.scenario),
      c.contender,
      c.admPerS,
      c.cmdsPerAdm,
      c.cpuUsPerAdm,
      c.rtPerAdm,
      column('p99 ms', (r) => fmt(r.latency.p99, 1)),
      column('429', (_, f) => fmt(100 * f.refusalRatio, 1) + '%'),
      column('highest/max', (r, f) => `${f.highestMax}/${r.params.max}`),
    ]),
  ].join('\n');
}

export function legend(meta: Meta): string {
  const lines = [
    '- **admissions/s**: slots granted inside the measured window, divided by its length.',
    '- **Redis cmds/adm, cmds/s**: `INFO commandstats` delta over the window (server side; commands run inside Lua ' +
      'scripts count, EVALSHA itself counts once; the INFO calls of the measurement are left out).',
    '- **Redis CPU µs/adm, %**: `used_cpu_user + used_cpu_sys` delta of the Redis process over the window.',
    "- **round trips/adm**: requests the contender's code sent to Redis, counted on its ioredis clients: each " +
      'command call 1 (a Lua script 1), an explicit pipeline or MULTI 1 however many commands it carries; ' +
      "ioredis's own traffic (ready check, NOSCRIPT retry) is not counted. Background work (renewal, heartbeats, " +
      'settings re-reads) counts against the admissions of the window.',
    "- **socket writes/adm**: `write` calls on those clients' sockets. Every contender gets the same ioredis options " +
      "(slotgate RedisStore's: auto-pipelining on), which merges the concurrent requests of many acquirers into " +
      'one write, so this falls as concurrency rises; it is the number of request flights actually sent.',
    '- **p50 / p99 ms**: time from asking for a slot to holding it (admitted passes only; waiting included). ' +
      "HTTP: the load generator's request latency, and the gateway's admission histogram (bucket upper bounds); " +
      'with two instances the worse instance is shown.',
    '- **429 ratio**: refused requests / (refused + admitted), with the reasons. After a refusal the acquirer ' +
      'sleeps 5 ms and asks again.',
    '- **highest/max**: the highest number of holders seen at once on any channel, counted by the holders ' +
      '(across processes: hold intervals on the machine-wide monotonic clock, swept per channel; HTTP: counted by ' +
      'the upstream). Above max is an oversell and fails the run. With hold 0 (W4) a holder gives the slot back at ' +
      'once, so its holding window is empty and W4 shows 1/max: the holder-side check sees nothing there; the ' +
      'other scenarios carry it.',
    "- **load_read cmds/s per instance**: slotgate's own count of load-read commands (3 per channel per fetch + TIME).",
    '',
    'How each contender picks a channel and what it does when everything is full:',
    '',
    ...meta.contenders.map((c) => `- **${c.label}**: ${c.behaviour}.`),
  ];
  return lines.join('\n');
}
