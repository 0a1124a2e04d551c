/**
 * Adaptive limits: one limit per channel for the whole fleet, learned from what its upstream answers, never above the
 * channel's max nor below its floor (docs/admission.md, "Adaptive limits"). The store keeps the limit and applies the
 * law below where it keeps it: Redis in lua/includes/limit.lua, the MemoryStore with `nextLimit`. The two are checked
 * against each other (test/integration/adaptive-law.test.ts).
 *
 * The law. A report comes with every release of an adaptive channel's slot, with `inFlight`, the slots in use just
 * before it (this one included):
 * - an overload (a 429, an "overloaded" answer, a time-out or a refused connection) says the upstream took fewer than
 *   `inFlight`: the limit falls to `inFlight - 1`. A time to first byte above `tolerance` × the least one seen lately
 *   says the upstream queues: the limit falls toward `inFlight × least ÷ this one` (Little's law: what it serves at
 *   once), by at most a fifth per round, since a stalled host slows first bytes too.
 *   Each is a measure, not a factor: the refusals of one burst all measure the same burst, so N instances reporting it
 *   lower the limit as far as one would. Within a window of 500 ms the limit falls at most to a quarter of where the
 *   window began, so late reports of an older burst cannot drive it down further.
 * - a success while every slot was in use and requests were waiting raises the limit by 1 ÷ limit: one slot per
 *   round of requests at full use (additive increase). With nobody waiting it does not move. The level that last
 *   drew an overload is probed again only `probeMs` after it did, so at a steady capacity one request in every
 *   `probeMs` is refused; once that level succeeds it is forgotten and the limit grows on.
 */

/** A candidate's adaptive limit (the gateway's `adaptive:` block). */
export interface AdaptiveOptions {
  /** @default true when the block is given */
  enabled?: boolean;
  /** The floor the limit never goes below (at most the channel's max). @default 1 */
  minConcurrency?: number;
  /** false: the limit is learned and shown but the channel's max is applied (to observe before enforcing). @default true */
  enforce?: boolean;
  /** Successes between two tries of the level that last drew an overload: at a steady capacity one request in this many + 1 is refused. @default 30 */
  probeAfter?: number;
  /**
   * A time to first byte above this × the least one lately counts as queueing; 0 ignores latency (an LLM's first byte
   * varies with its prompt: turn it on, at 2–3, for an upstream whose first byte is steady). @default 0
   */
  latencyTolerance?: number;
}

export const ADAPTIVE_DEFAULTS = { minConcurrency: 1, probeAfter: 30, latencyTolerance: 0 } as const;

/** Within one window the limit falls at most to a quarter of where the window began. */
export const LIMIT_WINDOW_MS = 500;
/** One slow first byte lowers the limit at most to this share of it: latency is a noisy signal (a stalled host). */
export const LATENCY_STEP = 0.8;
/** The least time to first byte is kept per bucket of this length; the baseline is the least of two buckets. */
export const LATENCY_BUCKET_MS = 30_000;
/** An adaptive channel's limit lives this long past its last report, then starts again at the channel's max. */
export const LIMIT_KEY_TTL_MS = 3_600_000;

/** The law's parameters as a report carries them to the store. */
export interface LimitLaw {
  floor: number;
  ceiling: number;
  /** Successes between two tries of the level that last drew an overload. */
  probeAfter: number;
  /** 0: latency ignored. */
  tolerance: number;
}

/** What the upstream said of one request. */
export type UpstreamSignal =
  | { kind: 'ok'; firstByteMs?: number }
  /** A 429, a 529 or 503 "overloaded", a time-out or a refused connection. */
  | { kind: 'overloaded' };

/** The stored state of a channel's limit (lua/includes/limit.lua names each field). */
export interface LimitState {
  /** l: the limit, to 3 decimals. */
  limit: number;
  /** w, wb: the decrease window's start and the limit then. */
  windowAt: number;
  windowBase: number;
  /** f: the slots in flight when the last overload came (0: none to probe); k: successes since. */
  failedLevel: number;
  successes: number;
  /** d: when the latency last lowered the limit. */
  slowedAt: number;
  /** mb, m, mp: the latency bucket (ms ÷ LATENCY_BUCKET_MS), its least first-byte time, the bucket before's. */
  bucket: number;
  least: number | undefined;
  leastBefore: number | undefined;
}

