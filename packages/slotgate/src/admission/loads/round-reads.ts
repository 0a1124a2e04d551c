/** Which channels a load-summary round reads. A round costs one command however many it names, so it reads wide. */

/** What a round needs to know of a cached channel. */
export interface Watched {
  fetchedAt: number;
  /** When a selection last asked for the channel. */
  wantedAt: number;
}

/** A round adds watched channels only while it names fewer than this. */
const MAX_WATCHED = 2000;
/**
 * A round re-reads the channels wanted within this many TTLs, at most WATCH_MAX_MS: an instance whose traffic spreads
 * over many candidate sets then finds each fresh after one round per TTL, not one round per set.
 */
const WATCH_TTLS = 50;
const WATCH_MAX_MS = 10_000;

/** A read round: the channels asked for, and every channel wanted lately (their entries then expire together). */
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
 * A round sent only to report: while passes ask for loads, it also reads what a read round would and is half stale
 * (a pass would read it soon: one exchange for two).
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
