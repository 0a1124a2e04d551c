import type { AdaptiveOptions } from './adaptive.js';

/** A candidate channel as the admission pass sees it (the gateway's channels carry more fields). */
export interface Candidate {
  id: string;
  /** > 0 bounds the channel's concurrency across every instance; 0 (default) = unlimited, never touches Redis. */
  maxConcurrency?: number;
  /** Higher is preferred; tiers are walked from the highest priority down. @default 0 */
  priority?: number;
  /** Relative share among channels of equal load in one tier; 0 = last resort. @default 1 */
  weight?: number;
  /** Bound of this channel's wait queue; else the setting max_waiting_per_channel, else max(32, 8 × maxConcurrency). */
  maxWaiting?: number;
  /** false removes the channel from every candidate set. @default true */
  enabled?: boolean;
  /**
   * A limit learned from the upstream's answers, shared by the fleet, between `minConcurrency` and `maxConcurrency`
   * (docs/admission.md, "Adaptive limits"): report what the upstream said with `ticket.release({ upstream })`.
   */
  adaptive?: AdaptiveOptions;
}

export const isBounded = (c: Candidate): boolean => (c.maxConcurrency ?? 0) > 0;
export const priorityOf = (c: Candidate): number => c.priority ?? 0;
export const weightOf = (c: Candidate): number => Math.max(0, c.weight ?? 1);

/** Channel ids may not start with this: ids that do are the engine's own resources (a client's slots). */
export const RESERVED_ID_START = '\u0000';

export const isInt = (v: unknown, min: number): boolean =>
  typeof v === 'number' && Number.isInteger(v) && v >= min;
export const isFiniteNumber = (v: unknown): boolean => typeof v === 'number' && Number.isFinite(v);

/** The TypeError for a bad field of a caller's object, naming the field, what it expects and what came in. */
export function fieldError(what: string, field: string, expected: string, got: unknown): TypeError {
  return new TypeError(
    `Expected ${what} \`${field}\` to be ${expected}, got ${JSON.stringify(got) ?? String(got)}`,
  );
}

/** Rejects a candidate the pass could not use correctly. `internal`: the engine's own, whose ids are reserved. */
export function validateCandidate(c: Candidate, internal = false): void {
  const bad = (field: string, expected: string, got: unknown) =>
    fieldError('candidate', field, expected, got);
  if (typeof c !== 'object' || c === null) throw bad('(candidate)', 'an object', c);
  if (typeof c.id !== 'string' || c.id.length === 0) throw bad('id', 'a non-empty string', c.id);
  if (c.id.startsWith(RESERVED_ID_START) && !internal) {
    throw bad('id', 'a string not starting with a NUL character', c.id);
  }
  if (c.maxConcurrency !== undefined && !isInt(c.maxConcurrency, -Infinity)) {
    throw bad(`maxConcurrency of ${c.id}`, 'an integer (≤ 0 = unlimited)', c.maxConcurrency);
  }
  if (c.maxWaiting !== undefined && !isInt(c.maxWaiting, 1)) {
    throw bad(`maxWaiting of ${c.id}`, 'an integer ≥ 1', c.maxWaiting);
  }
  if (c.priority !== undefined && !isFiniteNumber(c.priority)) {
    throw bad(`priority of ${c.id}`, 'a finite number', c.priority);
  }
  if (c.weight !== undefined && !isFiniteNumber(c.weight)) {
    throw bad(`weight of ${c.id}`, 'a finite number (≤ 0 = last resort)', c.weight);
  }
  if (c.adaptive !== undefined) validateAdaptive(c.id, c.adaptive, bad);
}

function validateAdaptive(
  id: string,
  a: AdaptiveOptions,
  bad: (f: string, e: string, g: unknown) => TypeError,
): void {
  if (typeof a !== 'object' || a === null) throw bad(`adaptive of ${id}`, 'an object', a);
  for (const key of ['enabled', 'enforce'] as const) {
    if (a[key] !== undefined && typeof a[key] !== 'boolean')
      throw bad(`adaptive.${key} of ${id}`, 'a boolean', a[key]);
  }
  if (a.minConcurrency !== undefined && !isInt(a.minConcurrency, 1)) {
    throw bad(`adaptive.minConcurrency of ${id}`, 'an integer ≥ 1', a.minConcurrency);
  }
  if (a.probeAfter !== undefined && !isInt(a.probeAfter, 1)) {
    throw bad(`adaptive.probeAfter of ${id}`, 'an integer ≥ 1', a.probeAfter);
  }
  const t = a.latencyTolerance;
  if (t !== undefined && !(isFiniteNumber(t) && (t === 0 || (t >= 1 && t <= 100)))) {
    throw bad(`adaptive.latencyTolerance of ${id}`, 'a number in 1–100, or 0 to ignore latency', t);
  }
}