export interface LimitReport {
  signal: UpstreamSignal;
  /** Slots in use just before this release, this one included. */
  inFlight: number;
  /** How long this slot was held: a slow answer of a request begun before the latency last lowered the limit says nothing new. */
  heldMs: number;
  /** Requests were waiting for the channel. */
  demand: boolean;
  now: number;
  law: LimitLaw;
}

const round3 = (n: number): number => Math.floor(n * 1000 + 0.5) / 1000;

/** The floor within [1, ceiling]. */
export const floorOf = (law: Pick<LimitLaw, 'floor' | 'ceiling'>): number =>
  Math.max(1, Math.min(law.floor, law.ceiling));

/** The limit in force: the whole part of the stored limit within [floor, ceiling]; the ceiling when none is stored. */
export function effectiveLimit(limit: number | undefined, floor: number, ceiling: number): number {
  if (limit === undefined) return ceiling;
  return Math.max(Math.max(1, Math.min(floor, ceiling)), Math.min(ceiling, Math.floor(limit)));
}

/** The state after one report (`state` undefined: none stored, the limit starts at the ceiling). */
export function nextLimit(state: LimitState | undefined, report: LimitReport): LimitState {
  const { signal, inFlight, heldMs, demand, now, law } = report;
  const floor = floorOf(law);
  const s: LimitState = state
    ? { ...state }
    : {
        limit: law.ceiling,
        windowAt: 0,
        windowBase: law.ceiling,
        failedLevel: 0,
        successes: 0,
        slowedAt: 0,
        bucket: 0,
        least: undefined,
        leastBefore: undefined,
      };
  let limit = Math.max(floor, Math.min(law.ceiling, s.limit));

  const bucket = Math.floor(now / LATENCY_BUCKET_MS);
  if (s.bucket !== bucket) {
    s.leastBefore = s.bucket === bucket - 1 ? s.least : undefined;
    s.least = undefined;
    s.bucket = bucket;
  }
  const baseline = minOf(s.least, s.leastBefore);

  let measured: number | undefined;
  if (signal.kind === 'overloaded') measured = inFlight - 1;
  else if (signal.firstByteMs !== undefined && signal.firstByteMs >= 0) {
    const ms = signal.firstByteMs;
    const slow = law.tolerance > 0 && baseline !== undefined && baseline > 0 && ms > law.tolerance * baseline;
    if (slow && now - heldMs >= s.slowedAt) {
      measured = Math.max((inFlight * baseline) / ms, LATENCY_STEP * limit);
      s.slowedAt = now;
    }
    s.least = minOf(s.least, ms);
  }

  if (measured !== undefined) {
    // a new window: the level to probe is this one's; within a window, the lowest of its reports
    if (now - s.windowAt >= LIMIT_WINDOW_MS) {
      s.windowAt = now;
      s.windowBase = limit;
      s.failedLevel = inFlight;
    } else {
      s.failedLevel = s.failedLevel > 0 ? Math.min(s.failedLevel, inFlight) : inFlight;
    }
    s.successes = 0;
    limit = Math.min(limit, Math.max(floor, s.windowBase / 4, measured));
  } else if (signal.kind === 'ok' && limit < law.ceiling && demand && inFlight >= Math.floor(limit)) {
    s.successes++;
    if (s.failedLevel > 0 && inFlight >= s.failedLevel) s.failedLevel = 0;
    let next = limit + 1 / Math.floor(limit);
    if (s.failedLevel > 0 && Math.floor(next) >= s.failedLevel && s.successes < law.probeAfter)
      next = Math.min(next, s.failedLevel - 0.001);
    limit = Math.max(limit, Math.min(law.ceiling, next));
  }
  s.limit = round3(limit);
  return s;
}

function minOf(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  return Math.min(a, b);
}
