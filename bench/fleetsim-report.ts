/** The fleet simulator's markdown: its parameters, the cells side by side, the detail table (docs/benchmark.md defines the columns). */
import { holdText } from './draws.js';
import { FLEETSIM_SHAPE, type FleetSimOptions, type SimRecord } from './fleetsim.js';
import { columns, counts, fmt, ms, pct, type Column } from './format.js';

/** The section of one pass: parameters (the first cell's, with the run's worker count), tables, legend. */
export function simSection(
  records: readonly SimRecord[],
  o: FleetSimOptions,
  where: string,
  suffix: string,
): string {
  const shape = FLEETSIM_SHAPE;
  const cell = { ...records[0]!.cell, workers: o.workers };
  const params =
    `**Fleet simulator** — N admission engines (instances), each a slotgate session with its own connection, ` +
    `spread over up to ${cell.workers} worker processes, on ${where}. C bounded channels of max ${cell.max}, in ` +
    `${cell.sets} overlapping candidate sets of the size in the table (seeded draws, the same for every N and ` +
    `contender). Open loop: Poisson arrivals of ${shape.ratePerInstance}/s per instance, each offering a uniformly ` +
    `drawn set, ${holdText(shape.hold)}, wait time-out ${cell.waitTimeoutMs / 1000} s, other settings at their defaults ` +
    `(load_cache_ttl_ms = ${cell.ttlMs} ms). ${cell.durationS} s measured per run from the first arrival; seed ` +
    `${shape.seed}: each engine replays the same arrivals for both contenders. Contenders: \`slotgate\` (defaults) ` +
    `and \`slotgate-rollback\` (load_cache_enabled = false).`;
  return (
    `\n## Fleet simulator (fleetsim, ${o.grid} grid)${suffix}\n\n${params}\n\n${simTable(records)}\n\n` +
    simDetailTable(records) +
    footprintTable(records)
  );
}

const cellColumns: Column<SimRecord>[] = [
  ['N', (r) => r.cell.instances],
  ['C', (r) => fmt(r.cell.channels, 0)],
];
const digits = (n: number) => fmt(n, n < 10 ? 2 : 1);

const simTable = (rows: readonly SimRecord[]): string =>
  columns(rows, [
    ...cellColumns,
    [
      'sets × size (channels in sets)',
      ({ cell: c }) => `${c.sets} × ${c.setSize} (${fmt(c.coveredChannels, 0)})`,
    ],
    ['offered/s (load)', ({ cell: c }) => `${fmt(c.ratePerS, 0)} (${fmt(100 * c.offeredShare, 0)} %)`],
    ['contender', (r) => r.contender],
    ['adm/s', (r) => fmt(r.f.admPerS, 0)],
    ['429s', (r) => pct(r.f.refusalRatio)],
    ['Redis cmds/s', (r) => fmt(r.f.cmdsPerS, 0)],
    ['cmds/adm', (r) => fmt(r.f.cmdsPerAdm, 2)],
    ['load-read cmds/inst/TTL', (r) => digits(r.f.loadReadPerInstPerTtl)],
    [
      'Redis CPU %',
      ({ f }) =>
        `${fmt(f.redisCpuPct, 1)}${f.busiestNodeCpuPct !== undefined ? ` (busiest ${fmt(f.busiestNodeCpuPct, 1)})` : ''}`,
    ],
    ['latency p50 / p99 ms', ({ f }) => `${ms(f.latency.p50)} / ${ms(f.latency.p99)}`],
    ['first-try full', (r) => pct(r.f.firstTryFull)],
    ['oversell', ({ f }) => (f.oversell > 0 ? `**+${f.oversell}** (peak ${f.peak})` : `0 (peak ${f.peak})`)],
    ['Jain', (r) => fmt(r.f.jain, 3)],
  ]);

/** A channel's own keys, and the load summary's per-instance fields. */
const CHANNEL_KINDS = ['slots', 'fifo', 'peak', 'cooldown'];
const bytesOf = (r: SimRecord, kinds: readonly string[]) =>
  kinds.reduce((n, k) => n + (r.footprint?.[k]?.bytes ?? 0), 0);

/** Redis memory of the run's keys at the end of its window (MEMORY USAGE; single node only). */
function footprintTable(rows: readonly SimRecord[]): string {
  const measured = rows.filter((r) => r.footprint);
  if (measured.length === 0) return '';
  const total = (r: SimRecord) => Object.values(r.footprint!).reduce((n, e) => n + e.bytes, 0);
  return (
    "\n\nRedis memory of the run's keys at the end of the window (`MEMORY USAGE` of each; per channel: its slots, " +
    "queue, high-water mark and cooldown keys over C; per instance: the load summary's counts over N):\n\n" +
    columns(measured, [
      ...cellColumns,
      ['contender', (r) => r.contender],
      [
        'keys',
        (r) =>
          fmt(
            Object.values(r.footprint!).reduce((n, e) => n + e.keys, 0),
            0,
          ),
      ],
      ['KiB', (r) => fmt(total(r) / 1024, 0)],
      ['bytes/channel', (r) => fmt(bytesOf(r, CHANNEL_KINDS) / r.cell.channels, 0)],
      ['bytes/instance', (r) => fmt(bytesOf(r, ['loads:counts']) / r.cell.instances, 0)],
      [
        'by kind (keys: bytes)',
        (r) =>
          Object.entries(r.footprint!)
            .map(([k, e]) => `${k} ${e.keys}: ${e.bytes}`)
            .join(', '),
      ],
    ])
  );
}

/** What the load generator and the load view did: a cell limited by the generating machine shows here. */
const simDetailTable = (rows: readonly SimRecord[]): string =>
  columns(rows, [
    ...cellColumns,
    ['contender', (r) => r.contender],
    ['requests', (r) => fmt(r.f.requests, 0)],
    ['429s by reason', (r) => counts(r.f.refused) || '–'],
    ['load rounds/inst/TTL', (r) => fmt(r.f.fetchesPerInstPerTtl, 2)],
    ['report-only exchanges/inst/TTL', (r) => fmt(r.f.reportsPerInstPerTtl, 2)],
    ['busiest instance load-read/TTL', (r) => digits(r.f.loadReadMaxInstPerTtl)],
    ['worker CPU % (all processes)', (r) => fmt(r.f.clientCpuPct, 0)],
    ['dispatch lag p99 / max ms', ({ f }) => `${ms(f.lagP99Ms)} / ${ms(f.lagMaxMs)}`],
  ]);
