/**
 * The fleet simulator's markdown (its parameters, the cells side by side, the detail table and the legend) and its
 * plot: Redis CPU % against N, one line per channel count, one panel per contender on one y scale.
 */
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
    `${simDetailTable(records)}\n\n${simLegend()}`
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

const simLegend = (): string =>
  [
    '- **offered/s (load)**: arrivals per second of all instances, and the mean holds in flight they offer over the ' +
      'slots of the channels in some set (above 100 %: overload).',
    '- **Redis cmds/s, cmds/adm**: INFO commandstats deltas over the window (Lua-internal commands included; on a ' +
      'cluster summed over the masters). **Redis CPU %**: of one core (cluster: summed, the busiest master beside).',
    '- **load-read cmds/inst/TTL**: Δ `stats().commands.load_read` / N / (window / load_cache_ttl_ms).',
    '- **latency**: arrival → ticket of the admitted requests arriving in the window.',
    '- **first-try full**: `stats().firstTriesFull / firstTries`: how well the load view ordered the candidates.',
    '- **oversell**: the most holders at once on one channel (every hold interval of every engine swept on the ' +
      'monotonic clock) minus max; the peak beside.',
    "- **Jain**: Jain's index over the instances' admitted / offered.",
    '- Detail: **load rounds** = load-view store reads, **report-only exchanges** = summary exchanges that only put ' +
      "in an instance's counts; **worker CPU %** near 100 % per process means the generator may have been the limit.",
  ].join('\n');

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];
const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** 0, a round step, … up to at least max. */
function ticks(max: number): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / 5;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw)!;
  const out: number[] = [];
  for (let v = 0; v < max + step; v += step) out.push(v);
  return out;
}

export function simSvg(rows: readonly SimRecord[], title: string, subtitle: string): string {
  const [W, H, oy, w, h] = [1000, 450, 80, 380, 250];
  const cs = [...new Set(rows.map((r) => r.cell.channels))].sort((a, b) => a - b);
  const xs = [...new Set(rows.map((r) => r.cell.instances))].sort((a, b) => a - b);
  const yTicks = ticks(Math.max(0, ...rows.map((r) => r.f.redisCpuPct)));
  const top = yTicks.at(-1)!;
  const [minX, maxX] = [xs[0]!, xs.at(-1)!];
  const py = (y: number) => oy + h - (y / top) * h;
  const panel = (contender: string, ox: number) => {
    const px = (x: number) => ox + (maxX === minX ? w / 2 : ((x - minX) / (maxX - minX)) * w);
    const out = [
      `<text x="${ox + w / 2}" y="${oy - 14}" text-anchor="middle" font-weight="bold">Redis CPU % — ${esc(contender)}</text>`,
      `<rect x="${ox}" y="${oy}" width="${w}" height="${h}" fill="none" stroke="#333"/>`,
      `<text x="${ox + w / 2}" y="${oy + h + 36}" text-anchor="middle">instances N</text>`,
      ...yTicks.map(
        (v) =>
          `<line x1="${ox}" y1="${py(v)}" x2="${ox + w}" y2="${py(v)}" stroke="#ddd"/>` +
          `<text x="${ox - 6}" y="${py(v) + 4}" text-anchor="end">${fmt(v, 1)}</text>`,
      ),
      ...xs.map((x) => `<text x="${px(x)}" y="${oy + h + 18}" text-anchor="middle">${x}</text>`),
    ];
    cs.forEach((c, i) => {
      const points = rows
        .filter((r) => r.contender === contender && r.cell.channels === c)
        .sort((a, b) => a.cell.instances - b.cell.instances)
        .map((r) => `${px(r.cell.instances).toFixed(1)},${py(r.f.redisCpuPct).toFixed(1)}`);
      const color = COLORS[i % COLORS.length]!;
      out.push(`<polyline points="${points.join(' ')}" fill="none" stroke="${color}" stroke-width="2"/>`);
      for (const p of points) {
        const [cx, cy] = p.split(',');
        out.push(`<circle cx="${cx}" cy="${cy}" r="3.5" fill="${color}"/>`);
      }
    });
    return out.join('\n');
  };
  const legend = cs.map((c, i) => {
    const [x, color] = [80 + i * 200, COLORS[i % COLORS.length]!];
    return (
      `<line x1="${x}" y1="410" x2="${x + 24}" y2="410" stroke="${color}" stroke-width="3"/>` +
      `<text x="${x + 30}" y="414">C = ${fmt(c, 0)} channels</text>`
    );
  });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" ` +
      `font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`,
    `<text x="${W / 2}" y="40" text-anchor="middle" fill="#555">${esc(subtitle)}</text>`,
    ...[...new Set(rows.map((r) => r.contender))].map((c, i) => panel(c, 80 + i * 500)),
    ...legend,
    '</svg>',
  ].join('\n');
}
