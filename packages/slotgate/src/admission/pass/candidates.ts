/**
 * Candidate sets, prepared once: validated, filtered (disabled and excluded channels out), grouped into tiers, with
 * the bounded channels' ids. A set passed again without `exclude` (a gateway passes the same array for every request
 * of a (group, model)) is reused while its elements are the same objects in the same order, with the same id,
 * enabled flag, max and priority — checked on every call, so a caller that mutates its array is never served a
 * stale copy. Weights and maxWaiting are read live, so they need no check.
 */
import { isBounded, type Candidate } from '../../core/channel.js';
import { RESERVED_ID_START } from '../../core/client.js';
import { tiers } from '../../core/order.js';

export interface Prepared<C extends Candidate> {
  /** A copy of the array it was made from, and what each element looked like, to detect a caller mutating them. */
  source: readonly C[];
  shape: readonly Shape[];
  candidates: C[];
  byTier: C[][];
  bounded: C[];
  ids: string[];
  /** Bounded channels by id, with their tier's index in byTier. */
  tierOf: Map<string, { channel: C; tier: number }>;
  /**
   * The engine's own one-resource set (a limited client's slot): nothing to order, so the pass reads no load view
   * and goes straight to the acquire script, which decides (no load-read command per client).
   */
  viewless: boolean;
}

/** The fields the prepared structures depend on. */
interface Shape {
  id: string;
  enabled: boolean;
  max: number;
  priority: number;
}

function shapeOf(c: Candidate): Shape {
  return { id: c.id, enabled: c.enabled !== false, max: c.maxConcurrency ?? 0, priority: c.priority ?? 0 };
}

function unchanged<C extends Candidate>(p: Prepared<C>, given: readonly C[]): boolean {
  if (p.source.length !== given.length) return false;
  for (let i = 0; i < given.length; i++) {
    const c = given[i]!;
    const s = p.shape[i]!;
    if (
      p.source[i] !== c ||
      s.id !== c.id ||
      s.enabled !== (c.enabled !== false) ||
      s.max !== (c.maxConcurrency ?? 0) ||
      s.priority !== (c.priority ?? 0)
    ) {
      return false;
    }
  }
  return true;
}

/** Rejects a candidate the pass could not use correctly, naming the field, what it expects and what came in. */
export function validateCandidate(c: Candidate, internal = false): void {
  const bad = (field: string, expected: string, got: unknown) =>
    new TypeError(
      `Expected candidate \`${field}\` to be ${expected}, got ${JSON.stringify(got) ?? String(got)}`,
    );
  if (typeof c !== 'object' || c === null) throw bad('(candidate)', 'an object', c);
  if (typeof c.id !== 'string' || c.id.length === 0) throw bad('id', 'a non-empty string', c.id);
  // ids starting with NUL are the engine's own (a client's slots: core/client.ts)
  if (c.id.startsWith(RESERVED_ID_START) && !internal) {
    throw bad('id', 'a string not starting with a NUL character', c.id);
  }
  const int = (v: unknown, min: number) => typeof v === 'number' && Number.isInteger(v) && v >= min;
  if (c.maxConcurrency !== undefined && !int(c.maxConcurrency, -Infinity)) {
    throw bad(`maxConcurrency of ${c.id}`, 'an integer (≤ 0 = unlimited)', c.maxConcurrency);
  }
  if (c.maxWaiting !== undefined && !int(c.maxWaiting, 1)) {
    throw bad(`maxWaiting of ${c.id}`, 'an integer ≥ 1', c.maxWaiting);
  }
  if (c.priority !== undefined && !(typeof c.priority === 'number' && Number.isFinite(c.priority))) {
    throw bad(`priority of ${c.id}`, 'a finite number', c.priority);
  }
  if (c.weight !== undefined && !(typeof c.weight === 'number' && Number.isFinite(c.weight))) {
    throw bad(`weight of ${c.id}`, 'a finite number (≤ 0 = last resort)', c.weight);
  }
}

export class CandidateSets {
  private readonly cache = new WeakMap<readonly Candidate[], Prepared<Candidate>>();
  /** Whether each channel id seen so far is bounded (for a cooldown given only an id). */
  private readonly known = new Map<string, boolean>();

  /** `internal`: the set is the engine's own (a client's slot), whose ids are reserved for it. */
  prepare<C extends Candidate>(
    given: readonly C[],
    exclude?: ReadonlySet<string>,
    internal = false,
  ): Prepared<C> {
    const cacheable = !exclude || exclude.size === 0;
    if (cacheable) {
      const hit = this.cache.get(given) as Prepared<C> | undefined;
      if (hit && unchanged(hit, given)) return hit;
    }
    for (const c of given) validateCandidate(c, internal);
    const candidates = given.filter((c) => c.enabled !== false && !exclude?.has(c.id));
    for (const c of candidates) this.known.set(c.id, isBounded(c));
    const bounded = candidates.filter(isBounded);
    const prepared: Prepared<C> = {
      source: [...given],
      shape: given.map(shapeOf),
      candidates,
      byTier: tiers(candidates),
      bounded,
      ids: bounded.map((c) => c.id),
      tierOf: new Map(),
      viewless: internal,
    };
    prepared.byTier.forEach((tier, i) => {
      for (const c of tier) if (isBounded(c)) prepared.tierOf.set(c.id, { channel: c, tier: i });
    });
    if (cacheable) this.cache.set(given, prepared);
    return prepared;
  }

  /** A channel given by id or as a candidate: its id, and whether it is bounded (an unknown id counts as bounded). */
  resolve(channel: string | Candidate): { id: string; bounded: boolean } {
    if (typeof channel !== 'string') return { id: channel.id, bounded: isBounded(channel) };
    return { id: channel, bounded: this.known.get(channel) ?? true };
  }
}
