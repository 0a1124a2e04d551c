/** The fleet scenarios' tables (parameters above each), and their part of the legend. */
import { clientsLegend, clientsParamsLine } from './clients-report.js';
import type { FleetFigures } from './fairness.js';
import { arrivalRate, meanHoldMs, type FleetScenario } from './openloop.js';
import { figures, fmt, table, type Meta } from './report.js';
import type { RunRecord } from './run.js';

const ms = (n: number) => fmt(n, n < 10 ? 2 : n < 100 ? 1 : 0);
const pct = (n: number, digits = 1) => (Number.isFinite(n) ? `${fmt(100 * n, digits)} %` : '–');
const slash = (values: readonly number[], f: (n: number) => string) => values.map(f).join(' / ');
const who = (r: RunRecord) => r.label;

export function fleetParamsLine(s: FleetScenario, runs: readonly RunRecord[], meta: Meta): string {
  if (s.kind === 'clients') return clientsParamsLine(s, runs, meta);
  const r = runs[0]!;
  const slots = s.channels * s.max;
  const base = `**${s.title}** — ${s.channels} bounded channels × max ${s.max} (${slots} slots), one candidate set (all ${s.channels} channels offered to every request)`;
  const machine = `Redis: ${meta.redis}. Node ${meta.node}, ${meta.cpu}.`;
  if (s.kind === 'fair') {
    return (
      `${base}, closed loop: ${s.workers} workers per instance, each acquire → hold ${s.holdMs} ms → release ` +
      `(5 ms back-off after a refusal), ${s.instances.join(' / ')} instances (one process each), instance i starting ` +
      `i × ${s.staggerMs} ms after the first; admissions counted over the ${r.params.durationS} s ` +
      `in which all run. Contenders as in W1–W4 (slotgate waits up to 5 s in queues of up to ${s.maxWaiting} per ` +
      `channel, so no worker is refused; redis-semaphore has no wait queue). ${machine}`
    );
  }
  const mean = meanHoldMs(s.hold);
  const rate = arrivalRate(s);
  return (
    `${base}, open loop: Poisson arrivals at ${fmt(rate, 1)}/s in total = ${s.loadPct} % of capacity ` +
    `(capacity = slots / mean hold = ${fmt(slots / (mean / 1000), 1)}/s), dealt round-robin to ` +
    `${s.instances.join(' / ')} instances (one process each; equal demand); log-normal hold (median ` +
    `${s.hold.medianMs} ms, σ ${s.hold.sigma}, capped at ${s.hold.capMs / 1000} s; mean ${fmt(mean, 0)} ms); ` +
    `wait time-out ${s.waitTimeoutMs / 1000} s for every contender ` +
    (s.maxWaiting !== undefined
      ? `(slotgate's queues hold up to ${s.maxWaiting} per channel, so only the time-out refuses, as in the ideal)`
      : "(slotgate's default queue bound: max waiting = max(32, 8 × max concurrency) per channel, a full queue " +
        'is a 429 at once; no ideal beside it, which has no bound)') +
    `; ${r.params.durationS} s of arrivals ` +
    `(${r.fleet?.figures.requests ?? '?'} requests, seed ${s.seed}: the same trace for every contender and ` +
    `instance count, and for the ideal FIFO scheduler); each instance sheds arrivals above ${fmt(s.maxInFlight, 0)} ` +
    `in flight. Utilisation from 1 s to the last arrival. ${machine}`
  );
}

const refusalCell = (f: FleetFigures) => {
  const reasons = Object.entries(f.refusals)
    .map(([k, v]) => `${k} ${fmt(v, 0)}`)
    .join(', ');
  return `${pct(f.refusalRatio, 1)}${reasons ? ` (${reasons})` : ''}`;
};

const versus = (a: number, b: number) => `${a - b >= 0 ? '+' : '−'}${ms(Math.abs(a - b))}`;

