/**
 * The dashboard's history: what this instance saw over the last 15 minutes, in its memory only. Every interval one
 * sample reads the engine's cumulative counters, the channels' loads (through the load view), each adaptive channel's
 * limit as this instance last learned it and the upstream 429s counted so far, and appends the point for the interval
 * just ended to a ring: memory is bounded by points × channels whatever the traffic.
 */
import type { Admission, Candidate, Clock, HistogramSnapshot, Outcome } from 'slotgate';

/** The 429 reasons of slotgate's own answers: a channel's capacity, or a client's own limit. */
const REJECTIONS = ['full', 'queue_full', 'wait_timeout', 'client_limit'] as const;
type Rejection = (typeof REJECTIONS)[number];

const outcomeOf = (reason: Rejection): Outcome =>
  reason === 'client_limit' ? 'client_limit' : `capacity_${reason}`;

interface ChannelPoint {
  max: number;
  active: number;
  waiting: number;
  /** The adaptive limit at the end of the interval; absent for a channel without one. */
  limit?: number;
  /** The upstream's 429 answers per second over the interval. */
  upstream429PerS: number;
}

/** Upstream 429 answers counted since start, by channel (the proxy's metrics count them). */
export type Upstream429s = (channelId: string) => number;

/** What one sample reads: cumulative counters (since the engine started) and the channels' loads now. */
export type Reading = Awaited<ReturnType<typeof readAdmission>>;

export type HistoryPoint = ReturnType<typeof pointBetween>;

export interface HistoryOptions {
  /** @default 5000 */
  intervalMs?: number;
  /** @default 180 (15 minutes at 5 s) */
  points?: number;
  /** @default the system clock */
  clock?: Pick<Clock, 'now' | 'setTimer'>;
}

const systemTimers: Pick<Clock, 'now' | 'setTimer'> = {
  now: () => Date.now(),
  setTimer(fn, ms) {
    const timer = setTimeout(fn, ms);
    timer.unref();
    return { cancel: () => clearTimeout(timer) };
  },
};

/** Quantile q of the observations between two cumulative snapshots (a bucket's upper bound); null when none. */
export function windowQuantile(now: HistogramSnapshot, before: HistogramSnapshot, q: number): number | null {
  const counts = now.counts.map((c, i) => c - (before.counts[i] ?? 0));
  const total = counts.reduce((a, b) => a + b, 0);
  if (total <= 0) return null;
  const rank = Math.ceil(q * total);
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    // above the last bucket (60 s, the longest wait_timeout_ms) reads as the last bucket
    if (seen >= rank) return now.buckets[Math.min(i, now.buckets.length - 1)]!;
  }
  return now.buckets[now.buckets.length - 1]!;
}

/** The rates over the interval between two readings, and the wait quantiles of the waits that ended in it. */
function pointBetween(before: Reading, after: Reading) {
  const seconds = Math.max(after.at - before.at, 1) / 1000;
  const rate = (read: (r: Reading) => number) => Math.max(0, read(after) - read(before)) / seconds;
  const rejectionsPerS = {} as Record<Rejection, number>;
  for (const reason of REJECTIONS) rejectionsPerS[reason] = rate((r) => r.outcomes[outcomeOf(reason)]);
  const earlier = new Map(before.channels.map((c) => [c.id, c.upstream429s]));
  return {
    /** End of the interval (the clock's ms). */
    t: after.at,
    admissionsPerS: rate((r) => r.outcomes.acquired),
    rejectionsPerS,
    /** Upper bound of the wait-time bucket holding p50 of the waits that ended in the interval; null: none. */
    waitP50Ms: windowQuantile(after.waits, before.waits, 0.5),
    waitP99Ms: windowQuantile(after.waits, before.waits, 0.99),
    commandsPerS: rate((r) => r.commands),
    channels: new Map<string, ChannelPoint>(
      after.channels.map(({ id, upstream429s, ...load }) => {
        const since = upstream429s - (earlier.get(id) ?? upstream429s);
        return [id, { ...load, upstream429PerS: Math.max(0, since) / seconds }];
      }),
    ),
  };
}

/**
 * A reading of the engine's counters now, of the channels' loads through the load view and of their adaptive limits
 * (no store command).
 */
