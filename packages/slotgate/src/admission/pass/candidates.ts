/**
 * Candidate sets, validated, filtered and grouped into tiers once. A set passed again without `exclude` is reused
 * while its elements are the same objects with the same id, enabled flag, max and priority (checked on every call:
 * a caller may mutate its array). Weights and maxWaiting are read live.
 */
import { isBounded, validateCandidate, type Candidate } from '../../core/channel.js';
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
  /** The engine's own one-resource set (a client's slot): nothing to order, so no load read; the script decides. */
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
