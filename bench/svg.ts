/**
 * A hand-written SVG chart: Redis commands/s and Redis CPU % against offered load (concurrent acquirers), one line
 * per contender, from the W1-75 / W1 / W2 runs (75 / 150 / 300 acquirers).
 */
import { figures, fmt } from './report.js';
import type { RunRecord } from './run.js';

export const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b'];
const SWEEP = ['W1-75', 'W1', 'W2'];

export const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

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

export interface Series {
  label: string;
  color: string;
  points: { x: number; y: number }[];
}

/** One chart: a line per series over `xs`; the y axis reaches at least `minTop` (panels that share a scale). */
export function panel(
  series: readonly Series[],
  xs: readonly number[],
  title: string,
  ox: number,
  oy: number,
  w: number,
  h: number,
  digits: number,
  xLabel = 'offered load (concurrent acquirers)',
  minTop = 0,
): string {
  const maxY = Math.max(minTop, ...series.flatMap((s) => s.points.map((p) => p.y)));
  const yt = ticks(maxY);
  const top = yt.at(-1)!;
  const minX = Math.min(...xs);
  const maxX = Math.max(...xs);
  const px = (x: number) => ox + (maxX === minX ? w / 2 : ((x - minX) / (maxX - minX)) * w);
  const py = (y: number) => oy + h - (y / top) * h;
  const out: string[] = [];
  out.push(
    `<text x="${ox + w / 2}" y="${oy - 14}" text-anchor="middle" font-weight="bold">${esc(title)}</text>`,
  );
  for (const v of yt) {
    out.push(`<line x1="${ox}" y1="${py(v)}" x2="${ox + w}" y2="${py(v)}" stroke="#ddd"/>`);
    out.push(`<text x="${ox - 6}" y="${py(v) + 4}" text-anchor="end">${fmt(v, digits)}</text>`);
  }
  for (const x of xs) {
    out.push(`<line x1="${px(x)}" y1="${oy + h}" x2="${px(x)}" y2="${oy + h + 5}" stroke="#333"/>`);
    out.push(`<text x="${px(x)}" y="${oy + h + 18}" text-anchor="middle">${x}</text>`);
  }
  out.push(`<rect x="${ox}" y="${oy}" width="${w}" height="${h}" fill="none" stroke="#333"/>`);
  out.push(`<text x="${ox + w / 2}" y="${oy + h + 36}" text-anchor="middle">${esc(xLabel)}</text>`);
  for (const s of series) {
    const pts = s.points.map((p) => `${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`).join(' ');
    out.push(`<polyline points="${pts}" fill="none" stroke="${s.color}" stroke-width="2"/>`);
    for (const p of s.points) {
      out.push(`<circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="3.5" fill="${s.color}"/>`);
    }
  }
  return out.join('\n');
}

export function chartSvg(runs: readonly RunRecord[], subtitle: string): string | undefined {
  const sweep = runs.filter((r) => SWEEP.includes(r.scenario));
  if (sweep.length === 0) return undefined;
  const contenders = [...new Set(sweep.map((r) => r.contender))];
  const xs = [...new Set(sweep.map((r) => r.params.acquirers))].sort((a, b) => a - b);
  const make = (metric: (r: RunRecord) => number): Series[] =>
    contenders.map((id, i) => {
      const mine = sweep
        .filter((r) => r.contender === id)
        .sort((a, b) => a.params.acquirers - b.params.acquirers);
      return {
        label: mine[0]!.label,
        color: COLORS[i % COLORS.length]!,
        points: mine.map((r) => ({ x: r.params.acquirers, y: metric(r) })),
      };
    });
  const cmds = make((r) => figures(r).cmdsPerS);
  const cpu = make((r) => figures(r).cpuPct);
  const W = 1000;
  const H = 470;
  const legendY = 400;
  const legend = cmds
    .map((s, i) => {
      const x = 80 + (i % 3) * 300;
      const y = legendY + Math.floor(i / 3) * 20;
      return (
        `<line x1="${x}" y1="${y}" x2="${x + 24}" y2="${y}" stroke="${s.color}" stroke-width="3"/>` +
        `<text x="${x + 30}" y="${y + 4}">${esc(s.label)}</text>`
      );
    })
    .join('\n');
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" ` +
      `font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">` +
      `What each contender costs Redis as offered load grows</text>`,
    `<text x="${W / 2}" y="40" text-anchor="middle" fill="#555">${esc(subtitle)}</text>`,
    panel(cmds, xs, 'Redis commands/s (INFO commandstats)', 80, 80, 380, 250, 0),
    panel(cpu, xs, 'Redis CPU % (used_cpu_user + used_cpu_sys)', 580, 80, 380, 250, 1),
    legend,
    '</svg>',
  ].join('\n');
}