export function readAdmission(
  admission: Admission,
  channels: readonly Candidate[],
  now: () => number,
  upstream429s: Upstream429s = () => 0,
) {
  const stats = admission.stats();
  const limits = admission.limits(channels);
  const at = now();
  const commands = Object.values(stats.commands).reduce((a, b) => a + b, 0);
  return admission.viewLoads(channels).then((loads) => ({
    /** The clock's time when the counters were read. */
    at,
    outcomes: stats.outcomes,
    waits: stats.waitTimeMs,
    /** Store commands issued, every purpose. */
    commands,
    channels: channels.map((c) => {
      const limit = limits.get(c.id)?.limit;
      return {
        id: c.id,
        max: c.maxConcurrency ?? 0,
        active: loads.get(c.id)?.active ?? 0,
        waiting: loads.get(c.id)?.waiting ?? 0,
        ...(limit !== undefined && { limit }),
        upstream429s: upstream429s(c.id),
      };
    }),
  }));
}

const round = (n: number) => Math.round(n * 100) / 100;

function positive(name: string, n: number): number {
  if (!Number.isInteger(n) || n < 1)
    throw new RangeError(`Expected ${name} to be a positive integer, got ${n}`);
  return n;
}

export class History {
  readonly intervalMs: number;
  /** The most points kept: the oldest goes when one more comes. */
  readonly capacity: number;
  private readonly ring: HistoryPoint[] = [];
  private readonly clock: Pick<Clock, 'now' | 'setTimer'>;
  private last: Reading | undefined;
  private timer: { cancel(): void } | undefined;
  private sampling: Promise<void> | undefined;
  private running = false;

  constructor(
    private readonly read: () => Promise<Reading>,
    options: HistoryOptions = {},
  ) {
    this.intervalMs = positive('intervalMs', options.intervalMs ?? 5000);
    this.capacity = positive('points', options.points ?? 180);
    this.clock = options.clock ?? systemTimers;
  }

  /** Takes the first reading (a rate needs two) and samples every interval from then on. */
  start(): Promise<void> {
    if (this.running) return this.sampling ?? Promise.resolve();
    this.running = true;
    const first = this.sample();
    this.schedule(this.clock.now() + this.intervalMs);
    return first;
  }

  now(): number {
    return this.clock.now();
  }

  stop(): void {
    this.running = false;
    this.timer?.cancel();
    this.timer = undefined;
  }

  /** Due times stay on the start's grid, so a slow sample does not drift the ones after it. */
  private schedule(due: number): void {
    if (!this.running) return;
    const fire = () => {
      void this.sample();
      this.schedule(due + this.intervalMs);
    };
    this.timer = this.clock.setTimer(fire, Math.max(0, due - this.clock.now()));
  }

  /**
   * Reads once and appends the point since the previous reading. A sample still under way when the next is due makes
   * that one skip: the following point covers the longer interval, at its real rate. A failed read leaves a gap.
   */
  sample(): Promise<void> {
    this.sampling ??= this.read()
      .then((reading) => {
        if (this.last) this.ring.push(pointBetween(this.last, reading));
        if (this.ring.length > this.capacity) this.ring.shift();
        this.last = reading;
      })
      .catch(() => {})
      .finally(() => {
        this.sampling = undefined;
      });
    return this.sampling;
  }

  get points(): HistoryPoint[] {
    return [...this.ring];
  }

  /** GET /admin/history: the points in columns, oldest first; `channelOrder` first, then channels since removed. */
  toJSON(channelOrder: readonly string[] = []) {
    const points = this.ring;
    const ids = [...new Set([...channelOrder, ...points.flatMap((p) => [...p.channels.keys()])])];
    const column = (id: string, read: (c: ChannelPoint) => number | undefined) =>
      points.map((p) => {
        const c = p.channels.get(id);
        return (c && read(c)) ?? null;
      });
    const adaptive = (id: string) => points.some((p) => p.channels.get(id)?.limit !== undefined);
    const rejections = {} as Record<Rejection, number[]>;
    for (const reason of REJECTIONS) rejections[reason] = points.map((p) => round(p.rejectionsPerS[reason]));
    return {
      interval_ms: this.intervalMs,
      capacity: this.capacity,
      t: points.map((p) => p.t),
      admissions_per_s: points.map((p) => round(p.admissionsPerS)),
      rejections_per_s: rejections,
      wait_ms: { p50: points.map((p) => p.waitP50Ms), p99: points.map((p) => p.waitP99Ms) },
      commands_per_s: points.map((p) => round(p.commandsPerS)),
      // null where the channel was not in the configuration (or, for the limit, had no adaptive limit)
      channels: ids.map((id) => ({
        id,
        max_concurrency: column(id, (c) => c.max),
        active: column(id, (c) => c.active),
        waiting: column(id, (c) => c.waiting),
        upstream_429_per_s: column(id, (c) => round(c.upstream429PerS)),
        ...(adaptive(id) && { adaptive_limit: column(id, (c) => c.limit) }),
      })),
    };
  }
}
