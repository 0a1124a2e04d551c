/**
 * Which channels a load-summary round reads (load-view.ts): pure functions of the view's cache entries, the clock and
 * the load TTL. A round costs one command however many channels it names, so it reads wide.
 */

/** What a round needs to know of a cached channel. */
export interface Watched {
  fetchedAt: number;
  /** When a selection last asked for the channel. */
  wantedAt: number;
}

/** Channels one summary round reads at most besides those asked for. */
const MAX_WATCHED = 2000;
/**
 * A summary round re-reads the channels wanted within this many TTLs (10 s at the default 200 ms). An instance whose
 * traffic spreads over many candidate sets (each drawn every few seconds) then finds every set fresh after one round
 * per TTL, instead of a round for each set it had not asked for within the last second (fleetsim N = 100 x C = 1,000:
 * 1.74 -> 1.51 rounds per TTL).
 */
const WATCH_TTLS = 50;
/** And within this many ms at most (a long TTL does not stretch the window past it). */
const WATCH_MAX_MS = 10_000;

/**
 * A read round: the channels asked for, and every channel a selection wanted within the last WATCH_TTLS TTLs, read in
 * one go. The entries then expire together, and the passes of the next TTL over other candidate sets find them fresh
 * (one round per TTL where each set would take one of its own).
 */
export function readRoundIds(
  cache: ReadonlyMap<string, Watched>,
  requested: readonly string[],
  now: number,
  ttl: number,
): string[] {
  const ids = new Set(requested);
  for (const [id, entry] of cache) {
    if (ids.size >= MAX_WATCHED) break;
    if (entry.wantedAt >= now - Math.min(WATCH_TTLS * ttl, WATCH_MAX_MS)) ids.add(id);
  }
  return [...ids];
}

/**
 * A round sent only to report: while passes ask for loads (the last within two TTLs), what a read round would read
 * and is half stale (a pass would read it soon: the report carries that read, one exchange for two); else nothing.
 */
export function reportRoundIds(
  cache: ReadonlyMap<string, Watched>,
  lastWantedAt: number,
  now: number,
  ttl: number,
): string[] {
  if (lastWantedAt < now - 2 * ttl) return [];
  return readRoundIds(cache, [], now, ttl).filter((id) => cache.get(id)!.fetchedAt <= now - ttl / 2);
}
