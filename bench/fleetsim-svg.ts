/**
 * The fleet simulator's plot: Redis CPU % against the number of instances N, one line per channel count C, one panel
 * per load view (the same y scale in both, so the panels compare at a glance).
 */
import { fmt } from './report.js';
import { FLEETSIM_CONTENDERS } from './fleetsim-shape.js';
import type { SimRow } from './fleetsim-targets.js';
import { COLORS, esc, panel, type Series } from './svg.js';

export function simSvg(rows: readonly SimRow[], title: string, subtitle: string): string | undefined {
  if (rows.length === 0) return undefined;
  const xs = [...new Set(rows.map((r) => r.cell.instances))].sort((a, b) => a - b);
  const cs = [...new Set(rows.map((r) => r.cell.channels))].sort((a, b) => a - b);
  const seriesOf = (contender: string): Series[] =>
    cs.flatMap((c, i) => {
      const mine = rows
        .filter((r) => r.contender === contender && r.cell.channels === c)
        .sort((a, b) => a.cell.instances - b.cell.instances);
      return mine.length
        ? [
            {
              label: `C = ${fmt(c, 0)}`,
              color: COLORS[i % COLORS.length]!,
              points: mine.map((r) => ({ x: r.cell.instances, y: r.f.redisCpuPct })),
            },
          ]
        : [];
    });
  const top = Math.max(0, ...rows.map((r) => r.f.redisCpuPct));
  const W = 1000;
  const H = 450;
  const legend = cs
    .map((c, i) => {
      const x = 80 + i * 200;
      const color = COLORS[i % COLORS.length]!;
      return (
        `<line x1="${x}" y1="410" x2="${x + 24}" y2="410" stroke="${color}" stroke-width="3"/>` +
        `<text x="${x + 30}" y="414">C = ${fmt(c, 0)} channels</text>`
      );
    })
    .join('\n');
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" ` +
      `font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`,
    `<text x="${W / 2}" y="40" text-anchor="middle" fill="#555">${esc(subtitle)}</text>`,
    ...FLEETSIM_CONTENDERS.map((c, i) =>
      panel(
        seriesOf(c.id),
        xs,
        `Redis CPU % — ${c.id}${c.summary ? ' (load summary)' : ' (per-channel reads)'}`,
        80 + i * 500,
        80,
        380,
        250,
        1,
        'instances N',
        top,
      ),
    ),
    legend,
    '</svg>',
  ].join('\n');
}
