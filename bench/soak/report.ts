/** The soak's report: its parameters, then markdown tables of the series, the upstream's peaks, answers and faults. */
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { columns, fmt } from '../format.js';
import { sum } from '../records.js';
import {
  CHANNELS,
  LEASE_TTL_MS,
  LONG_UPSTREAM,
  MODELS,
  PAUSE_MS,
  RESTART_DOWN_MS,
  UPSTREAM,
  WAIT_TIMEOUT_MS,
} from './config.js';
import type { Fault } from './faults.js';
import type { Excess } from './peaks.js';
import type { SoakResult } from './run.js';
import { METRICS, slopePerMinute, warmupS } from './series.js';
import { soakSvg } from './svg.js';

/**
 * How long after a Redis restart or pause ends its errors may still come: ioredis's reconnection back-off (up to
 * 2 s), the restart grace (3 s) and a wait time-out (2 s), with room to spare.
 */
export const FAULT_TAIL_S = 10;

/** The client-visible failures (neither a success, a 429 nor a client abort) outside every store fault's window. */
export function failuresOutsideFaults(r: Pick<SoakResult, 'clients' | 'faults'>) {
  const windows = r.faults.filter((f) => f.kind !== 'reload');
  return r.clients.failures.filter(
    (x) => !windows.some((f) => x.atS >= f.atS && x.atS <= f.endS + FAULT_TAIL_S),
  );
}

export function parameters(r: SoakResult): string {
  const o = r.options;
  const cpus = os.cpus();
  const channels = CHANNELS.map((c) => `${c.id} (max ${c.max.join(' ↔ ')}, ${c.models.join(', ')})`).join(
    '; ',
  );
  return [
    `${r.startedAt} · private redis-server ${r.redisVersion} · Node ${process.version} · ` +
      `${cpus.length} × ${cpus[0]?.model.trim() ?? '?'} · ${os.type()} ${os.release()}`,
    '',
    `${fmt(o.durationS, 0)} s (ran ${fmt(r.ranS, 0)} s); two \`slotgate serve\` processes on one config file and one ` +
      `Redis; channels ${channels}, c0's max alternating at every reload; ${o.ratePerS} requests/s (Poisson, ` +
      `seed ${o.seed}) dealt round-robin, ${MODELS.map(([m, share]) => `${100 * share} % ${m}`).join(', ')}, half streamed; 7.5 % aborted by the client 0–800 ms ` +
      `after sending, 7.5 % of the streamed ones 0–200 ms after their first chunk; the upstream answers after ` +
      `${UPSTREAM.holdMs} ms or streams ${UPSTREAM.chunks} chunks ${UPSTREAM.chunkDelayMs} ms apart (the long ` +
      `channel: ${LONG_UPSTREAM.holdMs} ms, ${LONG_UPSTREAM.chunks} chunks ${LONG_UPSTREAM.chunkDelayMs} ms apart); lease TTL ` +
      `${LEASE_TTL_MS / 1000} s, wait time-out ${WAIT_TIMEOUT_MS / 1000} s. Faults: a config reload every ` +
      `${o.reloadEveryS} s, a Redis restart (down ${RESTART_DOWN_MS / 1000} s, back empty) every ${o.restartEveryS} ` +
      `s, a \`CLIENT PAUSE\` of ${PAUSE_MS / 1000} s every ${o.pauseEveryS} s.`,
  ].join('\n');
}

export function seriesTable(r: SoakResult): string {
  const from = warmupS(r.options.durationS);
  const rows = METRICS.flatMap((m) =>
    m.lines(r.samples).map((line) => {
      const values = line.points.map(([, v]) => v);
      return {
        name: `${m.title}${m.unit ? ` (${m.unit})` : ''}, ${line.label}`,
        n: values.length,
        first: values[0] ?? NaN,
        last: values.at(-1) ?? NaN,
        min: Math.min(...values),
        max: Math.max(...values),
        slope: slopePerMinute(line.points.filter(([at]) => at >= from)),
      };
    }),
  );
  const n = (x: number) => fmt(x, Math.abs(x) < 10 ? 2 : 1);
  return (
    `Slopes: least squares over the samples from ${fmt(from, 0)} s on (the first fifth of the run, at most a ` +
    `minute, is warm-up), per minute.\n\n` +
    columns(rows, [
      ['series', (x) => x.name],
      ['samples', (x) => x.n],
      ['first', (x) => n(x.first)],
      ['last', (x) => n(x.last)],
      ['min', (x) => n(x.min)],
      ['max', (x) => n(x.max)],
      ['slope /min', (x) => n(x.slope)],
    ])
  );
}

/** An arrival over the bound, as the table shows one not explained by a call closed early. */
const excessText = (e: Excess) => `${fmt(e.atS, 0)} s: ${e.inFlight}/${e.bound}`;

