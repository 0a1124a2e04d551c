/**
 * The adaptive scenario's parameters: the hidden-capacity schedules, the contenders (each a gateway config), the
 * loads and the grids. The upstream is issue 36's: capacity K, each request held 200 ms, a 429 with `Retry-After: 1`
 * past K in flight (or, for the latency-only schedule, a queue past K).
 */
import { drift, steps, type CapacitySchedule } from '../../test/helpers/hidden-capacity.js';

export const HOLD_MS = 200;
/** Each phase's figures are counted from this long after its start. */
export const SETTLE_MS = 4000;
/** How often the limit, K and the upstream's in-flight count are sampled. */
export const SAMPLE_MS = 250;
/** Closed loop: clients per gateway, and how long one waits after a 429 before it tries again. */
export const CLIENTS_PER_INSTANCE = 16;
export const RETRY_WAIT_MS = 100;
/** Open loop: Poisson arrivals per second over every gateway together, above the highest K ÷ hold (12 ÷ 0.2 s = 60). */
export const OPEN_RATE_PER_S = 90;
export const CHANNEL = 'ch';
export const ADMIN_TOKEN = 'adaptive-bench-admin';

export interface Schedule {
  id: string;
  title: string;
  mode: '429' | 'latency';
  capacity: CapacitySchedule;
  /** Phase boundaries in ms; the run lasts until the last. */
  phases: readonly number[];
  /** K per phase, as printed (a drift prints its range). */
  kText: readonly string[];
}

const stepped = (
  id: string,
  title: string,
  values: readonly number[],
  everyMs: number,
  mode: Schedule['mode'] = '429',
): Schedule => ({
  id,
  title,
  mode,
  capacity: steps(values, everyMs),
  phases: values.map((_, i) => (i + 1) * everyMs),
  kText: values.map(String),
});

const DRIFT_POINTS = [
  [0, 12],
  [20_000, 3],
  [40_000, 12],
] as const;

export const SCHEDULES: readonly Schedule[] = [
  stepped('steps', "K = 8, 3, 12 for 12 s each (the issue's upstream)", [8, 3, 12], 12_000),
  stepped('updown', 'K steps up and down every 10 s: 4, 12, 4, 12', [4, 12, 4, 12], 10_000),
  {
    id: 'drift',
    title: 'K drifts linearly from 12 down to 3 over 20 s and back up to 12 over 20 s (rounded down)',
    mode: '429',
    capacity: drift(DRIFT_POINTS),
    phases: [10_000, 20_000, 30_000, 40_000],
    kText: ['12→7', '7→3', '3→7', '7→12'],
  },
  stepped(
    'latency',
    'latency only (no 429: a queue past K), K = 8, 3, 12 for 12 s each',
    [8, 3, 12],
    12_000,
    'latency',
  ),
];

export interface ContenderSpec {
  id: string;
  label: string;
  max: number;
  adaptive: boolean;
  /** Shares one Redis (false: each gateway runs the in-process MemoryStore and adapts alone). */
  shared: boolean;
}

export const CONTENDERS: readonly ContenderSpec[] = [
  {
    id: 'adaptive',
    label: 'slotgate adaptive, max 32 (shared Redis)',
    max: 32,
    adaptive: true,
    shared: true,
  },
  {
    id: 'per-instance',
    label: 'per-instance adaptive, max 32 (no Redis)',
    max: 32,
    adaptive: true,
    shared: false,
  },
  { id: 'static32', label: 'static max 32', max: 32, adaptive: false, shared: true },
  { id: 'static8', label: 'static max 8', max: 8, adaptive: false, shared: true },
];

export type Loop = 'closed' | 'open';

export interface RunSpec {
  schedule: Schedule;
  contender: ContenderSpec;
  loop: Loop;
  instances: number;
}

export type Grid = 'full' | 'open' | 'steps' | 'quick';

const spec = (schedule: string, contender: string, loop: Loop, instances: number): RunSpec => ({
  schedule: SCHEDULES.find((s) => s.id === schedule)!,
  contender: CONTENDERS.find((c) => c.id === contender)!,
  loop,
  instances,
});

/**
 * The runs of a grid. `full` (about 15 min): every contender on the steps in the closed loop (the
 * per-instance limiter only where there is more than one instance: on one it is the shared one; the static maxes on
 * 2, the fleet, since a shared static max admits the same on any number of instances), and all but static
 * max 8 in the open loop; slotgate adaptive alone on the other schedules, closed loop on 1, 2 and 4 instances, and
 * the drift in the open loop on 2. `open`: the open-loop runs of `full` alone. `steps`: slotgate adaptive on the
 * issue's steps, closed loop, 1, 2 and 4 instances. `quick`: three runs, for a smoke test.
 */
export function runsOf(grid: Grid): RunSpec[] {
  if (grid === 'quick')
    return [
      spec('steps', 'adaptive', 'closed', 2),
      spec('steps', 'per-instance', 'open', 2),
      spec('latency', 'static8', 'closed', 1),
    ];
  const runs: RunSpec[] = [];
  for (const n of [1, 2, 4]) runs.push(spec('steps', 'adaptive', 'closed', n));
  if (grid === 'steps') return runs;
  for (const n of [2, 4]) runs.push(spec('steps', 'per-instance', 'closed', n));
  runs.push(spec('steps', 'static32', 'closed', 2), spec('steps', 'static8', 'closed', 2));
  for (const n of [1, 2, 4]) runs.push(spec('steps', 'adaptive', 'open', n));
  runs.push(spec('steps', 'per-instance', 'open', 4), spec('steps', 'static32', 'open', 2));
  if (grid === 'open')
    return [...runs.filter((r) => r.loop === 'open'), spec('drift', 'adaptive', 'open', 2)];
  for (const schedule of ['updown', 'drift', 'latency'])
    for (const n of [1, 2, 4]) runs.push(spec(schedule, 'adaptive', 'closed', n));
  runs.push(spec('drift', 'adaptive', 'open', 2));
  return runs;
}

/** A schedule run `scale` times faster (the quick grid: phases and K changes compressed, the hold unchanged). */
export function scaled(s: Schedule, scale: number): Schedule {
  if (scale === 1) return s;
  return {
    ...s,
    capacity: (ms) => s.capacity(ms * scale),
    phases: s.phases.map((p) => p / scale),
  };
}

/** The gateway config of a contender: one channel before the upstream at `baseUrl`. */
export function gatewayConfig(c: ContenderSpec, baseUrl: string, redis: { url: string; prefix: string }) {
  return {
    server: { host: '127.0.0.1', port: 0, log_format: 'json' },
    ...(c.shared ? { redis } : {}),
    admin: { token: ADMIN_TOKEN },
    channels: [
      {
        id: CHANNEL,
        type: 'openai',
        base_url: baseUrl,
        key: 'upstream-key',
        models: ['*'],
        max_concurrency: c.max,
        // latency on, as every run of this scenario measured it (its default is off)
        ...(c.adaptive ? { adaptive: { min_concurrency: 1, latency_tolerance: 2 } } : {}),
      },
    ],
    // a client sees the upstream's 429 itself: with one channel a retry would only ask it again
    settings: { retry_times: 0 },
  };
}
