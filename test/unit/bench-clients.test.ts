/**
 * The clients scenario's pure parts (bench/): the ideal weighted-fair and FIFO schedulers of the closed loop on a tiny
 * case worked out by hand (with and without a client limit), the peak sweep across instances, the per-client figures
 * on hand-made records, and the seeded hold streams the instances and the ideal share.
 */
import { describe, expect, it } from 'vitest';
import {
  clientFigures,
  clientRunsOf,
  clientsRecord,
  holdStream,
  intervalsByClient,
  loopWorkers,
  measuredRatio,
  variantsFor,
} from '../../bench/clients.js';
import {
  idealClosedLoop,
  type ClientPolicy,
  type LoopWorker,
  type SimClient,
} from '../../bench/ideal-clients.js';
import { highestOverlap } from '../../bench/load.js';
import { findFleetScenario, type ClientsScenario } from '../../bench/openloop.js';
import type { RequestRecord } from '../../bench/fairness.js';

/** The peak of one key over lists of intervals, as the sweep counts a client or a channel. */
const peakInFlight = (lists: number[][]) => highestOverlap(lists.map((flat) => ({ k: flat }))).k ?? 0;

/** A worker whose every request holds `hold` ms. */
const worker = (client: string, hold: number, instance = 0): LoopWorker => ({
  client,
  instance,
  holds: () => hold,
});

