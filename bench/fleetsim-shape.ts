/**
 * The fleet simulator's shape (issue #16's measurement set-up), as pure functions: the grid of fleet sizes N and
 * channel counts C, the candidate sets, each engine's seeded arrivals, and the per-TTL arithmetic of load reads.
 * Everything here is deterministic under its seed, so every contender of a cell replays the same requests.
 */
import { logNormalMs, exponentialMs, meanHoldMs, type HoldShape, type Random } from './openloop.js';
// Internal (not public API): the library's seeded PRNG, as openloop.ts uses it.
import { seededRandom } from '../packages/slotgate/src/core/order.js';

/** The two load views measured side by side: the fleet-wide load summary (default) and per-channel reads. */
export const FLEETSIM_CONTENDERS = [
  { id: 'slotgate', label: 'slotgate (load summary)', summary: true },
  { id: 'slotgate-per-channel', label: 'slotgate-per-channel (load_summary_enabled=false)', summary: false },
] as const;

export type FleetSimContender = (typeof FLEETSIM_CONTENDERS)[number];

export type FleetSimGrid = 'full' | 'quick';

export const GRIDS: Record<FleetSimGrid, { instances: number[]; channels: number[] }> = {
  full: { instances: [1, 10, 50, 100], channels: [50, 500, 1000] },
  quick: { instances: [10, 100], channels: [50, 1000] },
};

/** The scenario's constants: what every cell shares. */
export interface FleetSimShape {
  /** Max concurrency of every channel. */
  max: number;
  /** Candidate sets, each a seeded draw of setSize(C) distinct channels (they overlap). */
  sets: number;
  /** Poisson arrivals per second per instance. */
  ratePerInstance: number;
  hold: HoldShape;
  /** The wait time-out of every engine (wait_timeout_ms). */
  waitTimeoutMs: number;
  seed: number;
}

export const FLEETSIM_SHAPE: FleetSimShape = {
  max: 8,
  sets: 20,
  ratePerInstance: 10,
  // a mean of ~0.5 s (median 440 ms, σ 0.5: mean ≈ 499 ms), LLM-like tail, capped at 4 s
  hold: { medianMs: 440, sigma: 0.5, capMs: 4000 },
  waitTimeoutMs: 3000,
  seed: 16,
};

/**
 * Channels per candidate set: 10 at C = 50 and C / 20 above (25 at 500, 50 at 1,000), the sizes of the issue's own
 * figures. 20 sets of C / 20 drawn at random overlap, and leave some channels in no set (coverage()).
 */
export function setSize(channels: number): number {
  return Math.min(channels, Math.max(10, Math.round(channels / 20)));
}

/** `count` seeded sets of `size` distinct channel indices in [0, channels) (a partial Fisher–Yates shuffle each). */
export function candidateSets(channels: number, count: number, size: number, seed: number): number[][] {
  if (size > channels) throw new Error(`a set of ${size} out of ${channels} channels`);
  const random = seededRandom(seed);
  const deck = Array.from({ length: channels }, (_, i) => i);
  return Array.from({ length: count }, () => {
    for (let i = 0; i < size; i++) {
      const j = i + Math.floor(random() * (channels - i));
      [deck[i], deck[j]] = [deck[j]!, deck[i]!];
    }
    return deck.slice(0, size).sort((a, b) => a - b);
  });
}

/** How many channels are in at least one set, and in how many sets a channel of some set is on average. */
export function coverage(sets: readonly (readonly number[])[]): { channels: number; setsPerChannel: number } {
  const seen = new Map<number, number>();
  for (const set of sets) for (const c of set) seen.set(c, (seen.get(c) ?? 0) + 1);
  const total = sets.reduce((a, s) => a + s.length, 0);
  return { channels: seen.size, setsPerChannel: seen.size ? total / seen.size : 0 };
}

/** FNV-1a over the parts: the seed of one engine's stream. */
export function streamSeed(...parts: readonly (string | number)[]): number {
  let h = 0x811c9dc5;
  for (const ch of parts.join(':')) {
    h ^= ch.charCodeAt(0);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** One arrival of one engine: ms from the start, the candidate set it offers, how long it holds a slot. */
export interface SimArrival {
  at: number;
  set: number;
  hold: number;
}

/**
 * The arrivals of engine `instance` in [0, durationMs): Poisson at `ratePerS`, each to a uniformly drawn set, with a
 * log-normal hold; one seeded stream per engine (the same for every contender and every N the engine is part of).
 */
export function engineArrivals(o: {
  seed: number;
  instance: number;
  ratePerS: number;
  durationMs: number;
  sets: number;
  hold: HoldShape;
}): SimArrival[] {
  const random: Random = seededRandom(streamSeed(o.seed, 'engine', o.instance));
  const out: SimArrival[] = [];
  for (
    let at = exponentialMs(random, o.ratePerS);
    at < o.durationMs;
    at += exponentialMs(random, o.ratePerS)
  ) {
    out.push({ at, set: Math.floor(random() * o.sets), hold: logNormalMs(random, o.hold) });
  }
  return out;
}

/** The engines a worker process hosts: instance i goes to worker i mod workers. */
export function enginesOf(worker: number, workers: number, instances: number): number[] {
  const out: number[] = [];
  for (let i = worker; i < instances; i += workers) out.push(i);
  return out;
}

/** Load-read commands per instance per load TTL: Δ commands.load_read / N / (window / TTL). */
export function perInstancePerTtl(
  loadReads: number,
  instances: number,
  windowMs: number,
  ttlMs: number,
): number {
  return loadReads / instances / (windowMs / ttlMs);
}

/** Today's per-channel view at most: one TIME, then 3 commands per channel read, per TTL. */
export const perChannelBound = (channelsRead: number): number => 1 + 3 * channelsRead;

/** Offered load in Erlangs (mean holds in flight) over the slots of the channels in some set. */
export function offeredShare(shape: FleetSimShape, instances: number, coveredChannels: number): number {
  const erlangs = instances * shape.ratePerInstance * (meanHoldMs(shape.hold) / 1000);
  return erlangs / (coveredChannels * shape.max);
}
