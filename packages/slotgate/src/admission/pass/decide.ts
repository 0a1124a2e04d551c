/** The pure decisions of admission, from what the load view shows: tier order, store-call batches, wait queues. */
import { isBounded, type Candidate } from '../../core/channel.js';
import { LazyOrder, type Random } from '../../core/order.js';
import type { Settings } from '../../core/settings.js';
import type { ChannelLoad } from '../../store/store.js';

export type Loads = ReadonlyMap<string, ChannelLoad>;

/** A bounded channel's max as a pass plans with it (its adaptive limit, when enforced). */
export type MaxOf = (c: Candidate) => number;
const configuredMax: MaxOf = (c) => c.maxConcurrency!;

/** (active + waiting) / max by the view; 0 for an unlimited channel or one the view does not know. */
export function loadRate(c: Candidate, loads: Loads, maxOf = configuredMax): number {
  if (!isBounded(c)) return 0;
  const load = loads.get(c.id);
  return load ? (load.active + load.waiting) / maxOf(c) : 0;
}

/** Whether the view shows a free slot on a bounded channel (an unknown channel counts as free). */
export function hasRoom(c: Candidate, loads: Loads, maxOf = configuredMax): boolean {
  const load = loads.get(c.id);
  return !load || load.active < maxOf(c);
}

/** A tier without its cooling channels, in LazyOrder's order. */
export function orderTier<C extends Candidate>(
  tier: readonly C[],
  loads: Loads,
  cooling: (c: C) => boolean,
  random: Random,
  spread = false,
  maxOf = configuredMax,
): LazyOrder<C> {
  return new LazyOrder(
    tier.filter((c) => !cooling(c)),
    (c) => loadRate(c, loads, maxOf),
    random,
    spread,
  );
}

interface Batch<C extends Candidate> {
  channels: C[];
  /** The one the view shows room on, reserved while the call is out (concurrent passes spread out). */
  expected: C | undefined;
  /** The channel the walk goes on with after this batch (an unlimited one, or undefined at the end of the tier). */
  after: C | undefined;
}

/**
 * The bounded channels one store call tries, from `first`, within `room`: up to the second one the view shows room on
 * (a spare for a stale view), so with every channel full by the view it spends the whole budget in one round trip.
 */
export function nextBatch<C extends Candidate>(
  first: C,
  order: LazyOrder<C>,
  room: number,
  loads: Loads,
  maxOf = configuredMax,
): Batch<C> {
  const channels: C[] = [first];
  let roomy = hasRoom(first, loads, maxOf) ? 1 : 0;
  let after: C | undefined;
  while (channels.length < room && roomy < 2) {
    const next = order.next();
    if (!next || !isBounded(next)) {
      after = next;
      break;
    }
    channels.push(next);
    if (hasRoom(next, loads, maxOf)) roomy++;
  }
  return { channels, expected: channels.find((c) => hasRoom(c, loads, maxOf)), after };
}

/** Queues one waiter tries before it gives up with queue_full. */
const WAIT_QUEUE_TRIES = 3;
/** Queues one waiter joins at most: each extra queue costs a grant that passes on. */
export const QUEUES_PER_WAITER = 2;

/**
 * The queues a waiter tries, emptiest first relative to their size (`maxWaiting`, else the max: waiters per slot), so
 * concurrent passes spread out. Ties keep the pool's order, or a random one with `random`.
 */
export function waitQueues<C extends Candidate>(
  pool: readonly C[],
  loads: Loads,
  random?: () => number,
): C[] {
  const ratio = (c: C) => (loads.get(c.id)?.waiting ?? 0) / (c.maxWaiting ?? c.maxConcurrency!);
  const list = [...pool];
  if (random) {
    for (let i = list.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [list[i], list[j]] = [list[j]!, list[i]!];
    }
  }
  return list.sort((a, b) => ratio(a) - ratio(b)).slice(0, WAIT_QUEUE_TRIES);
}

/**
 * The queue bound of a channel that sets none, with max_waiting_per_channel at 0: max(32, 8 × max), so a burst waits
 * instead of bouncing, at most 10,000 (the highest max_waiting_per_channel accepts).
 */
export function defaultMaxWaiting(maxConcurrency: number): number {
  return Math.min(10_000, Math.max(32, 8 * maxConcurrency));
}

/** A channel's queue bound: its own maxWaiting, else max_waiting_per_channel when set, else the default. */
export function maxWaitingOf(c: Candidate, settings: Settings): number {
  return (
    c.maxWaiting ??
    (settings.max_waiting_per_channel > 0
      ? settings.max_waiting_per_channel
      : defaultMaxWaiting(c.maxConcurrency!))
  );
}
