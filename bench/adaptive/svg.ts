/**
 * One adaptive run as an SVG: the fleet's limit against the hidden capacity K and what the upstream had in flight,
 * over time, with the phase boundaries (dashed) and each phase's settling time (shaded, not counted).
 */
import { fmt } from '../format.js';
import { esc, timeTicks } from '../soak/svg.js';
import type { AdaptiveRun, Sample } from './run.js';

const W = 720;
const H = 280;
const M = { left: 40, right: 16, top: 46, bottom: 28 };
const SERIES: { label: string; color: string; width: number; value: (s: Sample) => number }[] = [
  { label: 'K (hidden capacity)', color: '#d62728', width: 2, value: (s) => s.k },
  { label: 'limit (fleet)', color: '#1f77b4', width: 2, value: (s) => s.limit },
  { label: 'at the upstream', color: '#7f7f7f', width: 1, value: (s) => s.upstream },
];

/** The file name of a run's SVG: the same for the same run in every bench. */
export const svgName = (r: Pick<AdaptiveRun, 'schedule' | 'loop' | 'contender' | 'instances'>): string =>
  `adaptive-${r.schedule}-${r.loop}-${r.contender}-x${r.instances}.svg`;

export function adaptiveSvg(r: AdaptiveRun): string {
  const spanS = (r.phases.at(-1)?.to ?? 1000) / 1000;
  const top = Math.max(1, ...r.samples.flatMap((s) => SERIES.map((x) => x.value(s))));
  const hi = Math.ceil(top / 4) * 4;
  const pw = W - M.left - M.right;
  const ph = H - M.top - M.bottom;
  const x = (s: number) => M.left + (s / spanS) * pw;
  const y = (v: number) => M.top + ph - (v / hi) * ph;
  const settling = r.phases.map(
    (p) =>
      `<rect x="${x(p.from / 1000)}" y="${M.top}" width="${x(r.settleMs / 1000) - M.left}" height="${ph}" fill="#eee"/>`,
  );
  const bounds = r.phases
    .slice(0, -1)
    .map(
      (p) =>
        `<line x1="${x(p.to / 1000)}" x2="${x(p.to / 1000)}" y1="${M.top}" y2="${M.top + ph}" stroke="#888" stroke-dasharray="3,3"/>`,
    );
  const lines = SERIES.map((sr) => {
    const d = r.samples.map(
      (s, i) => `${i ? 'L' : 'M'}${x(s.at / 1000).toFixed(1)},${y(sr.value(s)).toFixed(1)}`,
    );
    return `<path fill="none" stroke="${sr.color}" stroke-width="${sr.width}" d="${d.join(' ')}"/>`;
  });
  const yTicks = [0, hi / 4, hi / 2, (3 * hi) / 4, hi].map(
    (v) =>
      `<text x="${M.left - 4}" y="${y(v) + 4}" text-anchor="end">${fmt(v, 0)}</text>` +
      `<line x1="${M.left}" x2="${M.left + pw}" y1="${y(v)}" y2="${y(v)}" stroke="#f4f4f4"/>`,
  );
  const xTicks = timeTicks(spanS).map(
    (t) => `<text x="${x(t)}" y="${H - 10}" text-anchor="middle">${fmt(t, 0)} s</text>`,
  );
  const legend = SERIES.map(
    (sr, i) =>
      `<g transform="translate(${M.left + i * 170},32)"><line x2="16" stroke="${sr.color}" stroke-width="${sr.width}"/>` +
      `<text x="20" y="4">${esc(sr.label)}</text></g>`,
  );
  const title = `${r.schedule}, ${r.loop} loop, ${r.label}, ${r.instances} instance${r.instances > 1 ? 's' : ''}`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="${M.left}" y="14" font-weight="bold">${esc(title)}</text>`,
    ...settling,
    ...yTicks,
    `<rect x="${M.left}" y="${M.top}" width="${pw}" height="${ph}" fill="none" stroke="#ccc"/>`,
    ...bounds,
    ...lines,
    ...xTicks,
    ...legend,
    '</svg>',
    '',
  ].join('\n');
}
