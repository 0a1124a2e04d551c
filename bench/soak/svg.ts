/**
 * The soak's series as one SVG: a small panel per metric (METRICS), two per row, on a shared time axis with every
 * fault marked (a reload a dashed line, a Redis restart a red line, a pause an orange band over its length, outlined so a long run's few pixels still show).
 */
import { fmt } from '../format.js';
import type { Fault } from './faults.js';
import type { Sample } from './sampler.js';
import { METRICS } from './series.js';

const W = 460;
const H = 170;
const M = { left: 56, right: 24, top: 24, bottom: 26 };
const COLORS: Record<string, string> = { 'gateway 1': '#1f77b4', 'gateway 2': '#ff7f0e', redis: '#2ca02c' };
const FAULT_STYLE: Record<Fault['kind'], string> = {
  reload: 'stroke="#888" stroke-dasharray="3,3"',
  restart: 'stroke="#d62728" stroke-width="1.5"',
  pause: 'fill="#ff7f0e" fill-opacity="0.3" stroke="#ff7f0e"',
};

/** Seconds between two samples above which they are not joined. */
const GAP_S = 2.5;

export const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');
/** Round tick steps in seconds: at most 6 ticks on the axis. */
const STEPS_S = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
export const timeTicks = (spanS: number): number[] => {
  const step = STEPS_S.find((s) => spanS / s <= 6) ?? Math.ceil(spanS / 6);
  return Array.from({ length: Math.floor(spanS / step) + 1 }, (_, k) => k * step);
};
/** Minutes from 2 minutes up, seconds below. */
const timeLabel = (s: number, spanS: number) => (spanS >= 120 ? `${fmt(s / 60, 1)} min` : `${fmt(s, 0)} s`);

function panel(
  title: string,
  lines: ReturnType<(typeof METRICS)[number]['lines']>,
  faults: readonly Fault[],
  spanS: number,
): string {
  const values = lines.flatMap((l) => l.points.map(([, v]) => v));
  let lo = values.length ? Math.min(...values) : 0;
  let hi = values.length ? Math.max(...values) : 1;
  if (hi - lo < 1e-9) [lo, hi] = [lo - 1, hi + 1];
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const x = (s: number) => M.left + (s / spanS) * pw;
  const y = (v: number) => M.top + ph - ((v - lo) / (hi - lo)) * ph;
  const marks = faults.map((f) =>
    f.kind === 'pause'
      ? `<rect x="${x(f.atS)}" y="${M.top}" width="${Math.max(1, x(f.endS) - x(f.atS))}" height="${ph}" ${FAULT_STYLE.pause}/>`
      : `<line x1="${x(f.atS)}" x2="${x(f.atS)}" y1="${M.top}" y2="${M.top + ph}" ${FAULT_STYLE[f.kind]}/>`,
  );
  // a gap in the samples (a source that did not answer) breaks the line
  const paths = lines.map((l) => {
    const d = l.points.map(
      ([t, v], i) =>
        `${i > 0 && t - l.points[i - 1]![0] <= GAP_S ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`,
    );
    return `<path fill="none" stroke="${COLORS[l.label] ?? '#000'}" stroke-width="1.2" d="${d.join(' ')}"/>`;
  });
  const ticks = timeTicks(spanS).map(
    (t) => `<text x="${x(t)}" y="${H - 8}" text-anchor="middle">${timeLabel(t, spanS)}</text>`,
  );
  return [
    `<text x="${M.left}" y="16" font-weight="bold">${esc(title)}</text>`,
    `<rect x="${M.left}" y="${M.top}" width="${pw}" height="${ph}" fill="none" stroke="#ccc"/>`,
    `<text x="${M.left - 4}" y="${M.top + 8}" text-anchor="end">${fmt(hi, 2)}</text>`,
    `<text x="${M.left - 4}" y="${M.top + ph}" text-anchor="end">${fmt(lo, 2)}</text>`,
    ...marks,
    ...paths,
    ...ticks,
  ].join('\n');
}

export function soakSvg(samples: readonly Sample[], faults: readonly Fault[], spanS: number): string {
  const legendH = 24;
  const rows = Math.ceil(METRICS.length / 2);
  const legend = [
    ...Object.entries(COLORS).map(([label, color]) => [
      `<line x2="16" ${`stroke="${color}"`} stroke-width="2"/>`,
      label,
    ]),
    [`<line x2="16" ${FAULT_STYLE.reload}/>`, 'reload'],
    [`<line x2="16" ${FAULT_STYLE.restart}/>`, 'Redis restart'],
    [`<rect y="-5" width="16" height="10" ${FAULT_STYLE.pause}/>`, 'CLIENT PAUSE'],
  ].map(
    ([mark, label], i) =>
      `<g transform="translate(${M.left + i * 120},12)">${mark}<text x="20" y="4">${label}</text></g>`,
  );
  const panels = METRICS.map((m, i) => {
    const title = `${m.title}${m.unit ? ` (${m.unit})` : ''}`;
    const at = `translate(${(i % 2) * W},${legendH + Math.floor(i / 2) * H})`;
    return `<g transform="${at}">\n${panel(title, m.lines(samples), faults, spanS)}\n</g>`;
  });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * W}" height="${legendH + rows * H}" ` +
      `font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    ...legend,
    ...panels,
    '</svg>',
    '',
  ].join('\n');
}
