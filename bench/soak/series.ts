/**
 * The sampled series the report and the SVG show: each gateway's RSS, heap used, event-loop delay p99 and active
 * handles, and Redis's keys and memory, with their least-squares slope per minute.
 */
import type { GatewaySample, Sample } from './sampler.js';

export interface Metric {
  title: string;
  unit: string;
  /** One line per gateway, or one for Redis. */
  lines(samples: readonly Sample[]): { label: string; points: [atS: number, value: number][] }[];
}

const MB = 2 ** 20;

const perGateway =
  (read: (g: GatewaySample) => number) =>
  (samples: readonly Sample[]): ReturnType<Metric['lines']> =>
    (samples[0]?.gateways ?? []).map((_, i) => ({
      label: `gateway ${i + 1}`,
      points: samples.flatMap((s) => {
        const g = s.gateways[i];
        return g ? [[s.atS, read(g)] as [number, number]] : [];
      }),
    }));

const ofRedis =
  (read: (r: NonNullable<Sample['redis']>) => number) =>
  (samples: readonly Sample[]): ReturnType<Metric['lines']> => [
    {
      label: 'redis',
      points: samples.flatMap((s) => (s.redis ? [[s.atS, read(s.redis)] as [number, number]] : [])),
    },
  ];

export const METRICS: readonly Metric[] = [
  { title: 'RSS', unit: 'MB', lines: perGateway((g) => g.rssBytes / MB) },
  { title: 'heap used', unit: 'MB', lines: perGateway((g) => g.heapUsedBytes / MB) },
  { title: 'event-loop delay p99', unit: 'ms', lines: perGateway((g) => g.eventLoopP99S * 1000) },
  { title: 'active handles', unit: '', lines: perGateway((g) => g.activeHandles) },
  { title: 'Redis keys (DBSIZE)', unit: '', lines: ofRedis((r) => r.keys) },
  { title: 'Redis used_memory', unit: 'MB', lines: ofRedis((r) => r.usedMemoryBytes / MB) },
];

/** The least-squares slope of `points` per minute (NaN with fewer than two). */
export function slopePerMinute(points: readonly (readonly [number, number])[]): number {
  const n = points.length;
  if (n < 2) return NaN;
  const mx = points.reduce((a, [x]) => a + x, 0) / n;
  const my = points.reduce((a, [, y]) => a + y, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (const [x, y] of points) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) ** 2;
  }
  return sxx === 0 ? NaN : (sxy / sxx) * 60;
}

/** The start of the slopes' window: the first fifth of the run, at most a minute, is warm-up. */
export const warmupS = (durationS: number): number => Math.min(60, durationS / 5);
