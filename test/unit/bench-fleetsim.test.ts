/**
 * The fleet simulator's pure parts (bench/fleetsim.ts): the candidate sets and seeded arrivals, the per-TTL
 * arithmetic, and a cell's figures from hand-made records.
 */
import { describe, expect, it } from 'vitest';
import {
  FLEETSIM_SHAPE,
  admittedShareJain,
  candidateSets,
  coverage,
  engineArrivals,
  enginesOf,
  offeredShare,
  perInstancePerTtl,
  setSize,
  simFigures,
  type CellInput,
  type SimCell,
} from '../../bench/fleetsim.js';
import type { RequestRecord } from '../../bench/fairness.js';

describe('candidate sets', () => {
  it('are 10 channels at C = 50 and C / 20 above, never more than C', () => {
    expect([50, 500, 1000].map(setSize)).toEqual([10, 25, 50]);
    expect(setSize(6)).toBe(6);
  });

  it('are seeded draws of distinct channels in range, the same for the same seed', () => {
    const sets = candidateSets(1000, 20, 50, 7);
    expect(sets).toHaveLength(20);
    for (const set of sets) {
      expect(new Set(set).size).toBe(50);
      expect(set.every((c) => Number.isInteger(c) && c >= 0 && c < 1000)).toBe(true);
      expect(set).toEqual([...set].sort((a, b) => a - b));
    }
    expect(candidateSets(1000, 20, 50, 7)).toEqual(sets);
    expect(candidateSets(1000, 20, 50, 8)).not.toEqual(sets);
    expect(() => candidateSets(5, 1, 6, 1)).toThrow(/6 out of 5/);
  });

  it('overlap: some channel is in two sets, at C = 50 and at C = 1,000', () => {
    for (const c of [50, 1000]) {
      const sets = candidateSets(c, 20, setSize(c), 16);
      const cover = coverage(sets);
      expect(cover.setsPerChannel).toBeGreaterThan(1);
      expect(cover.channels).toBeLessThanOrEqual(c);
    }
    // 20 × 10 out of 50: nearly every channel is in some set, ~4 sets each
    expect(coverage(candidateSets(50, 20, 10, 16)).channels).toBeGreaterThan(45);
  });

  it('coverage counts the channels in some set and the mean sets per such channel', () => {
    expect(coverage([[0, 1], [1, 2], [1]])).toEqual({ channels: 3, setsPerChannel: 5 / 3 });
    expect(coverage([])).toEqual({ channels: 0, setsPerChannel: 0 });
  });
});

describe('arrivals', () => {
  const o = { seed: 16, ratePerS: 10, durationMs: 60_000, sets: 20, hold: FLEETSIM_SHAPE.hold };

  it('are one seeded stream per engine: the same for the same engine, another for another', () => {
    const a = engineArrivals({ ...o, instance: 3 });
    expect(engineArrivals({ ...o, instance: 3 })).toEqual(a);
    expect(engineArrivals({ ...o, instance: 4 })).not.toEqual(a);
    expect(a.every((x, k) => x.at >= 0 && x.at < 60_000 && (k === 0 || x.at > a[k - 1]!.at))).toBe(true);
    expect(a.every((x) => Number.isInteger(x.set) && x.set >= 0 && x.set < 20)).toBe(true);
    expect(a.every((x) => x.hold > 0 && x.hold <= FLEETSIM_SHAPE.hold.capMs)).toBe(true);
  });

  it('come at the rate asked for and use every set', () => {
    const all = Array.from({ length: 20 }, (_, i) => engineArrivals({ ...o, instance: i })).flat();
    // 20 engines × 10/s × 60 s = 12,000 expected; Poisson σ ≈ 110
    expect(all.length).toBeGreaterThan(12_000 * 0.96);
    expect(all.length).toBeLessThan(12_000 * 1.04);
    expect(new Set(all.map((x) => x.set)).size).toBe(20);
  });

  it('are dealt to worker processes round-robin, every engine once', () => {
    expect([0, 1, 2].map((w) => enginesOf(w, 3, 7))).toEqual([
      [0, 3, 6],
      [1, 4],
      [2, 5],
    ]);
    expect(enginesOf(0, 1, 2)).toEqual([0, 1]);
  });
});

