/**
 * Hand-written SVG charts: Redis commands/s and CPU % against offered load in the W1-75 / W1 / W2 sweep, and the
 * fleet simulator's Redis CPU % against N, one line per channel count, one panel per contender on one y scale.
 */
import { fmt } from './format.js';
import { figures } from './report.js';
import type { SimRecord } from './fleetsim.js';
import type { RunRecord } from './records.js';

const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];
const color = (i: number) => COLORS[i % COLORS.length]!;
const SWEEP = ['W1-75', 'W1', 'W2'];

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

interface Series {
  label: string;
  color: string;
  points: { x: number; y: number }[];
}

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

/** One 380 × 250 chart at (ox, 80): a line per series; the y axis reaches at least `minTop`. */
function panel(
  series: readonly Series[],
  o: { title: string; xLabel: string; ox: number; digits: number; minTop?: number },
) {
  const [oy, w, h] = [80, 380, 250];
  const { ox } = o;
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b);
  const top = ticks(Math.max(o.minTop ?? 0, ...series.flatMap((s) => s.points.map((p) => p.y)))).at(-1)!;
  const [minX, maxX] = [Math.min(...xs), Math.max(...xs)];
  const px = (x: number) => ox + (maxX === minX ? w / 2 : ((x - minX) / (maxX - minX)) * w);
  const py = (y: number) => oy + h - (y / top) * h;
  const out = [
    `<text x="${ox + w / 2}" y="${oy - 14}" text-anchor="middle" font-weight="bold">${esc(o.title)}</text>`,
  ];
  for (const v of ticks(top)) {
    out.push(`<line x1="${ox}" y1="${py(v)}" x2="${ox + w}" y2="${py(v)}" stroke="#ddd"/>`);
    out.push(`<text x="${ox - 6}" y="${py(v) + 4}" text-anchor="end">${fmt(v, o.digits)}</text>`);
  }
  for (const x of xs) {
    out.push(`<line x1="${px(x)}" y1="${oy + h}" x2="${px(x)}" y2="${oy + h + 5}" stroke="#333"/>`);
    out.push(`<text x="${px(x)}" y="${oy + h + 18}" text-anchor="middle">${x}</text>`);
  }
  out.push(`<rect x="${ox}" y="${oy}" width="${w}" height="${h}" fill="none" stroke="#333"/>`);
  out.push(`<text x="${ox + w / 2}" y="${oy + h + 36}" text-anchor="middle">${esc(o.xLabel)}</text>`);
  for (const s of series) {
    const pts = s.points.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`);
    out.push(`<polyline points="${pts.join(' ')}" fill="none" stroke="${s.color}" stroke-width="2"/>`);
    for (const p of pts) {
      const [cx, cy] = p.split(',');
      out.push(`<circle cx="${cx}" cy="${cy}" r="3.5" fill="${s.color}"/>`);
    }
  }
  return out.join('\n');
}

/** The whole picture: title, subtitle, two panels and a legend of `legend` (label, color) three to a row. */
function svg(title: string, subtitle: string, panels: string[], legend: { label: string; color: string }[]) {
  const [W, H] = [1000, 470];
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" ` +
      `font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${esc(title)}</text>`,
    `<text x="${W / 2}" y="40" text-anchor="middle" fill="#555">${esc(subtitle)}</text>`,
    ...panels,
    ...legend.map(({ label, color: c }, i) => {
      const [x, y] = [80 + (i % 3) * 300, 400 + Math.floor(i / 3) * 20];
      return (
        `<line x1="${x}" y1="${y}" x2="${x + 24}" y2="${y}" stroke="${c}" stroke-width="3"/>` +
        `<text x="${x + 30}" y="${y + 4}">${esc(label)}</text>`
      );
    }),
    '</svg>',
  ].join('\n');
}

export function chartSvg(runs: readonly RunRecord[], subtitle: string): string | undefined {
  const sweep = runs.filter((r) => SWEEP.includes(r.scenario));
  if (sweep.length === 0) return undefined;
  const contenders = [...new Set(sweep.map((r) => r.contender))];
  const make = (metric: (r: RunRecord) => number): Series[] =>
    contenders.map((id, i) => {
      const mine = sweep
        .filter((r) => r.contender === id)
        .sort((a, b) => a.params.acquirers - b.params.acquirers);
      return {
        label: mine[0]!.label,
        color: color(i),
        points: mine.map((r) => ({ x: r.params.acquirers, y: metric(r) })),
      };
    });
  const cmds = make((r) => figures(r).cmdsPerS);
  const xLabel = 'offered load (concurrent acquirers)';
  return svg(
    'What each contender costs Redis as offered load grows',
    subtitle,
    [
      panel(cmds, { title: 'Redis commands/s (INFO commandstats)', xLabel, ox: 80, digits: 0 }),
      panel(
        make((r) => figures(r).cpuPct),
        { title: 'Redis CPU % (used_cpu_user + used_cpu_sys)', xLabel, ox: 580, digits: 1 },
      ),
    ],
    cmds,
  );
}

export function simSvg(rows: readonly SimRecord[], title: string, subtitle: string): string {
  const cs = [...new Set(rows.map((r) => r.cell.channels))].sort((a, b) => a - b);
  const contenders = [...new Set(rows.map((r) => r.contender))];
  const minTop = Math.max(0, ...rows.map((r) => r.f.redisCpuPct));
  const seriesOf = (contender: string): Series[] =>
    cs.flatMap((c, i) => {
      const mine = rows
        .filter((r) => r.contender === contender && r.cell.channels === c)
        .sort((a, b) => a.cell.instances - b.cell.instances);
      const points = mine.map((r) => ({ x: r.cell.instances, y: r.f.redisCpuPct }));
      return mine.length ? [{ label: `C = ${fmt(c, 0)} channels`, color: color(i), points }] : [];
    });
  const panels = contenders.map((id, i) =>
    panel(seriesOf(id), {
      title: `Redis CPU % — ${id}`,
      xLabel: 'instances N',
      ox: 80 + i * 500,
      digits: 1,
      minTop,
    }),
  );
  return svg(
    title,
    subtitle,
    panels,
    cs.map((c, i) => ({ label: `C = ${fmt(c, 0)} channels`, color: color(i) })),
  );
}
