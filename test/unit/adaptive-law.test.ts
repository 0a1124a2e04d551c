/** The adaptive limit's law (core/adaptive.ts), report by report on a manual clock. */
import { describe, expect, it } from 'vitest';
import {
  effectiveLimit,
  LIMIT_WINDOW_MS,
  nextLimit,
  type LimitLaw,
  type LimitState,
  type UpstreamSignal,
} from '../../packages/slotgate/src/core/adaptive.js';

const law: LimitLaw = { floor: 1, ceiling: 32, probeAfter: 30, tolerance: 2 };
const OK: UpstreamSignal = { kind: 'ok' };
const OVER: UpstreamSignal = { kind: 'overloaded' };

/** Applies reports in order; `at` ms on the clock, held 200 ms unless told. */
function run(
  reports: { signal: UpstreamSignal; inFlight: number; at: number; demand?: boolean; heldMs?: number }[],
  from?: LimitState,
  l: LimitLaw = law,
): LimitState {
  let state = from;
  for (const r of reports)
    state = nextLimit(state, {
      signal: r.signal,
      inFlight: r.inFlight,
      heldMs: r.heldMs ?? 200,
      demand: r.demand ?? true,
      now: r.at,
      law: l,
    });
  return state!;
}

/** The state at `limit` after an overload with `limit + 1` in flight at 2000 (from 8: a window's first report falls
 * at most to a quarter of the max). */
const at = (limit: number): LimitState =>
  run([
    { signal: OVER, inFlight: 9, at: 1000 },
    { signal: OVER, inFlight: limit + 1, at: 2000 },
  ]);

