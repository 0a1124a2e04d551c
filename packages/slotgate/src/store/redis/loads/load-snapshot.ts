/**
 * The load summary's data, without I/O. A snapshot is `{"l": [channel, summed count, …], "c": [channel, cooldown
 * end, …], "v": [instance, version, …], "n": count}`; an instance's field `[version, lapse time, channel, count, …]`.
 */
import type { OwnCounts } from '../../store.js';

/** A channel's count in the summary is `active + waiting × WAITING_UNIT`: one number to sum. */
const WAITING_UNIT = 2 ** 26;

export function packCounts(counts: OwnCounts): number {
  return Math.max(0, Math.floor(counts.active)) + Math.max(0, Math.floor(counts.waiting)) * WAITING_UNIT;
}

export function unpackCounts(value: string | number | null | undefined): OwnCounts {
  const n = Number(value ?? 0);
  if (!Number.isFinite(n) || n <= 0) return { active: 0, waiting: 0 };
  const waiting = Math.floor(n / WAITING_UNIT);
  return { active: n - waiting * WAITING_UNIT, waiting };
}

/** Packed counts and cooldown ends per channel, each instance's version summed, and how many counts were summed. */
export interface SummaryView {
  counts: Map<string, string>;
  cooling: Map<string, number>;
  versions: Map<string, string>;
  pairs: number;
}

function pairsOf<V>(flat: unknown, value: (v: unknown) => V): Map<string, V> {
  const map = new Map<string, V>();
  if (Array.isArray(flat))
    for (let i = 0; i + 1 < flat.length; i += 2) map.set(String(flat[i]), value(flat[i + 1]));
  return map;
}

function viewOf({ l, c, v, n }: { l?: unknown; c?: unknown; v?: unknown; n?: unknown }): SummaryView {
  return {
    counts: pairsOf(l, String),
    cooling: pairsOf(c, Number),
    versions: pairsOf(v, String),
    pairs: Number(n) || 0,
  };
}

export function parseSnapshot(text: string | null): SummaryView {
  return viewOf(text === null ? {} : (JSON.parse(text) as Record<string, unknown>));
}

/** The snapshot of the fields read, as the script builds it; the lapsed and unreadable left out and named. */
export function sumFields(
  fields: Record<string, string>,
  cooling: Record<string, string>,
  now: number,
): { text: string; view: SummaryView; lapsed: string[] } {
  const sums = new Map<string, number>();
  const versions: string[] = [];
  const lapsed: string[] = [];
  let pairs = 0;
  for (const [instanceId, text] of Object.entries(fields)) {
    let counts: unknown;
    try {
      counts = JSON.parse(text);
    } catch {
      counts = undefined;
    }
    if (!Array.isArray(counts) || typeof counts[1] !== 'number' || counts[1] <= now) {
      lapsed.push(instanceId);
      continue;
    }
    versions.push(instanceId, String(counts[0]));
    for (let i = 2; i + 1 < counts.length; i += 2) {
      const n = Number(counts[i + 1]);
      if (!Number.isFinite(n)) continue;
      pairs++;
      const id = String(counts[i]);
      sums.set(id, (sums.get(id) ?? 0) + n);
    }
  }
  const l: string[] = [];
  for (const [id, n] of sums) if (n > 0) l.push(id, String(n));
  const parts = { l, c: Object.entries(cooling).flat(), v: versions, n: pairs };
  return { text: JSON.stringify(parts), view: viewOf(parts), lapsed };
}
