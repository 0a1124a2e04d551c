/**
 * The fleet scenarios' pure parts (bench/): the fairness figures on hand-made records with exact answers, the ideal
 * FIFO scheduler on tiny traces worked out by hand, and the seeded trace generators (deterministic under a seed, so
 * the statistical checks below always see the same numbers).
 */
import { describe, expect, it } from 'vitest';
import { exponentialMs, logNormalMs, meanHoldMs, seededRandom, type HoldShape } from '../../bench/draws.js';
import {
  fifoInversions,
  fleetFigures,
  grantLatencies,
  hadToWait,
  jain,
  minMaxShare,
  utilisation,
  type RequestRecord,
} from '../../bench/fairness.js';
import { idealFifo } from '../../bench/ideal.js';
import { arrivalRate, makeTrace } from '../../bench/openloop.js';

const admitted = (arrival: number, outcome: number, channel: string, release: number, instance = 0) =>
  ({ instance, arrival, outcome, channel, release }) satisfies RequestRecord;
const refused = (arrival: number, outcome: number, reason = 'wait_timeout', instance = 0) =>
  ({ instance, arrival, outcome, reason }) satisfies RequestRecord;

describe("Jain's index and the min/max share", () => {
  it('is 1 for equal shares, 1/n when one takes all, (Σx)²/(n·Σx²) in between', () => {
    expect(jain([5, 5, 5, 5])).toBe(1);
    expect(jain([7, 0, 0, 0])).toBe(0.25);
    expect(jain([2, 1])).toBeCloseTo(0.9, 12);
    expect(jain([3])).toBe(1);
    expect(jain([0, 0])).toBeNaN();
  });

  it('divides the smallest count by the largest', () => {
    expect(minMaxShare([50, 100, 75])).toBe(0.5);
    expect(minMaxShare([4, 4])).toBe(1);
    expect(minMaxShare([0, 0])).toBeNaN();
  });
});

describe('had to wait', () => {
  it('flags arrivals that find every slot held, by any instance; a release at the arrival frees a slot', () => {
    const records = [
      admitted(0, 0, 'c0', 100, 0),
      admitted(10, 10, 'c1', 40, 1),
      admitted(20, 40, 'c1', 50, 0), // both held at 20
      admitted(40, 50, 'c1', 60, 1), // c1 given back at 40, taken again at 40: an admission at t is not yet held
      refused(100, 100, 'queue_full'), // c0 given back at 100
    ];
    expect(hadToWait(records, 2)).toEqual([false, false, true, false, false]);
    expect(hadToWait(records, 1)).toEqual([false, true, true, true, false]);
  });

  it('flags an arrival while an earlier waiter still waits, even in the gap between a release and its grant', () => {
    const records = [
      admitted(0, 0, 'c0', 100),
      admitted(10, 101, 'c0', 200), // waits; the slot given back at 100 reaches it at 101
      admitted(100.5, 200, 'c0', 250), // arrives in that gap: the slot is not its to take
      admitted(300, 300, 'c0', 310), // nobody waits any more, a slot is free
    ];
    expect(hadToWait(records, 1)).toEqual([false, true, true, false]);
  });
});

describe('FIFO inversions', () => {
  it('says how much later than its waiter the latest-arriving overtaker came, the largest over the waiters', () => {
    const records = [
      admitted(0, 100, 'c0', 110), // waits: overtaken by the next, 5 ms later
      admitted(5, 50, 'c0', 60),
      admitted(10, 300, 'c0', 310), // waits: overtaken by the next, 20 ms later
      admitted(30, 200, 'c0', 210),
      admitted(60, 400, 'c0', 410), // admitted after the waiter at 10 was: not an overtaker (it would say 50)
      refused(80, 90), // refused before it: not admitted, not an overtaker (it would say 70)
    ];
    const waited = [true, false, true, false, false, false];
    expect(fifoInversions(records, waited)).toEqual({ waiters: 2, overtaken: 2, overtakerGapMs: 20 });
  });

  it('counts a waiter overtaken by a later arrival once, however many overtake it', () => {
    const records = [
      admitted(0, 0, 'c0', 100),
      admitted(10, 150, 'c0', 160), // overtaken by the next two
      admitted(20, 100, 'c0', 150),
      refused(30, 60), // nobody later was admitted before 60
      refused(40, 40, 'queue_full'), // refused on arrival: nobody can overtake it
      admitted(50, 130, 'c0', 140),
    ];
    const waited = [false, true, true, true, true, true];
    // (the later of its two overtakers arrived 40 ms after it)
    expect(fifoInversions(records, waited)).toEqual({ waiters: 5, overtaken: 1, overtakerGapMs: 40 });
    // an admission at the very moment of the waiter's outcome does not overtake it; ties in arrival are not later
    expect(
      fifoInversions(
        [refused(0, 50), admitted(10, 50, 'c0', 60), admitted(0, 20, 'c0', 30)],
        [true, true, true],
      ),
    ).toEqual({ waiters: 3, overtaken: 0, overtakerGapMs: 0 });
    // only the records flagged as waiting count
    expect(
      fifoInversions(
        records,
        records.map(() => false),
      ),
    ).toEqual({ waiters: 0, overtaken: 0, overtakerGapMs: 0 });
  });
});

