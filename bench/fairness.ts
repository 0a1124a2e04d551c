/**
 * The fleet figures as pure functions of every request's record, so an ideal scheduler's records and a contender's
 * go through the same code: shares and Jain's index, utilisation, FIFO inversions, grant latency.
 */
import { percentile } from './load.js';

/** One request as its instance saw it; times in ms on one time base for every process (children.ts, wallNow). */
export interface RequestRecord {
  instance: number;
  arrival: number;
  /** When it was admitted, or refused. */
  outcome: number;
  /** The channel it was admitted on; undefined when refused. */
  channel?: string;
  /** Why it was refused: the contender's reason, `in_flight_cap` (shed by the bench) or `error: …`. */
  reason?: string;
  client?: string;
  /** Open loop: when the load generator handed it to its contender (the trace time plus the dispatch lag). */
  dispatched?: number;
  /** When the holder gave the slot back (admitted only). */
  release?: number;
}

export interface Waits {
  p50: number;
  p90: number;
  p99: number;
}

export const isAdmitted = (r: RequestRecord): boolean => r.channel !== undefined;

/** The waits (outcome − arrival), sorted, of the records admitted (or with `admitted` false, of those refused). */
export const sortedWaits = (records: readonly RequestRecord[], admitted = true): number[] =>
  records
    .filter((r) => isAdmitted(r) === admitted)
    .map((r) => r.outcome - r.arrival)
    .sort((a, b) => a - b);

/** Jain's index (Σx)² / (n · Σx²): 1 when all are equal, 1/n when one takes all; NaN when all are 0. */
export function jain(xs: readonly number[]): number {
  const sum = xs.reduce((a, b) => a + b, 0);
  const squares = xs.reduce((a, b) => a + b * b, 0);
  return squares === 0 ? NaN : (sum * sum) / (xs.length * squares);
}

/** The smallest over the largest; NaN when the largest is 0. */
export function minMaxShare(xs: readonly number[]): number {
  const max = Math.max(...xs);
  return max > 0 ? Math.min(...xs) / max : NaN;
}

/**
 * For each record: whether it had to wait — every one of `slots` was held (by any instance) at its arrival, or an
 * earlier arrival that had to wait was still waiting then (a slot between its release and its grant to that waiter is
 * not free for a newcomer: a FIFO scheduler would never give it to the newcomer).
 */
export function hadToWait(records: readonly RequestRecord[], slots: number): boolean[] {
  // events: +1 at an admission, −1 at a release; at equal times a release comes first (a slot given back at t is
  // free for an arrival at t), and arrivals are looked up after every event at or before them
  const events: [number, number][] = [];
  for (const r of records) {
    if (r.channel === undefined) continue;
    events.push([r.outcome, 1], [r.release ?? Infinity, -1]);
  }
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const order = records.map((_, i) => i).sort((a, b) => records[a]!.arrival - records[b]!.arrival);
  const out = new Array<boolean>(records.length).fill(false);
  let held = 0;
  let e = 0;
  // the outcomes of the flagged records seen so far, to tell whether one of them is still waiting
  let latestWaiterOutcome = -Infinity;
  for (const i of order) {
    const at = records[i]!.arrival;
    // events strictly before the arrival, and releases at it; an admission at the arrival instant is not yet held
    while (e < events.length && (events[e]![0] < at || (events[e]![0] === at && events[e]![1] < 0))) {
      held += events[e++]![1];
    }
    out[i] = held >= slots || latestWaiterOutcome > at;
    if (out[i]) latestWaiterOutcome = Math.max(latestWaiterOutcome, records[i]!.outcome);
  }
  return out;
}