/** Waits, 429s, FIFO order, grant latency and utilisation: the ideal first (open loop), then every run. */
export function fleetTable(s: FleetScenario, runs: readonly RunRecord[]): string {
  const open = s.kind === 'open';
  const ideal = runs.find((r) => r.fleet?.ideal)?.fleet?.ideal;
  const row = (name: string, instances: string, f: FleetFigures, r?: RunRecord) => [
    name,
    instances,
    fmt(f.requests, 0),
    fmt(f.admitted, 0),
    refusalCell(f),
    slash([f.wait.p50, f.wait.p90, f.wait.p99], ms),
    ...(open
      ? [
          ideal && r
            ? `${versus(f.wait.p50, ideal.wait.p50)} / ${versus(f.wait.p90, ideal.wait.p90)}`
            : '0 / 0',
        ]
      : []),
    pct(f.utilisation),
    fmt(f.waiters, 0),
    f.waiters
      ? `${pct(f.inversionRatio, 1)} (${fmt(f.overtaken, 0)})` +
        (f.overtaken && f.overtakerGapMs !== undefined ? `, ≤ ${ms(f.overtakerGapMs)} ms later` : '') +
        (f.overtakenByDispatch !== undefined ? `; by dispatch ${fmt(f.overtakenByDispatch, 0)}` : '')
      : '–',
    f.grantLatency.count ? slash([f.grantLatency.p50, f.grantLatency.p99], ms) : '–',
    r?.fleet!.loopDelayP99Ms !== undefined
      ? slash([r.fleet!.loopDelayP99Ms, r.fleet!.loopDelayMaxMs!], ms)
      : '–',
    r
      ? `${Math.max(0, ...Object.values(r.highest))}/${r.params.max}${r.oversold.length ? ' **OVERSOLD**' : ''}`
      : '–',
    r ? `${r.fleet!.capHits}` : '–',
    r ? slash([r.fleet!.lagP99Ms, r.fleet!.lagMaxMs], ms) : '–',
  ];
  const rows = [
    ...(open && ideal ? [row('ideal FIFO (same trace, in memory)', 'any', ideal)] : []),
    ...runs.map((r) => row(who(r), String(r.params.instances), r.fleet!.figures, r)),
  ];
  const headers = [
    'contender',
    'instances',
    'requests',
    'admitted',
    '429 ratio (reasons)',
    'wait p50 / p90 / p99 ms',
    ...(open ? ['p50 / p90 vs ideal ms'] : []),
    'slot utilisation',
    'had to wait',
    'FIFO inversions',
    'grant latency p50 / p99 ms',
    'event-loop delay p99 / max ms',
    'highest/max (all processes)',
    'shed at cap',
    'dispatch lag p99 / max ms',
  ];
  // The clients loop starts every worker at once and each worker asks again right after its release: "had to wait"
  // (every slot held at the arrival, or an earlier flagged waiter still waiting) then hangs on how the first
  // arrivals race the first admissions (in one smoke run it flagged none of a FIFO run's requests, all of which
  // waited seconds), so the columns built on it are left out, as are the open loop's shedding and dispatch lag.
  const keep = headers.map((h) => s.kind !== 'clients' || !CLIENTS_LEAVE_OUT.includes(h));
  return table(
    headers.filter((_, i) => keep[i]),
    rows.map((cells) => cells.filter((_, i) => keep[i])),
  );
}

const CLIENTS_LEAVE_OUT = [
  'had to wait',
  'FIFO inversions',
  'grant latency p50 / p99 ms',
  'shed at cap',
  'dispatch lag p99 / max ms',
];

/** Lines to print under a scenario's tables when a run hit the in-flight cap or its instances fell behind the trace. */
export function fleetNotes(runs: readonly RunRecord[]): string[] {
  const notes: string[] = [];
  const capped = runs.filter((r) => r.fleet!.capHits > 0);
  if (capped.length) {
    notes.push(
      `> **The in-flight cap was hit** (arrivals shed by the benchmark, counted as \`in_flight_cap\` 429s): ` +
        capped.map((r) => `${r.label} ×${r.params.instances}: ${r.fleet!.capHits}`).join('; ') +
        '.',
    );
  }
  const late = runs.filter((r) => r.fleet!.lagP99Ms > 20);
  if (late.length) {
    notes.push(
      `> Dispatch lag p99 above 20 ms (a busy machine: waits include it): ` +
        late.map((r) => `${r.label} ×${r.params.instances}: ${ms(r.fleet!.lagP99Ms)} ms`).join('; ') +
        '.',
    );
  }
  return notes;
}

/** Per instance: admitted, 429 ratio and waits, and the fairness across instances (the ideal's for comparison). */
export function fleetInstanceTable(runs: readonly RunRecord[]): string {
  const rows: (string | number)[][] = [];
  const seen = new Set<number>();
  const row = (name: string, r: RunRecord, f: FleetFigures) => [
    name,
    r.params.instances,
    slash(
      f.perInstance.map((p) => p.admitted),
      (n) => fmt(n, 0),
    ),
    slash(
      f.perInstance.map((p) => p.refusalRatio),
      (n) => pct(n, 1),
    ),
    slash(
      f.perInstance.map((p) => p.wait.p50),
      ms,
    ),
    slash(
      f.perInstance.map((p) => p.wait.p90),
      ms,
    ),
    slash(
      f.perInstance.map((p) => p.wait.p99),
      ms,
    ),
    fmt(f.jain, 4),
    fmt(f.share, 3),
  ];
  for (const r of runs) {
    const ideal = r.fleet?.ideal;
    if (ideal && !seen.has(r.params.instances)) {
      seen.add(r.params.instances);
      rows.push(row('ideal FIFO (same trace)', r, ideal));
    }
    rows.push(row(who(r), r, r.fleet!.figures));
  }
  return table(
    [
      'per instance',
      'instances',
      'admitted',
      '429 ratio',
      'wait p50 ms',
      'wait p90 ms',
      'wait p99 ms',
      "Jain's index",
      'min/max share',
    ],
    rows,
  );
}