describe('FIFO inversions by dispatch', () => {
  it('count the same waiters against the times the requests reached their contender, when every record has one', () => {
    const window = { from: 0, to: Infinity, utilisation: { from: 0, to: 1000 } };
    const o = { slots: 1, instances: 2, window };
    // the waiter at 10 is overtaken by the arrival at 12, which its instance dispatched first (at 13, against 16)
    const records = [
      { ...admitted(0, 0, 'c0', 100), dispatched: 1 },
      { ...admitted(10, 150, 'c0', 160), dispatched: 16 },
      { ...admitted(12, 100, 'c0', 150), instance: 1, dispatched: 13 },
    ];
    const f = fleetFigures(records, o);
    expect([f.waiters, f.overtaken, f.overtakenByDispatch]).toEqual([2, 1, 0]);
    // dispatched in trace order: the contender put it out of order
    records[1]!.dispatched = 11;
    expect(fleetFigures(records, o).overtakenByDispatch).toBe(1);
    // a record without its dispatch time (the ideal scheduler's): no figure
    const { dispatched: _, ...bare } = records[2]!;
    expect(fleetFigures([records[0]!, records[1]!, bare], o).overtakenByDispatch).toBeUndefined();
  });
});

describe('grant latency', () => {
  it('is the admission time minus the latest release on the same channel at or before it', () => {
    const records = [
      admitted(0, 0, 'c0', 100),
      admitted(5, 5, 'c1', 105),
      admitted(10, 130, 'c0', 150), // waited: latest c0 release ≤ 130 is 100
      admitted(20, 150, 'c0', 160), // waited: c0 given back at 150 exactly
      admitted(30, 107, 'c1', 120), // waited: c1 at 105
      admitted(40, 2, 'c2', 9), // waited, but no release on c2 before it: left out
      admitted(50, 170, 'c0', 180), // not flagged
    ];
    const waited = [false, false, true, true, true, true, false];
    expect(grantLatencies(records, waited)).toEqual([0, 2, 30]);
  });
});

describe('utilisation', () => {
  it('is the busy slot-time inside the window over slots × window', () => {
    const records = [
      admitted(0, 0, 'c0', 100),
      admitted(0, 50, 'c1', 250), // 50 of it inside [0, 100)
      refused(0, 30),
      admitted(0, -20, 'c1', 10), // 10 inside
    ];
    expect(utilisation(records, 2, 0, 100)).toBe((100 + 50 + 10) / 200);
    expect(utilisation(records, 4, 100, 200)).toBe(100 / 400);
  });
});

