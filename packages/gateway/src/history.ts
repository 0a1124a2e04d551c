/**
 * The dashboard's history: what this instance saw over the last 15 minutes, kept in its memory only. Every
 * `intervalMs` (5 s) one sample reads the engine's cumulative counters and the channels' loads (through the load
 * view, as /metrics does) and appends one point — the rates over the interval just ended, the wait quantiles of the
 * waits that ended in it, each channel's slots in use against its max — to a ring of `points` (180): memory is bounded
 * by points × channels whatever the traffic. GET /admin/history returns it in columns.
 */
import type { Admission, Candidate, Clock, HistogramSnapshot, Outcome } from 'slotgate';

/** A ring buffer: the last `capacity` values pushed, oldest first. */
export class Ring<T> {
  private readonly values: T[] = [];
  private next = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new RangeError(`Expected the ring's capacity to be a positive integer, got ${capacity}`);
  }

  push(value: T): void {
    if (this.values.length < this.capacity) this.values.push(value);
    else this.values[this.next] = value;
    this.next = (this.next + 1) % this.capacity;
  }

  get length(): number {
    return this.values.length;
  }

  toArray(): T[] {
    return this.values.length < this.capacity
      ? [...this.values]
      : [...this.values.slice(this.next), ...this.values.slice(0, this.next)];
  }
}

/** The 429 reasons of slotgate's own answers: a channel's capacity, or a client's own limit. */
export const REJECTIONS = ['full', 'queue_full', 'wait_timeout', 'client_limit'] as const;
export type Rejection = (typeof REJECTIONS)[number];

/** The admission outcome a rejection counts. */
const outcomeOf = (reason: Rejection): Outcome =>
  reason === 'client_limit' ? 'client_limit' : `capacity_${reason}`;

/** What one sample reads: cumulative counters (since the engine started) and the channels' loads now. */
export interface Reading {
  /** The clock's time when the counters were read. */
  at: number;
  outcomes: Readonly<Record<Outcome, number>>;
  waits: HistogramSnapshot;
  /** Store commands issued, every purpose. */
  commands: number;
  channels: ReadonlyArray<{ id: string; max: number; active: number; waiting: number }>;
}

export interface HistoryPoint {
  /** End of the interval (the clock's ms). */
  t: number;
  admissionsPerS: number;
  rejectionsPerS: Record<Rejection, number>;
  /** Upper bounds of the wait-time buckets holding p50 and p99 of the waits that ended in the interval; null: none. */
  waitP50Ms: number | null;
  waitP99Ms: number | null;
  commandsPerS: number;
  channels: ReadonlyMap<string, { max: number; active: number; waiting: number }>;
}

/** Time and timers; `Clock` from slotgate (its ManualClock in tests). */
export type HistoryClock = Pick<Clock, 'now' | 'setTimer'>;

export interface HistoryOptions {
  /** @default 5000 */
  intervalMs?: number;
  /** @default 180 (15 minutes at 5 s) */
  points?: number;
  /** @default the system clock */
  clock?: HistoryClock;
}