/** What the fleet runs cost Redis, as the closed-loop scenarios report it. */
export function fleetCostTable(runs: readonly RunRecord[]): string {
  return table(
    [
      'Redis cost',
      'instances',
      'admissions',
      'Redis cmds/adm',
      'Redis cmds/s',
      'Redis CPU µs/adm',
      'Redis CPU %',
      'client CPU µs/adm',
      'round trips/adm',
      'measured over s',
    ],
    runs.map((r) => {
      const f = figures(r);
      return [
        who(r),
        r.params.instances,
        fmt(r.admissions, 0),
        fmt(f.cmdsPerAdm, 2),
        fmt(f.cmdsPerS, 0),
        fmt(f.cpuUsPerAdm, 1),
        fmt(f.cpuPct, 1),
        fmt(f.clientCpuUsPerAdm, 0),
        fmt(f.rtPerAdm, 2),
        fmt(r.windowS, 1),
      ];
    }),
  );
}

export function fleetLegend(): string[] {
  return [
    '',
    'Fleet scenarios (open60, open200, open200d, open200w, fair2, clients2):',
    '',
    '- **wait**: admitted − arrival, admitted requests only. Open loop: the arrival is the time in the trace (a ' +
      'request dispatched late by a busy instance waits from its trace time); closed loop: the acquire call.',
    '- **429 ratio**: refused / requests (arrivals in the window); `in_flight_cap` = shed by the benchmark above its ' +
      'per-instance bound (**shed at cap**).',
    "- **Jain's index**: (Σx)² / (n · Σx²) over the instances' admitted counts; **min/max share**: the smallest over " +
      'the largest. Demand is equal (round-robin dealing; closed loop: the same workers), so 1 is fair. Closed loop: ' +
      'admissions inside the window in which every instance runs.',
    '- **had to wait**: requests that arrived while every slot of the candidate set was held (by any instance, from ' +
      "the holders' records) or while an earlier request that had to wait was still waiting (a slot between its " +
      'release and its grant is not free for a newcomer). **FIFO inversions**: the share of those overtaken — a later arrival admitted before ' +
      'they were admitted or refused; each overtaken request counts once. **≤ x ms later**: the overtakers arrived at ' +
      'most that long after the waiters they overtook (the largest gap over the run). Arrivals a few milliseconds ' +
      'apart on different instances reach the queues in the order their registrations reach Redis. **by dispatch** ' +
      '(open loop): how many of the same waiters were overtaken by a request the load generator handed to its ' +
      "contender after it (the trace time plus the dispatch lag, in the instance's own process): what the " +
      'contender put out of order, where an instance busier than another delivers its arrivals later.',
    '- **grant latency**: for each admission that had to wait, on channel c at t: t − the latest release on c at or ' +
      'before t (a release = the moment the holder let go). A polling waiter shows its poll delay here.',
    '- **slot utilisation**: busy slot-time / (slots × window); open loop from 1 s after the start (the slots fill) to ' +
      'the last arrival.',
    '- **ideal FIFO**: the same trace through a perfect in-memory first-come-first-served scheduler with the same ' +
      'slots and wait time-out (a multi-server queue with abandonment; a slot given back goes at once to the longest ' +
      'waiter). **vs ideal**: the run minus the ideal.',
    '- **dispatch lag**: how late an instance started a request after its trace time; large values mean the machine ' +
      'was busy and every wait includes it.',
    '- **event-loop delay**: how late the instance processes ran a 1 ms timer during the run ' +
      '(`perf_hooks.monitorEventLoopDelay`, its 1 ms taken off): the highest p99 and the highest max over the ' +
      "instances. A grant crosses two event loops (the releasing instance's turn, then the waiter's message), and " +
      'waits on each.',
    '- **Redis cost**: `INFO commandstats` and CPU deltas from the common start until every instance has drained ' +
      '(its requests admitted or refused, holds given back).',
    ...clientsLegend(),
  ];
}