describe('the ideal FIFO scheduler', () => {
  it('serves one slot first come first served, and lets a request go at its deadline (a grant at it loses)', () => {
    const trace = [
      { at: 0, hold: 150, instance: 0 },
      { at: 10, hold: 20, instance: 1 }, // the slot frees at 150: 140 ms ≥ 100 → refused at 110
      { at: 60, hold: 20, instance: 0 }, // 90 ms < 100 → admitted at 150
      { at: 70, hold: 10, instance: 1 }, // the slot frees at 170, exactly its deadline → refused at 170
      { at: 200, hold: 10, instance: 0 }, // free: admitted at once
    ];
    expect(idealFifo(trace, [{ id: 'c0', max: 1 }], 100)).toEqual([
      { instance: 0, arrival: 0, outcome: 0, channel: 'c0', release: 150 },
      { instance: 1, arrival: 10, outcome: 110, reason: 'wait_timeout' },
      { instance: 0, arrival: 60, outcome: 150, channel: 'c0', release: 170 },
      { instance: 1, arrival: 70, outcome: 170, reason: 'wait_timeout' },
      { instance: 0, arrival: 200, outcome: 200, channel: 'c0', release: 210 },
    ]);
  });

  it('gives each request the slot that frees first, over every channel, and with no wait allowed only a free one', () => {
    const channels = [
      { id: 'c0', max: 1 },
      { id: 'c1', max: 1 },
    ];
    const trace = [
      { at: 0, hold: 100, instance: 0 },
      { at: 10, hold: 30, instance: 1 },
      { at: 20, hold: 10, instance: 0 },
      { at: 30, hold: 10, instance: 1 },
    ];
    const records = idealFifo(trace, channels, 1000);
    expect(records.map((r) => [r.outcome, r.channel, r.release])).toEqual([
      [0, 'c0', 100],
      [10, 'c1', 40],
      [40, 'c1', 50],
      [50, 'c1', 60],
    ]);
    const f = fleetFigures(records, {
      slots: 2,
      instances: 2,
      window: { from: 0, to: Infinity, utilisation: { from: 0, to: 100 } },
    });
    expect(f.wait).toEqual({ p50: 0, p90: 20, p99: 20 });
    expect(f.perInstance.map((p) => p.admitted)).toEqual([2, 2]);
    expect([f.jain, f.share, f.waiters, f.overtaken]).toEqual([1, 1, 2, 0]);
    expect(f.grantLatency).toEqual({ count: 2, p50: 0, p99: 0 });
    expect(f.utilisation).toBe(0.75);

    expect(idealFifo(trace, channels, 0).map((r) => r.channel ?? r.reason)).toEqual([
      'c0',
      'c1',
      'wait_timeout',
      'wait_timeout',
    ]);
  });

  it('on a seeded overload trace: no inversions, grants at the release, waits only when every slot is held', () => {
    const hold: HoldShape = { medianMs: 200, sigma: 0.8, capMs: 2000 };
    const channels = [
      { id: 'c0', max: 4 },
      { id: 'c1', max: 4 },
    ];
    const trace = makeTrace({ seed: 11, ratePerS: 60, durationMs: 20_000, hold, instances: 4 });
    const records = idealFifo(trace, channels, 3000);
    const waited = hadToWait(records, 8);
    records.forEach((r, i) => {
      if (r.channel !== undefined) expect(waited[i]).toBe(r.outcome > r.arrival);
      else expect(r.outcome - r.arrival).toBeCloseTo(3000, 6);
    });
    const f = fleetFigures(records, {
      slots: 8,
      instances: 4,
      window: { from: 0, to: Infinity, utilisation: { from: 1000, to: 20_000 } },
    });
    expect(f.overtaken).toBe(0);
    expect(f.grantLatency.p99).toBe(0);
    expect(f.refusalRatio).toBeGreaterThan(0.2);
    expect(f.utilisation).toBeCloseTo(1, 9);
  });
});

describe('trace generators', () => {
  const hold: HoldShape = { medianMs: 200, sigma: 0.8, capMs: 2000 };
  const trace = (seed: number) => makeTrace({ seed, ratePerS: 50, durationMs: 10_000, hold, instances: 3 });

  it('give the same trace for the same seed, another for another seed', () => {
    expect(trace(7)).toEqual(trace(7));
    expect(trace(8)).not.toEqual(trace(7));
    const t = trace(7);
    expect(t.every((r, k) => r.instance === k % 3 && r.at >= 0 && r.at < 10_000)).toBe(true);
    expect(t.every((r, k) => k === 0 || r.at > t[k - 1]!.at)).toBe(true);
    // the holds come from their own stream: the same sequence at another rate
    const slower = makeTrace({ seed: 7, ratePerS: 10, durationMs: 10_000, hold, instances: 3 });
    expect(slower.map((r) => r.hold)).toEqual(t.slice(0, slower.length).map((r) => r.hold));
  });

  it('draw exponential gaps with mean 1/rate and log-normal holds with the median, cap and mean asked for', () => {
    const random = seededRandom(3);
    const n = 100_000;
    let gaps = 0;
    for (let i = 0; i < n; i++) gaps += exponentialMs(random, 40);
    expect(gaps / n).toBeGreaterThan(25 * 0.98);
    expect(gaps / n).toBeLessThan(25 * 1.02);

    const holds = Array.from({ length: n }, () => logNormalMs(random, hold)).sort((a, b) => a - b);
    expect(holds[n / 2]!).toBeGreaterThan(200 * 0.97);
    expect(holds[n / 2]!).toBeLessThan(200 * 1.03);
    expect(holds.at(-1)).toBe(2000);
    const mean = holds.reduce((a, b) => a + b, 0) / n;
    expect(Math.abs(mean / meanHoldMs(hold) - 1)).toBeLessThan(0.015);
  });

  it('compute the mean hold of the capped log-normal and the rate for a load', () => {
    // no cap in reach: e^(μ + σ²/2)
    expect(meanHoldMs({ medianMs: 200, sigma: 0.8, capMs: 1e9 })).toBeCloseTo(200 * Math.exp(0.32), 3);
    const mean = meanHoldMs(hold);
    expect(mean).toBeLessThan(200 * Math.exp(0.32));
    expect(arrivalRate({ channels: 2, max: 4, loadPct: 60, hold })).toBeCloseTo((0.6 * 8) / (mean / 1000), 9);
  });
});