describe('the ideal schedulers of the closed loop', () => {
  // one channel of max 2; client A has three workers (holding 10, 20 and 10 ms), B one (10 ms); they stop asking at 30
  const workers = () => [worker('A', 10), worker('A', 20), worker('A', 10), worker('B', 10)];
  const clients: SimClient[] = [
    { id: 'A', weight: 1 },
    { id: 'B', weight: 1 },
  ];
  const run = (policy: ClientPolicy, c = clients) =>
    idealClosedLoop({ channel: { id: 'c0', max: 2 }, clients: c, workers: workers(), endMs: 30, policy }).map(
      (r) => [r.client, r.arrival, r.outcome, r.release],
    );

  it('FIFO serves the oldest waiter whatever its client: B waits behind A', () => {
    expect(run('fifo')).toEqual([
      ['A', 0, 0, 10],
      ['A', 0, 0, 20],
      ['A', 0, 10, 20], // A's third worker is older than B (the workers' order at 0)
      ['B', 0, 20, 30],
      ['A', 10, 20, 30],
      ['A', 20, 30, 50], // asked again at 20, served after the last asks: what waits at the end is served
      ['A', 20, 30, 40],
    ]);
  });

  it('weighted-fair gives a freed slot to the client holding the fewest relative to its weight, oldest first', () => {
    expect(run('weighted-fair')).toEqual([
      ['A', 0, 0, 10], // all hold 0: the oldest
      ['B', 0, 0, 10], // A holds 1, B 0
      ['A', 0, 10, 30], // only A waits
      ['A', 0, 10, 20],
      ['B', 10, 20, 30], // A holds 1 (until 30), B 0: B before the older A waiter
      ['A', 10, 30, 40],
      ['A', 20, 30, 40],
    ]);
  });

  it('weighs what a client holds: a client of weight 2 may hold two slots where one of weight 1 holds one', () => {
    // max 3; B's two workers come first, then A's; every hold 10 ms, nobody asks again
    const order = [worker('B', 10), worker('B', 10), worker('A', 10), worker('A', 10)];
    const served = (weightA: number) =>
      idealClosedLoop({
        channel: { id: 'c0', max: 3 },
        clients: [
          { id: 'A', weight: weightA },
          { id: 'B', weight: 1 },
        ],
        workers: order,
        endMs: 10,
        policy: 'weighted-fair',
      }).map((r) => [r.client, r.outcome]);
    // B first (all hold 0: the oldest), then A (0 < 1); then A and B both hold 1: the older B
    expect(served(1)).toEqual([
      ['B', 0],
      ['A', 0],
      ['B', 0],
      ['A', 10],
    ]);
    // A holding 1 at weight 2 (0.5) comes before B holding 1 at weight 1
    expect(served(2)).toEqual([
      ['B', 0],
      ['A', 0],
      ['A', 0],
      ['B', 10],
    ]);
  });

  it('keeps a client at its limit out, leaving slots idle rather than break it; its waiters are served in the end', () => {
    const limited = run('fifo', [
      { id: 'A', weight: 1, maxConcurrency: 1 },
      { id: 'B', weight: 1 },
    ]);
    expect(limited).toEqual([
      ['A', 0, 0, 10],
      ['B', 0, 0, 10], // A's other workers wait for A's slot
      ['A', 0, 10, 30],
      ['B', 10, 10, 20],
      ['B', 20, 20, 30],
      ['A', 0, 30, 40],
      ['A', 10, 40, 50],
    ]);
    const records = idealClosedLoop({
      channel: { id: 'c0', max: 2 },
      clients: [
        { id: 'A', weight: 1, maxConcurrency: 1 },
        { id: 'B', weight: 1 },
      ],
      workers: workers(),
      endMs: 30,
      policy: 'weighted-fair',
    });
    expect(highestOverlap([intervalsByClient(records)])).toEqual({ A: 1, B: 1 });
  });

  it("joins a limited client's request to the channel's waiters when it gets the client's slot, not at its arrival", () => {
    // max 1; A limited to 1 with two workers, B unlimited with one; all hold 10 ms; they stop asking at 15
    const records = idealClosedLoop({
      channel: { id: 'c0', max: 1 },
      clients: [
        { id: 'A', weight: 1, maxConcurrency: 1 },
        { id: 'B', weight: 1 },
      ],
      workers: [worker('A', 10), worker('A', 10), worker('B', 10)],
      endMs: 15,
      policy: 'fifo',
    }).map((r) => [r.client, r.arrival, r.outcome]);
    expect(records).toEqual([
      ['A', 0, 0],
      ['B', 0, 10], // A's second request joined the channel's waiters at 10, after B (at 0)
      ['A', 0, 20],
      ['A', 10, 30], // asked again at 10, waited for A's slot until 30
    ]);
  });

  it('on the clients2 loop: weighted-fair serves the light client far sooner than FIFO, and a limit holds', () => {
    const s = findFleetScenario('clients2') as ClientsScenario;
    const [fifo, , heavy3] = s.variants;
    const none = { instances: 2, durationS: 10, records: [], intervals: [] };
    const free = clientsRecord(s, fifo!, none);
    const light = (f: typeof free.clients) => f.find((c) => c.client === 'light')!;
    const heavy = (f: typeof free.clients) => f.find((c) => c.client === 'heavy')!;
    expect(light(free.ideal['weighted-fair']).wait.p90 * 3).toBeLessThan(light(free.ideal.fifo).wait.p90);
    expect(light(free.ideal['weighted-fair']).slotShare).toBeGreaterThan(0.3);
    expect(light(free.ideal.fifo).slotShare).toBeLessThan(0.1);
    expect(light(free.ideal.fifo).highest).toBeLessThanOrEqual(2);
    expect(heavy(free.ideal.fifo).highest).toBe(4);
    const limited = clientsRecord(s, heavy3!, none);
    expect(heavy(limited.ideal.fifo).highest).toBe(3);
    expect(heavy(limited.ideal['weighted-fair']).limit).toBe(3);
    // peers without clients run the unnamed variant only (the others would be the same run for them)
    expect(variantsFor(s, {}).map((v) => v.id)).toEqual(['fifo']);
    expect(variantsFor(s, { clients: true }).map((v) => v.id)).toEqual(['fifo', 'fair', 'heavy3']);
  });
});

describe('the peak sweep', () => {
  it('counts a client across instances on one clock, an interval ending at t closed before one starting at t', () => {
    expect(peakInFlight([[0, 10, 10, 20]])).toBe(1);
    expect(
      peakInFlight([
        [0, 10],
        [5, 15],
        [9, 10],
      ]),
    ).toBe(3);
    expect(peakInFlight([])).toBe(0);
    expect(
      highestOverlap([
        { heavy: [0, 10, 10, 20], light: [5, 15] },
        { heavy: [5, 12, 10, 11], light: [15, 16] },
      ]),
    ).toEqual({ heavy: 3, light: 1 });
  });
});

