/** The adaptive scenario's markdown: its parameters, a row per phase of each run, and each run against the targets. */
import { columns, fmt, pct, type Column } from '../format.js';
import {
  CLIENTS_PER_INSTANCE,
  HOLD_MS,
  OPEN_RATE_PER_S,
  RETRY_WAIT_MS,
  SAMPLE_MS,
  type Grid,
  type Schedule,
} from './config.js';
import type { AdaptiveRun, PhaseFigures } from './run.js';

/** Issue 36's targets, after the settling time of each phase. */
export const TARGETS = { goodputRatio: 0.8, refusedShare: 0.05 } as const;

export function adaptiveParams(grid: Grid, settleMs: number, seed: number, scale: number): string {
  return [
    `Grid ${grid}${scale > 1 ? ` (every schedule ${scale}× faster)` : ''}. One channel of \`slotgate serve\` ` +
      `processes (the built gateway, \`retry_times: 0\`) before an upstream in the bench process that serves up to K ` +
      `requests at once, holds each ${HOLD_MS} ms and answers 429 (\`Retry-After: 1\`) past K in flight (the ` +
      `latency-only schedule queues past K instead); a private redis-server.`,
    `Contenders: slotgate adaptive (\`max_concurrency: 32\`, \`adaptive: { min_concurrency: 1 }\`, the other ` +
      `options at their defaults: probe_after 30, latency_tolerance 2, retry_after_cooldown_s 10) on one Redis; the ` +
      `same on gateways without Redis (each adapts alone: a per-instance limiter); static \`max_concurrency\` 32 and ` +
      `8 on one Redis.`,
    `Closed loop: ${CLIENTS_PER_INSTANCE} clients per gateway, each sends its next request when answered and waits ` +
      `${RETRY_WAIT_MS} ms after a 429 (or any other failure) first. Open loop: Poisson arrivals at ` +
      `${OPEN_RATE_PER_S}/s over every gateway together (round-robin, seed ${seed}), above the highest K ÷ hold ` +
      `(12 ÷ 0.2 s = 60/s).`,
    `Each phase is counted from ${settleMs / 1000} s after its start (the settling time): goodput = served/s ÷ ideal ` +
      `(mean K over that part ÷ ${HOLD_MS / 1000} s); 429 share = the upstream's refusals ÷ the requests it received, ` +
      `after the settling time and over the whole phase; highest = the most requests at the upstream at once; ` +
      `limit ÷ K = the mean over samples every ${SAMPLE_MS} ms after the settling time of the fleet's limit (the ` +
      `shared one from Redis; per-instance: the sum of every gateway's \`adaptive_limit\` from \`/admin/channels\`; ` +
      `static: the max) ÷ K; p50 = median answer time of the successes.`,
  ].join('\n\n');
}

type Row = { run: AdaptiveRun; phase: PhaseFigures; i: number };

const PHASE_COLUMNS: Column<Row>[] = [
  ['contender', (r) => (r.i === 0 ? r.run.label : '')],
  ['instances', (r) => (r.i === 0 ? r.run.instances : '')],
  ['phase (K)', (r) => `${r.i + 1} (${r.phase.kText})`],
  ['ideal/s', (r) => fmt(r.phase.ideal, 0)],
  ['goodput ÷ ideal', (r) => fmt(r.phase.goodputRatio, 2)],
  ['429 share after settling', (r) => pct(r.phase.refusedAfter)],
  ['429 share, whole phase', (r) => pct(r.phase.refusedWhole)],
  ['highest at upstream / max', (r) => `${r.phase.highest}/${r.run.max}`],
  ['limit ÷ K', (r) => fmt(r.phase.limitOverK, 2)],
  ['p50 ms', (r) => fmt(r.phase.p50Ms, 0)],
];

/** A run's worst phase against the targets. */
export function verdict(r: AdaptiveRun) {
  const goodput = Math.min(...r.phases.map((p) => p.goodputRatio));
  const refused = Math.max(...r.phases.map((p) => p.refusedAfter));
  const misses = [
    goodput < TARGETS.goodputRatio && `goodput ${fmt(goodput, 2)}`,
    refused > TARGETS.refusedShare && `429 ${pct(refused)}`,
    r.highest > r.max && `${r.highest} > max`,
  ].filter(Boolean);
  return { goodput, refused, text: misses.length ? `missed: ${misses.join(', ')}` : 'met' };
}

const VERDICT_COLUMNS: Column<AdaptiveRun>[] = [
  ['contender', (r) => r.label],
  ['instances', (r) => r.instances],
  ['worst goodput ÷ ideal', (r) => fmt(verdict(r).goodput, 2)],
  ['worst 429 share after settling', (r) => pct(verdict(r).refused)],
  ['highest at upstream / max', (r) => `${r.highest}/${r.max}`],
  ['targets (≥ 0.8, ≤ 5 %, ≤ max)', (r) => verdict(r).text],
  ['plot', (r) => r.svg ?? '–'],
];

/** The tables of one schedule and loop. */
export function adaptiveSection(schedule: Schedule, loop: string, runs: readonly AdaptiveRun[]): string {
  const rows = runs.flatMap((run) => run.phases.map((phase, i) => ({ run, phase, i })));
  return [
    `### ${schedule.id}, ${loop} loop: ${schedule.title}`,
    columns(rows, PHASE_COLUMNS),
    columns(runs, VERDICT_COLUMNS),
  ].join('\n\n');
}