/** By binary search: how long the prefix of indices 0 … n − 1 on which `inPrefix` holds is (false after it). */
function prefixLength(n: number, inPrefix: (i: number) => boolean): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (inPrefix(mid)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Waiters (the records flagged in `waited`) and how many of them a later arrival overtook (admitted strictly before
 * the waiter's outcome). `overtakerGapMs`: the largest arrival gap between an overtaken waiter and its latest
 * overtaker: arrivals a few ms apart on different instances can reach Redis in either order.
 */
export function fifoInversions(
  records: readonly RequestRecord[],
  waited: readonly boolean[],
): { waiters: number; overtaken: number; overtakerGapMs: number } {
  const order = records.map((_, i) => i).sort((a, b) => records[a]!.arrival - records[b]!.arrival);
  // earliest admission among the records arriving after position k in arrival order
  const laterAdmission = new Array<number>(order.length + 1).fill(Infinity);
  for (let k = order.length - 1; k >= 0; k--) {
    const r = records[order[k]!]!;
    laterAdmission[k] = Math.min(laterAdmission[k + 1]!, isAdmitted(r) ? r.outcome : Infinity);
  }
  // the latest arrival among the admissions before time t: admissions by outcome, with a running max of arrival
  const admissions = records.filter(isAdmitted).sort((a, b) => a.outcome - b.outcome);
  const latestArrival = admissions.map((r) => r.arrival);
  for (let k = 1; k < latestArrival.length; k++)
    latestArrival[k] = Math.max(latestArrival[k]!, latestArrival[k - 1]!);
  const latestAdmittedArrivalBefore = (t: number): number => {
    const k = prefixLength(admissions.length, (i) => admissions[i]!.outcome < t);
    return k === 0 ? -Infinity : latestArrival[k - 1]!;
  };
  let waiters = 0;
  let overtaken = 0;
  let overtakerGapMs = 0;
  order.forEach((i, k) => {
    if (!waited[i]) return;
    waiters++;
    const w = records[i]!;
    // arrivals tied with this one are not "later"
    let next = k + 1;
    while (next < order.length && records[order[next]!]!.arrival === w.arrival) next++;
    if (laterAdmission[next]! >= w.outcome) return;
    overtaken++;
    // a later arrival was admitted before the waiter, so the latest admitted before it is such a later arrival
    overtakerGapMs = Math.max(overtakerGapMs, latestAdmittedArrivalBefore(w.outcome) - w.arrival);
  });
  return { waiters, overtaken, overtakerGapMs };
}

/** Grant latencies (ms, sorted) of the admissions flagged in `waited`; those with no earlier release are left out. */
export function grantLatencies(records: readonly RequestRecord[], waited: readonly boolean[]): number[] {
  const releases = new Map<string, number[]>();
  for (const r of records) {
    if (r.channel !== undefined && r.release !== undefined) {
      const list = releases.get(r.channel) ?? [];
      list.push(r.release);
      releases.set(r.channel, list);
    }
  }
  for (const list of releases.values()) list.sort((a, b) => a - b);
  const out: number[] = [];
  records.forEach((r, i) => {
    if (!waited[i] || r.channel === undefined) return;
    const list = releases.get(r.channel) ?? [];
    // the last release at or before the admission
    const k = prefixLength(list.length, (i) => list[i]! <= r.outcome);
    if (k > 0) out.push(r.outcome - list[k - 1]!);
  });
  return out.sort((a, b) => a - b);
}

/** Busy slot-time inside [from, to) over (slots × (to − from)). */
export function utilisation(
  records: readonly RequestRecord[],
  slots: number,
  from: number,
  to: number,
): number {
  let busy = 0;
  for (const r of records) {
    if (r.channel === undefined) continue;
    const start = Math.max(from, r.outcome);
    const end = Math.min(to, r.release ?? to);
    if (end > start) busy += end - start;
  }
  return busy / (slots * (to - from));
}

export const waitsOf = (sorted: readonly number[]): Waits => ({
  p50: percentile(sorted, 0.5),
  p90: percentile(sorted, 0.9),
  p99: percentile(sorted, 0.99),
});

export interface FleetWindow {
  /** Requests arriving in [from, to) count (arrival, wait, 429, FIFO); admissions in it count for the shares. */
  from: number;
  to: number;
  /** Where busy slot-time is measured. */
  utilisation: { from: number; to: number };
}

/** Every fleet figure of one run (or of the ideal) from its records. */
export function fleetFigures(
  records: readonly RequestRecord[],
  o: { slots: number; instances: number; window: FleetWindow },
) {
  const { from, to } = o.window;
  const inWindow = (t: number) => t >= from && t < to;
  const waited = hadToWait(records, o.slots);
  const counted = records.map((r) => inWindow(r.arrival));
  const perInstance = Array.from({ length: o.instances }, (_, i) => {
    const mine = records.filter((r, k) => counted[k] && r.instance === i);
    const waits = sortedWaits(mine);
    return {
      requests: mine.length,
      admitted: records.filter((r) => r.instance === i && isAdmitted(r) && inWindow(r.outcome)).length,
      refusalRatio: mine.length ? (mine.length - waits.length) / mine.length : NaN,
      wait: waitsOf(waits),
    };
  });
  const arrived = records.filter((_, k) => counted[k]);
  const refusals: Record<string, number> = {};
  for (const r of arrived) if (r.reason !== undefined) refusals[r.reason] = (refusals[r.reason] ?? 0) + 1;
  const refused = arrived.filter((r) => !isAdmitted(r)).length;
  // the requests that had to wait, among those counted
  const waiting = waited.map((w, k) => w && counted[k]!);
  const { waiters, overtaken, overtakerGapMs } = fifoInversions(records, waiting);
  // by when each request reached its contender instead of its trace time (the waiters stay those that had to wait)
  const byDispatch = records.every((r) => r.dispatched !== undefined)
    ? fifoInversions(
        records.map((r) => ({ ...r, arrival: r.dispatched! })),
        waiting,
      ).overtaken
    : undefined;
  const grants = grantLatencies(records, waiting);
  const admittedCounts = perInstance.map((p) => p.admitted);
  return {
    requests: arrived.length,
    admitted: admittedCounts.reduce((a, b) => a + b, 0),
    refusals,
    refusalRatio: arrived.length ? refused / arrived.length : NaN,
    wait: waitsOf(sortedWaits(arrived)),
    perInstance,
    jain: jain(admittedCounts),
    share: minMaxShare(admittedCounts),
    waiters,
    overtaken,
    inversionRatio: waiters ? overtaken / waiters : NaN,
    overtakerGapMs,
    overtakenByDispatch: byDispatch,
    grantLatency: { count: grants.length, p50: percentile(grants, 0.5), p99: percentile(grants, 0.99) },
    utilisation: utilisation(records, o.slots, o.window.utilisation.from, o.window.utilisation.to),
  };
}

export type FleetFigures = ReturnType<typeof fleetFigures>;