const systemTimers: HistoryClock = {
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

/** The point for the interval between two readings. */
export function pointBetween(before: Reading, after: Reading): HistoryPoint {
  const seconds = Math.max(after.at - before.at, 1) / 1000;
  const rate = (read: (r: Reading) => number) => Math.max(0, read(after) - read(before)) / seconds;
  const rejectionsPerS = {} as Record<Rejection, number>;
  for (const reason of REJECTIONS) rejectionsPerS[reason] = rate((r) => r.outcomes[outcomeOf(reason)]);
  return {
    t: after.at,
    admissionsPerS: rate((r) => r.outcomes.acquired),
    rejectionsPerS,
    waitP50Ms: windowQuantile(after.waits, before.waits, 0.5),
    waitP99Ms: windowQuantile(after.waits, before.waits, 0.99),
    commandsPerS: rate((r) => r.commands),
    channels: new Map(after.channels.map(({ id, ...load }) => [id, load])),
  };
}

/** A reading of the engine's counters now and of the channels' loads through the load view (never throws). */
export function readAdmission(
  admission: Admission,
  channels: readonly Candidate[],
  now: () => number,
): Promise<Reading> {
  const stats = admission.stats();
  const at = now();
  const commands = Object.values(stats.commands).reduce((a, b) => a + b, 0);
  return admission.viewLoads(channels).then((loads) => ({
    at,
    outcomes: stats.outcomes,
    waits: stats.waitTimeMs,
    commands,
    channels: channels.map((c) => ({
      id: c.id,
      max: c.maxConcurrency ?? 0,
      active: loads.get(c.id)?.active ?? 0,
      waiting: loads.get(c.id)?.waiting ?? 0,
    })),
  }));
}

/** GET /admin/history: the points in columns, oldest first. */
export interface HistoryBody {
  interval_ms: number;
  capacity: number;
  t: number[];
  admissions_per_s: number[];
  rejections_per_s: Record<Rejection, number[]>;
  wait_ms: { p50: Array<number | null>; p99: Array<number | null> };
  commands_per_s: number[];
  /** Every channel seen in the window, those of the configuration in force first; null where it was not there. */
  channels: Array<{
    id: string;
    max_concurrency: Array<number | null>;
    active: Array<number | null>;
    waiting: Array<number | null>;
  }>;
}

const round = (n: number) => Math.round(n * 100) / 100;

export class History {
  readonly intervalMs: number;
  private readonly ring: Ring<HistoryPoint>;
  private readonly clock: HistoryClock;
  private last: Reading | undefined;
  private timer: { cancel(): void } | undefined;
  private sampling: Promise<void> | undefined;
  private running = false;

  constructor(
    private readonly read: () => Promise<Reading>,
    options: HistoryOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? 5000;
    if (!Number.isInteger(this.intervalMs) || this.intervalMs < 1)
      throw new RangeError(`Expected intervalMs to be a positive integer, got ${this.intervalMs}`);
    this.ring = new Ring(options.points ?? 180);
    this.clock = options.clock ?? systemTimers;
  }

  /** Takes the first reading (no point yet: a rate needs two) and samples every interval from then on. */
  start(): Promise<void> {
    if (this.running) return this.sampling ?? Promise.resolve();
    this.running = true;
    const first = this.sample();
    this.schedule(this.clock.now() + this.intervalMs);
    return first;
  }

  /** The history's clock. */
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
    this.timer = this.clock.setTimer(
      () => {
        void this.sample();
        this.schedule(due + this.intervalMs);
      },
      Math.max(0, due - this.clock.now()),
    );
  }

  /**
   * Reads once and appends the point since the previous reading. A sample still under way when the next is due
   * (the store slow to answer) makes that one skip: the following point covers the longer interval, at its real rate.
   */
  sample(): Promise<void> {
    this.sampling ??= this.read()
      .then((reading) => {
        if (this.last) this.ring.push(pointBetween(this.last, reading));
        this.last = reading;
      })
      .catch(() => {
        // a failed read leaves a gap; the next one measures from the last good reading
      })
      .finally(() => {
        this.sampling = undefined;
      });
    return this.sampling;
  }

  get points(): HistoryPoint[] {
    return this.ring.toArray();
  }

  /** The points in columns; `channelOrder` (the configuration in force) comes first, then channels since removed. */
  toJSON(channelOrder: readonly string[] = []): HistoryBody {
    const points = this.ring.toArray();
    const ids = [...channelOrder];
    const known = new Set(ids);
    for (const p of points)
      for (const id of p.channels.keys())
        if (!known.has(id)) {
          known.add(id);
          ids.push(id);
        }
    const column = (id: string, read: (c: { max: number; active: number; waiting: number }) => number) =>
      points.map((p) => {
        const c = p.channels.get(id);
        return c ? read(c) : null;
      });
    const rejections = {} as Record<Rejection, number[]>;
    for (const reason of REJECTIONS) rejections[reason] = points.map((p) => round(p.rejectionsPerS[reason]));
    return {
      interval_ms: this.intervalMs,
      capacity: this.ring.capacity,
      t: points.map((p) => p.t),
      admissions_per_s: points.map((p) => round(p.admissionsPerS)),
      rejections_per_s: rejections,
      wait_ms: { p50: points.map((p) => p.waitP50Ms), p99: points.map((p) => p.waitP99Ms) },
      commands_per_s: points.map((p) => round(p.commandsPerS)),
      channels: ids.map((id) => ({
        id,
        max_concurrency: column(id, (c) => c.max),
        active: column(id, (c) => c.active),
        waiting: column(id, (c) => c.waiting),
      })),
    };
  }
}