describe('the adaptive limit', () => {
  it('starts at the max, and the limit in force is its whole part within the floor and the max', () => {
    expect(effectiveLimit(undefined, 1, 32)).toBe(32);
    expect(effectiveLimit(7.9, 1, 32)).toBe(7);
    expect(effectiveLimit(0.5, 2, 32)).toBe(2);
    expect(effectiveLimit(40, 1, 32)).toBe(32);
    expect(effectiveLimit(3, 5, 4)).toBe(4); // a floor above the max is the max
    expect(run([{ signal: OK, inFlight: 1, at: 1000, demand: false }]).limit).toBe(32);
  });

  it('an overload lowers it to what was in flight less the one refused', () => {
    expect(run([{ signal: OVER, inFlight: 12, at: 1000 }]).limit).toBe(11);
  });

  it('the refusals of one burst measure it once: N reports lower it as far as the lowest count, not N times', () => {
    // 8 in flight, capacity 3: five refusals, reported as their slots come back (8, 7, 6, 5, 4 in flight)
    const burst = [8, 7, 6, 5, 4].map((n, i) => ({ signal: OVER, inFlight: n, at: 1000 + i }));
    const from = run([{ signal: OVER, inFlight: 9, at: 0 }]); // a limit of 8, its window long over
    expect(run(burst, from).limit).toBe(3);
    // the same burst told twice (two instances reporting what they saw) lands at the same limit
    expect(run([...burst, ...burst], from).limit).toBe(3);
  });

  it('within one window it falls at most to a quarter of where the window began; the next window goes on', () => {
    const late = run([{ signal: OVER, inFlight: 2, at: 1000 }]); // 32 → a quarter, 8
    expect(late.limit).toBe(8);
    expect(run([{ signal: OVER, inFlight: 2, at: 1000 + LIMIT_WINDOW_MS - 1 }], late).limit).toBe(8);
    expect(run([{ signal: OVER, inFlight: 2, at: 1000 + LIMIT_WINDOW_MS }], late).limit).toBe(2);
  });

  it('never goes below its floor', () => {
    const floored = run(
      [{ signal: OVER, inFlight: 1, at: 1000 }],
      run([{ signal: OVER, inFlight: 5, at: 0 }]),
      {
        ...law,
        floor: 3,
      },
    );
    expect(floored.limit).toBe(3);
  });

  it('a success at full use with requests waiting raises it by 1 ÷ limit; without waiters, or below full use, nothing', () => {
    const at4 = at(4);
    expect(at4.limit).toBe(4);
    expect(run([{ signal: OK, inFlight: 4, at: 5000 }], { ...at4, failedLevel: 0 }).limit).toBe(4.25);
    expect(run([{ signal: OK, inFlight: 4, at: 5000, demand: false }], at4).limit).toBe(4);
    expect(run([{ signal: OK, inFlight: 3, at: 5000 }], at4).limit).toBe(4);
  });

  it('the level that drew the overload is tried again only after `probeAfter` successes, then forgotten once it holds', () => {
    const at3 = at(3); // refused at 4 in flight: the limit is 3
    expect(at3).toMatchObject({ limit: 3, failedLevel: 4 });
    const successes = (n: number, from: LimitState) =>
      run(
        Array.from({ length: n }, (_, i) => ({ signal: OK, inFlight: 3, at: 3000 + i })),
        from,
      );
    // 29 successes at full use: just under 4
    const held = successes(29, at3);
    expect(effectiveLimit(held.limit, 1, 32)).toBe(3);
    // the 30th tries 4 again
    const probing = successes(1, held);
    expect(effectiveLimit(probing.limit, 1, 32)).toBe(4);
    // 4 in flight and a success: the level holds, and the limit grows on from there
    const passed = run([{ signal: OK, inFlight: 4, at: 4000 }], probing);
    expect(passed.failedLevel).toBe(0);
    expect(passed.limit).toBeGreaterThan(probing.limit);
  });

  it('never grows past the max', () => {
    const near = run([{ signal: OVER, inFlight: 33, at: 1000 }]); // 32
    expect(run([{ signal: OK, inFlight: 32, at: 5000 }], { ...near, failedLevel: 0 }).limit).toBe(32);
  });

  it('a first byte slower than `tolerance` × the least lately lowers it toward in flight × least ÷ this one (Little), by a fifth at most per round', () => {
    const base = run([{ signal: { kind: 'ok', firstByteMs: 200 }, inFlight: 1, at: 1000, demand: false }]);
    expect(base.least).toBe(200);
    // 8 in flight answering in 600 ms where 200 ms is usual: it serves about 8 × 200 ÷ 600 at once; one round lowers
    // the limit by a fifth at most (a stalled host slows first bytes too)
    const slow = { signal: { kind: 'ok' as const, firstByteMs: 600 }, inFlight: 8, heldMs: 600 };
    const slowed = run([{ ...slow, at: 2000 }], base);
    expect(slowed.limit).toBeCloseTo(32 * 0.8, 3);
    // round after round (each report begun after the last lowering) it comes down to the measure
    let state = slowed;
    for (let at = 3000; at < 20_000; at += 1000) state = run([{ ...slow, at }], state);
    expect(state.limit).toBeCloseTo(8 * (200 / 600), 3);
    // within tolerance: no change
    expect(
      run([{ signal: { kind: 'ok', firstByteMs: 390 }, inFlight: 8, at: 4000, demand: false }], base).limit,
    ).toBe(32);
  });

  it('a slow answer of a request begun before the latency last lowered the limit says nothing new', () => {
    const base = run([{ signal: { kind: 'ok', firstByteMs: 200 }, inFlight: 1, at: 1000, demand: false }]);
    const slowed = run(
      [{ signal: { kind: 'ok', firstByteMs: 900 }, inFlight: 8, at: 2000, heldMs: 900 }],
      base,
    );
    expect(slowed.slowedAt).toBe(2000);
    // begun at 1500, before 2000: ignored
    const stale = run(
      [{ signal: { kind: 'ok', firstByteMs: 900 }, inFlight: 2, at: 2400, heldMs: 900 }],
      slowed,
    );
    expect(stale.limit).toBe(slowed.limit);
    // begun after it: counts
    const fresh = run(
      [{ signal: { kind: 'ok', firstByteMs: 900 }, inFlight: 8, at: 3100, heldMs: 900 }],
      slowed,
    );
    expect(fresh.limit).toBeLessThan(slowed.limit);
  });

  it('the least first byte is kept over two buckets of 30 s, so a lasting slowdown becomes the new normal', () => {
    const base = run([{ signal: { kind: 'ok', firstByteMs: 200 }, inFlight: 1, at: 1000, demand: false }]);
    const later = run(
      [{ signal: { kind: 'ok', firstByteMs: 500 }, inFlight: 1, at: 31_000, demand: false }],
      base,
    );
    expect(later).toMatchObject({ least: 500, leastBefore: 200 });
    const after = run(
      [{ signal: { kind: 'ok', firstByteMs: 500 }, inFlight: 1, at: 61_000, demand: false }],
      later,
    );
    expect(after).toMatchObject({ least: 500, leastBefore: 500 });
    const gone = run(
      [{ signal: { kind: 'ok', firstByteMs: 700 }, inFlight: 1, at: 125_000, demand: false }],
      after,
    );
    expect(gone).toMatchObject({ least: 700, leastBefore: undefined });
  });

  it('with latency off (tolerance 0) a slow answer changes nothing', () => {
    const off = { ...law, tolerance: 0 };
    const base = run(
      [{ signal: { kind: 'ok', firstByteMs: 100 }, inFlight: 1, at: 0, demand: false }],
      undefined,
      off,
    );
    expect(
      run([{ signal: { kind: 'ok', firstByteMs: 5000 }, inFlight: 8, at: 1000, heldMs: 5000 }], base, off)
        .limit,
    ).toBe(32);
  });
});