describe('per-TTL arithmetic', () => {
  it('divides the load-read commands by N and by the TTLs in the window', () => {
    // 10 instances, 10 s, TTL 200 ms: 50 TTLs each
    expect(perInstancePerTtl(1000, 10, 10_000, 200)).toBe(2);
    expect(perInstancePerTtl(151 * 50 * 100, 100, 10_000, 200)).toBe(151);
  });

  it('gives the offered load over the slots of the channels in sets', () => {
    const shape = { ...FLEETSIM_SHAPE, ratePerInstance: 10, hold: { medianMs: 500, sigma: 0, capMs: 9999 } };
    // 100 × 10/s × 0.5 s = 500 Erlangs over 50 × 8 slots
    expect(offeredShare(shape, 100, 50)).toBeCloseTo(1.25, 9);
  });
});

const cell: SimCell = {
  instances: 2,
  channels: 2,
  setSize: 2,
  sets: 1,
  coveredChannels: 2,
  setsPerChannel: 1,
  max: 1,
  ratePerS: 20,
  meanHoldMs: 500,
  offeredShare: 1,
  ttlMs: 200,
  durationS: 1,
  waitTimeoutMs: 3000,
  workers: 1,
};

describe("a cell's figures", () => {
  const records: RequestRecord[] = [
    { instance: 0, arrival: 1000, outcome: 1010, channel: 'c0' },
    { instance: 0, arrival: 1100, outcome: 1400, channel: 'c1' },
    { instance: 1, arrival: 1200, outcome: 1230, channel: 'c0' },
    { instance: 1, arrival: 1300, outcome: 1800, reason: 'wait_timeout' },
    { instance: 1, arrival: 900, outcome: 1050, channel: 'c1' }, // arrived before the window, admitted in it
    { instance: 0, arrival: 1900, outcome: 2100, channel: 'c0' }, // admitted after the window
  ];
  const input: CellInput = {
    cell,
    startAt: 1000,
    endAt: 2000,
    records,
    // c0 held twice at once across two processes: one above max 1
    intervals: [{ c0: [0, 100, 300, 400] }, { c0: [50, 150], c1: [0, 10] }],
    counters: [
      { load_read: 10, first_tries: 3, first_tries_full: 1 },
      { load_read: 30, first_tries: 1 },
    ],
    server: { commands: 40, cpuMs: 100, windowMs: 1000 },
    clientCpuMs: 500,
    lagP99Ms: 1,
    lagMaxMs: 2,
  };

  it('counts admissions in the window, refusals and latencies of arrivals in it, cost per admission', () => {
    const f = simFigures(input);
    expect(f.requests).toBe(5);
    expect(f.refused).toEqual({ wait_timeout: 1 });
    expect(f.refusalRatio).toBe(0.2);
    expect(f.admitted).toBe(4);
    expect(f.admPerS).toBe(4);
    expect(f.cmdsPerAdm).toBe(10);
    expect(f.redisCpuPct).toBe(10);
    expect(f.latency).toEqual({ p50: 30, p99: 300 });
    // 40 load reads / 2 instances / 5 TTLs; the busiest instance read 30 in 5 TTLs
    expect(f.loadReadPerInstPerTtl).toBe(4);
    expect(f.loadReadMaxInstPerTtl).toBe(6);
    expect(f.firstTryFull).toBe(0.25);
    expect(f.clientCpuPct).toBe(50);
  });

  it('sweeps the hold intervals of every process for oversell', () => {
    const f = simFigures(input);
    expect([f.peak, f.oversell, f.oversoldChannels]).toEqual([2, 1, ['c0 (2/1)']]);
    const apart = simFigures({ ...input, intervals: [{ c0: [0, 50] }, { c0: [50, 150] }] });
    expect([apart.peak, apart.oversell]).toEqual([1, 0]);
  });

  it("takes Jain's index over admitted / offered per instance", () => {
    // instance 0: 3 of 3 admitted, instance 1: 2 of 3 → (5/3)² / (2 · (1 + 4/9))
    expect(admittedShareJain(records, 2)).toBeCloseTo(25 / 9 / (2 * (13 / 9)), 12);
    expect(admittedShareJain(records.slice(0, 4), 2)).toBeCloseTo((1.5 * 1.5) / (2 * 1.25), 12);
    expect(admittedShareJain([records[0]!], 3)).toBe(1); // instances with no arrival left out
  });
});
