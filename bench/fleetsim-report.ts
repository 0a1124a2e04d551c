/** The fleet simulator's markdown: the parameters, one table per topology, the targets block and the legend. */
import type { SimCell } from './fleetsim-figures.js';
import type { FleetSimShape } from './fleetsim-shape.js';
import { verdict, type SimRow, type SimTarget } from './fleetsim-targets.js';
import { fmt, table } from './report.js';

const ms = (n: number) => fmt(n, n < 10 ? 2 : n < 100 ? 1 : 0);
const pct = (x: number, digits = 1) => (Number.isFinite(x) ? `${fmt(100 * x, digits)} %` : '–');

export function simParamsLine(
  shape: FleetSimShape,
  cell: Pick<SimCell, 'meanHoldMs' | 'ttlMs' | 'durationS' | 'waitTimeoutMs' | 'workers' | 'max' | 'sets'>,
  where: string,
): string {
  const h = shape.hold;
  return (
    `**Fleet simulator** — N admission engines (instances), each with its own instance id, RedisStore and ` +
    `connection, several per process (spread over up to ${cell.workers} worker processes), on ${where}. ` +
    `C bounded channels of max ${cell.max}, in ${cell.sets} overlapping candidate sets of the size in the table, ` +
    `each a seeded random draw of distinct channels (the same for every N and both views). Open loop: Poisson ` +
    `arrivals of ${shape.ratePerInstance}/s per instance (each offering a uniformly drawn set), log-normal holds ` +
    `(median ${h.medianMs} ms, σ ${h.sigma}, capped at ${h.capMs / 1000} s; mean ${fmt(cell.meanHoldMs, 0)} ms), ` +
    `wait time-out ${cell.waitTimeoutMs / 1000} s, other settings at their defaults (load TTL ` +
    `load_cache_ttl_ms = ${cell.ttlMs} ms). ${cell.durationS} s measured per run from the first arrival (engines ` +
    `connected and warmed up before; requests in flight at the end finish unmeasured); seed ${shape.seed}: each ` +
    `engine replays the same arrivals in both views. Views: \`slotgate\` (load summary, the default) and ` +
    `\`slotgate-per-channel\` (load_summary_enabled = false: 3 commands per channel read).`
  );
}

export function simTable(rows: readonly SimRow[]): string {
  return table(
    [
      'N',
      'C',
      'sets × size (channels in sets)',
      'offered/s (load)',
      'view',
      'adm/s',
      '429s',
      'Redis cmds/s',
      'cmds/adm',
      'load-read cmds/inst/TTL',
      'Redis CPU %',
      'latency p50 / p99 ms',
      'first-try full',
      'oversell',
      'Jain',
    ],
    rows.map(({ contender, cell: c, f }) => [
      c.instances,
      fmt(c.channels, 0),
      `${c.sets} × ${c.setSize} (${fmt(c.coveredChannels, 0)})`,
      `${fmt(c.ratePerS, 0)} (${fmt(100 * c.offeredShare, 0)} %)`,
      contender,
      fmt(f.admPerS, 0),
      pct(f.refusalRatio, 1),
      fmt(f.cmdsPerS, 0),
      fmt(f.cmdsPerAdm, 2),
      fmt(f.loadReadPerInstPerTtl, f.loadReadPerInstPerTtl < 10 ? 2 : 1),
      `${fmt(f.redisCpuPct, 1)}${f.busiestNodeCpuPct !== undefined ? ` (busiest ${fmt(f.busiestNodeCpuPct, 1)})` : ''}`,
      `${ms(f.latency.p50)} / ${ms(f.latency.p99)}`,
      pct(f.firstTryFull, 1),
      f.oversell > 0 ? `**+${f.oversell}** (peak ${f.peak})` : `0 (peak ${f.peak})`,
      fmt(f.jain, 3),
    ]),
  );
}

/** What the load generator and the load view did: to tell a cell limited by the generating machine from one that was not. */
export function simDetailTable(rows: readonly SimRow[]): string {
  return table(
    [
      'N',
      'C',
      'view',
      'requests',
      '429s by reason',
      'load rounds/inst/TTL',
      'report-only exchanges/inst/TTL',
      'busiest instance load-read/TTL',
      'worker CPU % (all processes)',
      'dispatch lag p99 / max ms',
    ],
    rows.map(({ contender, cell: c, f }) => [
      c.instances,
      fmt(c.channels, 0),
      contender,
      fmt(f.requests, 0),
      Object.entries(f.refused)
        .map(([k, v]) => `${k} ${fmt(v, 0)}`)
        .join(', ') || '–',
      fmt(f.fetchesPerInstPerTtl, 2),
      fmt(f.reportsPerInstPerTtl, 2),
      fmt(f.loadReadMaxInstPerTtl, f.loadReadMaxInstPerTtl < 10 ? 2 : 1),
      fmt(f.clientCpuPct, 0),
      `${ms(f.lagP99Ms)} / ${ms(f.lagMaxMs)}`,
    ]),
  );
}

export function simTargetsTable(targets: readonly SimTarget[]): string {
  return table(
    ['target', 'slotgate (load summary)', "today's view (slotgate-per-channel)", 'result'],
    targets.map((t) => [t.target, t.measured, t.today, verdict(t.pass)]),
  );
}

export function simLegend(): string[] {
  return [
    'Fleet simulator (fleetsim):',
    '',
    '- **offered/s (load)**: arrivals per second of all instances (N × the per-instance rate), and the mean holds ' +
      'in flight they offer over the slots of the channels in some set (above 100 %: overload, 429s expected).',
    '- **adm/s**: tickets handed out in the window, per second; **429s**: share of the arrivals in the window refused ' +
      '(queue full or wait time-out; the detail table gives the reasons).',
    '- **Redis cmds/s**, **cmds/adm**: INFO commandstats deltas over the window (every command, those run inside Lua ' +
      'scripts included), per second and per admission; on the cluster summed over the masters.',
    '- **load-read cmds/inst/TTL**: Δ `stats().commands.load_read` of all engines / N / (window / load_cache_ttl_ms): ' +
      'the load-view commands one instance sends per TTL (summary exchanges, HMGETs and TIME; per channel: 3 per ' +
      'channel read, plus TIME).',
    '- **Redis CPU %**: Δ(used_cpu_user + used_cpu_sys) / window, % of one core (cluster: summed, the busiest master ' +
      'in brackets).',
    '- **latency**: arrival → ticket of the admitted requests arriving in the window (waits included).',
    '- **first-try full**: of the passes that asked Redis for a slot, the share whose first channel tried was full or ' +
      'queued (`stats().firstTriesFull / firstTries`): how well the load view ordered the candidates.',
    '- **oversell**: the most holders seen at once on one channel (a sweep over every hold interval of every engine ' +
      'on the machine-wide monotonic clock) minus max, 0 when never above; the peak in brackets.',
    "- **Jain**: Jain's index over the instances' admitted / offered (1 = every instance got the same share).",
    '- Detail table: **load rounds** = load-view store reads, **report-only exchanges** = summary exchanges that only ' +
      "put in an instance's own counts; **worker CPU %** = CPU of the processes running the engines (% of one core; " +
      'near 100 % per process means the generator, not Redis, may have been the limit); **dispatch lag** = how late ' +
      'arrivals were sent after their trace time.',
  ];
}