export function peakTable(r: SoakResult): string {
  const rows = CHANNELS.map((c) => {
    const over = r.excess.filter((e) => e.channel === c.id);
    const lags = over.flatMap((e) => (e.explained ? [e.lagMs!] : []));
    return {
      id: c.id,
      max: c.max,
      ...r.peaks[c.id]!,
      over,
      lags,
      unexplained: over.filter((e) => !e.explained),
    };
  });
  return (
    'The upstream counts its own calls in flight. "Transition": from a reload until both gateways run the new ' +
    'file and the slots taken under a higher old max have drained; the bound there is the higher of the two. ' +
    '"Arrivals over the bound": calls that reached the upstream while it had the bound in flight already; ' +
    '"explained" when enough of those were calls the gateway closed early (a client abort, a fenced slot) and ' +
    'whose close had not reached the upstream yet (docs/redis.md, failure bounds), with the longest such lag.\n\n' +
    columns(rows, [
      ['channel', (x) => x.id],
      ['max', (x) => x.max.join(' ↔ ')],
      ['peak, one max in force', (x) => `${x.steady}`],
      [
        'peak in transitions',
        (x) => (x.transitionBound ? `${x.transition} (bound ${x.transitionBound})` : '–'),
      ],
      ['arrivals over the bound', (x) => fmt(x.over.length, 0)],
      [
        'explained, longest lag',
        (x) => (x.lags.length ? `${x.lags.length}, ${fmt(Math.max(...x.lags), 0)} ms` : '–'),
      ],
      [
        'not explained',
        (x) => (x.unexplained.length ? `**${x.unexplained.map(excessText).join(', ')}**` : '0'),
      ],
    ])
  );
}

export function answersTable(r: SoakResult): string {
  const c = r.clients;
  const rows = Object.entries(c.outcomes).sort((a, b) => b[1] - a[1]);
  const outside = failuresOutsideFaults(r);
  return (
    `${fmt(c.sent, 0)} requests sent, ${fmt(c.done, 0)} answered in full (2xx), ${fmt(c.shed, 0)} not sent ` +
    `(the generator's own in-flight bound); failures outside a Redis fault's window (its start to ` +
    `${FAULT_TAIL_S} s after its end): ${outside.length ? `**${outside.length}**` : 'none'}.\n\n` +
    columns(rows, [
      ['answer as the client saw it', ([k]) => k],
      ['count', ([, v]) => fmt(v, 0)],
      ['share', ([, v]) => `${fmt((100 * v) / Math.max(1, c.sent), 1)} %`],
    ])
  );
}

export function faultTable(faults: readonly Fault[]): string {
  const kinds = ['reload', 'restart', 'pause'] as const;
  return columns(kinds, [
    ['fault', (k) => k],
    ['count', (k) => faults.filter((f) => f.kind === k).length],
    [
      'at (s)',
      (k) =>
        faults
          .filter((f) => f.kind === k)
          .map((f) => fmt(f.atS, 0))
          .join(', ') || '–',
    ],
    [
      'took (s)',
      (k) => {
        const took = faults.filter((f) => f.kind === k).map((f) => f.endS - f.atS);
        return took.length ? `${fmt(Math.min(...took), 1)}–${fmt(Math.max(...took), 1)}` : '–';
      },
    ],
  ]);
}

export function warningLines(r: SoakResult): string {
  const all: Record<string, number> = {};
  for (const w of r.gatewayWarnings) for (const [k, v] of Object.entries(w)) all[k] = (all[k] ?? 0) + v.count;
  const lines = Object.entries(all).sort((a, b) => b[1] - a[1]);
  if (!lines.length) return 'No gateway log line at warn or above.';
  return `Gateway log lines at warn or above (${sum(lines.map(([, v]) => v))}), by message:\n\n${lines.map(([k, v]) => `- ${v} × ${k.length > 160 ? `${k.slice(0, 160)}…` : k}`).join('\n')}`;
}

export function soakReport(r: SoakResult): string {
  return [
    `# slotgate soak\n\n${parameters(r)}`,
    `## Series\n\n${seriesTable(r)}`,
    `## The upstream's peak per channel\n\n${peakTable(r)}`,
    `## Answers\n\n${answersTable(r)}`,
    `## Faults\n\n${faultTable(r.faults)}`,
    `## Gateway warnings\n\n${warningLines(r)}`,
  ].join('\n\n');
}

/** Writes the report, the raw samples as JSON and the SVG into `dir`; returns their paths. */
export async function writeSoak(
  result: SoakResult,
  dir: string,
): Promise<Record<'md' | 'json' | 'svg', string>> {
  await mkdir(dir, { recursive: true });
  const base = join(dir, `soak-${result.startedAt.replace(/[:.]/g, '-')}`);
  const files = { md: `${base}.md`, json: `${base}.json`, svg: `${base}.svg` };
  await writeFile(files.md, `${soakReport(result)}\n`);
  await writeFile(files.json, `${JSON.stringify(result, null, 2)}\n`);
  await writeFile(files.svg, soakSvg(result.samples, result.faults, result.ranS));
  return files;
}
