/** A candidate's adaptive limit as the admission engine applies it (core/adaptive.ts has the law). */
import {
  ADAPTIVE_DEFAULTS,
  effectiveLimit,
  floorOf,
  type LimitLaw,
  type UpstreamSignal,
} from '../../core/adaptive.js';
import { isBounded, type Candidate } from '../../core/channel.js';
import type { Settings } from '../../core/settings.js';
import type { LimitRelease, SlotStore } from '../../store/store.js';

/** The law a bounded candidate's reports carry; undefined when it has no adaptive limit or the fleet's switch is off. */
export function lawOf(c: Candidate, settings: Settings): LimitLaw | undefined {
  const a = c.adaptive;
  if (!a || a.enabled === false || !settings.adaptive_enabled || !isBounded(c)) return undefined;
  return {
    floor: a.minConcurrency ?? ADAPTIVE_DEFAULTS.minConcurrency,
    ceiling: c.maxConcurrency!,
    probeAfter: a.probeAfter ?? ADAPTIVE_DEFAULTS.probeAfter,
    tolerance: a.latencyTolerance ?? ADAPTIVE_DEFAULTS.latencyTolerance,
  };
}

/** The floor the store admits and grants under when the candidate's limit is enforced; undefined otherwise. */
export function enforcedFloor(c: Candidate, settings: Settings): number | undefined {
  const law = lawOf(c, settings);
  return law && c.adaptive?.enforce !== false ? floorOf(law) : undefined;
}

/** The max the pass plans with: the adaptive limit as this instance last learned it when enforced, else the max. */
export function plannedMax(c: Candidate, settings: Settings, store: SlotStore): number {
  const floor = enforcedFloor(c, settings);
  return floor === undefined
    ? c.maxConcurrency!
    : effectiveLimit(store.limitOf(c.id), floor, c.maxConcurrency!);
}

/** An adaptive channel's limit: `limit` between `floor` and `max`, applied when `enforced`. */
export interface ChannelLimit {
  limit: number;
  max: number;
  floor: number;
  enforced: boolean;
}

/**
 * Each adaptive channel's limit from `stored` (the store's, or as last learned), the max until one is; channels
 * without an adaptive limit are left out.
 */
export function limitsOf(
  channels: readonly Candidate[],
  settings: Settings,
  stored: (id: string) => number | undefined,
): Map<string, ChannelLimit> {
  const out = new Map<string, ChannelLimit>();
  for (const c of channels) {
    const law = lawOf(c, settings);
    if (!law) continue;
    const floor = floorOf(law);
    const limit = effectiveLimit(stored(c.id), floor, law.ceiling);
    out.set(c.id, { limit, max: law.ceiling, floor, enforced: c.adaptive?.enforce !== false });
  }
  return out;
}

/** What a release of the candidate's slot carries to its limit: nothing (no floor, no report) without one. */
export function limitRelease(
  c: Candidate,
  settings: Settings,
  signal: UpstreamSignal | undefined,
  heldMs: number,
): LimitRelease {
  const law = lawOf(c, settings);
  if (!law) return {};
  const floor = c.adaptive?.enforce !== false ? floorOf(law) : undefined;
  return { floor, report: signal && { signal, law, heldMs } };
}