describe('the per-client figures', () => {
  const r = (client: string, arrival: number, outcome: number, release?: number): RequestRecord =>
    release === undefined
      ? { instance: 0, client, arrival, outcome, reason: 'wait_timeout' }
      : { instance: 0, client, arrival, outcome, channel: 'c0', release };

  it('counts arrivals, admissions, waits and held slot-time inside the window', () => {
    const records = [
      r('heavy', 5, 12, 22), // arrived before the window: admitted in it, its wait not counted
      r('heavy', 15, 25, 40), // 5 ms held inside
      r('light', 12, 12, 20),
      r('light', 20, 25), // refused
      r('light', 28, 31, 35), // admitted after the window
    ];
    const [heavy, light] = clientFigures(records, {
      clients: [
        { id: 'heavy', workers: 40, weight: 1, limit: 3 },
        { id: 'light', workers: 2, weight: 1 },
      ],
      window: { from: 10, to: 30 },
      peaks: { heavy: 2, light: 1 },
    });
    expect(heavy).toEqual({
      client: 'heavy',
      workers: 40,
      weight: 1,
      limit: 3,
      requests: 1,
      admitted: 2,
      admittedPerS: 100,
      refused: 0,
      wait: { p50: 10, p90: 10, p99: 10 },
      slotShare: 15 / 23,
      highest: 2,
    });
    expect(light).toMatchObject({ requests: 3, admitted: 1, refused: 1, wait: { p50: 0, p90: 3 } });
    expect(light!.slotShare).toBeCloseTo(8 / 23, 12);
    expect(light!.limit).toBeUndefined();
  });
});

describe('the hold streams', () => {
  it('give the instances the same sequences as the ideal schedulers, worker by worker', () => {
    const s = findFleetScenario('clients2') as ClientsScenario;
    const ideal = loopWorkers(s, 2);
    const streams = [0, 1].flatMap((i) =>
      clientRunsOf(s, s.variants[0]!, i).flatMap((c) =>
        c.seeds.map((seed) => ({ client: c.client.id, holds: holdStream(seed, s.hold) })),
      ),
    );
    expect(streams.map((w) => w.client)).toEqual(ideal.map((w) => w.client));
    expect(ideal).toHaveLength(42);
    for (let k = 0; k < ideal.length; k++) {
      const a = Array.from({ length: 5 }, ideal[k]!.holds);
      expect(Array.from({ length: 5 }, streams[k]!.holds)).toEqual(a);
      expect(a.every((h) => h > 0 && h <= 2000)).toBe(true);
    }
    // different workers draw different sequences
    expect(loopWorkers(s, 2)[0]!.holds()).not.toBe(loopWorkers(s, 2)[1]!.holds());
    // the limited variant names the heavy client's limit, the light one none
    expect(
      clientRunsOf(
        s,
        s.variants.find((v) => v.id === 'heavy3')!,
        0,
      ).map((c) => c.client),
    ).toEqual([
      { id: 'heavy', weight: 1, maxConcurrency: 3 },
      { id: 'light', weight: 1 },
    ]);
  });
});

describe("the light client's ratio to the ideal weighted-fair scheduler", () => {
  it('divides its p90 wait by the ideal one on the same loop, and calls a client with no admission starved', () => {
    const s = findFleetScenario('clients2') as ClientsScenario;
    const at = (client: string, arrival: number, wait: number): RequestRecord => ({
      instance: 0,
      client,
      arrival,
      outcome: arrival + wait,
      channel: 'c0',
      release: arrival + wait + 100,
    });
    const run = (records: RequestRecord[]) =>
      clientsRecord(s, s.variants[0]!, { instances: 2, durationS: 5, records, intervals: [] });
    const ideal = run([]).ideal['weighted-fair'].find((c) => c.client === 'light')!.wait.p90;
    expect(ideal).toBeGreaterThan(0);
    const served = run([at('light', 4000, 2 * ideal), at('heavy', 4000, 10)]);
    expect(measuredRatio(served)).toBeCloseTo(2, 12);
    expect(measuredRatio(run([at('heavy', 4000, 10)]))).toBe(Infinity);
  });
});
