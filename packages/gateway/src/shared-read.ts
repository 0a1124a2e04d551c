/**
 * One read shared by its callers: a call while a read is under way joins it, and its answer serves `keepMs` more once
 * it settled (0: the next call reads again). The /readyz probes share a store health check this way, and the metrics of
 * one scrape (a registry collects them all at once) their store reads.
 */
export function sharedRead<T>(
  read: () => Promise<T>,
  keepMs = 0,
  now: () => number = () => performance.now(),
): () => Promise<T> {
  let last: { answer: Promise<T>; settledAt?: number } | undefined;
  return () => {
    if (last && (last.settledAt === undefined || now() - last.settledAt < keepMs)) return last.answer;
    const entry: { answer: Promise<T>; settledAt?: number } = { answer: read() };
    const settled = () => (entry.settledAt = now());
    entry.answer.then(settled, settled);
    last = entry;
    return entry.answer;
  };
}
