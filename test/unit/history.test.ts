/**
 * The dashboard's history (packages/gateway/src/history.ts) on a ManualClock: it keeps the last N points in
 * order, one point per interval on a fixed grid, values from the engine's counters and loads (rates over the interval,
 * wait quantiles of the waits that ended in it, slots in use against max), and who holds each channel's slots.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { HistogramSnapshot } from '../../packages/slotgate/src/core/histogram.js';
import { ManualClock } from './manual-clock.js';
import { History, readAdmission, windowQuantile, type Reading } from '../../packages/gateway/src/history.js';
import { capacityError, closeEngines, setup } from './admission-fixture.js';
import { elapse } from './manual-time.js';

afterEach(closeEngines);

const BUCKETS = [1, 10, 100, 1000];
const snap = (counts: number[]): HistogramSnapshot => ({
  buckets: BUCKETS,
  counts,
  count: counts.reduce((a, b) => a + b, 0),
  sum: 0,
  p50: 0,
  p99: 0,
});

describe('windowQuantile', () => {
  it('reads the quantile of the observations between two snapshots, as a bucket upper bound', () => {
    const before = snap([5, 0, 0, 0, 0]);
    // since `before`: 98 waits ≤ 10 ms and 2 ≤ 1000 ms
    const after = snap([5, 98, 0, 2, 0]);
    expect(windowQuantile(after, before, 0.5)).toBe(10);
    expect(windowQuantile(after, before, 0.99)).toBe(1000);
    expect(windowQuantile(before, before, 0.5)).toBeNull();
    // above the last bucket reads as the last bucket (JSON has no Infinity)
    expect(windowQuantile(snap([0, 0, 0, 0, 3]), snap([0, 0, 0, 0, 0]), 0.5)).toBe(1000);
  });
});

/** A reader whose counters the test sets; `at` comes from the clock at the read. */
function fakeReader(clock: ManualClock) {
  const state = {
    acquired: 0,
    full: 0,
    queueFull: 0,
    timeout: 0,
    clientLimit: 0,
    commands: 0,
    waits: [0, 0, 0, 0, 0],
    active: 0,
    /** The adaptive channel `ad`: its limit (undefined: none) and the upstream 429s counted on it. */
    limit: undefined as number | undefined,
    upstream429s: 0,
  };
  const reads: number[] = [];
  const read = async (): Promise<Reading> => {
    reads.push(clock.now());
    return {
      at: clock.now(),
      outcomes: {
        acquired: state.acquired,
        capacity_full: state.full,
        capacity_queue_full: state.queueFull,
        capacity_wait_timeout: state.timeout,
        capacity_aborted: 0,
        client_limit: state.clientLimit,
        store_unavailable: 0,
        no_channel: 0,
      },
      waits: snap([...state.waits]),
      commands: state.commands,
      channels: [
        { id: 'a', max: 4, active: state.active, waiting: 0, upstream429s: 0 },
        {
          id: 'ad',
          max: 8,
          active: 0,
          waiting: 0,
          ...(state.limit !== undefined && { limit: state.limit }),
          upstream429s: state.upstream429s,
        },
      ],
    };
  };
  return { state, reads, read };
}

describe('History', () => {
  it('samples on a fixed interval and keeps at most `points` of them', async () => {
    const clock = new ManualClock();
    const start = clock.now();
    const reader = fakeReader(clock);
    const history = new History(reader.read, { clock, intervalMs: 5000, points: 4 });
    await history.start();
    expect(history.points).toEqual([]); // a rate needs two readings
    await clock.advance(4999);
    expect(history.points).toHaveLength(0);
    await clock.advance(1);
    expect(history.points).toHaveLength(1);
    await clock.advance(5000 * 10);
    expect(reader.reads).toEqual(Array.from({ length: 12 }, (_, i) => start + 5000 * i));
    const points = history.points;
    expect(points).toHaveLength(4);
    expect(points.map((p) => p.t)).toEqual([8, 9, 10, 11].map((i) => start + 5000 * i));
    history.stop();
    await clock.advance(20_000);
    expect(reader.reads).toHaveLength(12);
    expect(clock.pending).toBe(0);
  });

  it('refuses a point count or an interval that is not a positive integer', () => {
    const read = fakeReader(new ManualClock()).read;
    expect(() => new History(read, { points: 0 })).toThrow(/points to be a positive integer, got 0/);
    expect(() => new History(read, { points: 1.5 })).toThrow(RangeError);
    expect(() => new History(read, { intervalMs: 0 })).toThrow(/intervalMs to be a positive integer/);
  });

  it('each point holds the rates over its interval, the wait quantiles of its waits and the slots in use', async () => {
    const clock = new ManualClock();
    const reader = fakeReader(clock);
    const history = new History(reader.read, { clock, intervalMs: 5000 });
    reader.state.acquired = 100; // before the start: not in any point
    await history.start();
    Object.assign(reader.state, { acquired: 150, full: 5, queueFull: 10, commands: 40, active: 3 });
    reader.state.waits = [0, 9, 1, 0, 0];
    await clock.advance(5000);
    reader.state.timeout = 1;
    reader.state.clientLimit = 3;
    reader.state.active = 4;
    await clock.advance(5000);
    const body = history.toJSON(['a', 'added']);
    expect(body.interval_ms).toBe(5000);
    expect(body.capacity).toBe(180);
    expect(body.admissions_per_s).toEqual([10, 0]);
    expect(body.rejections_per_s).toEqual({
      full: [1, 0],
      queue_full: [2, 0],
      wait_timeout: [0, 0.2],
      client_limit: [0, 0.6],
    });
    expect(body.wait_ms).toEqual({ p50: [10, null], p99: [100, null] });
    expect(body.commands_per_s).toEqual([8, 0]);
    const none = [null, null];
    expect(body.channels).toEqual([
      { id: 'a', max_concurrency: [4, 4], active: [3, 4], waiting: [0, 0], upstream_429_per_s: [0, 0] },
      // a channel of the configuration in force not sampled yet (a reload added it)
      { id: 'added', max_concurrency: none, active: none, waiting: none, upstream_429_per_s: none },
      { id: 'ad', max_concurrency: [8, 8], active: [0, 0], waiting: [0, 0], upstream_429_per_s: [0, 0] },
    ]);
    expect(JSON.parse(JSON.stringify(body))).toEqual(body);
  });

  it('an adaptive channel has its limit and its upstream 429s per second; a plain channel no limit', async () => {
    const clock = new ManualClock();
    const reader = fakeReader(clock);
    const history = new History(reader.read, { clock, intervalMs: 5000 });
    await history.start();
    await clock.advance(5000); // no limit learned yet
    Object.assign(reader.state, { limit: 8, upstream429s: 10 });
    await clock.advance(5000);
    Object.assign(reader.state, { limit: 5, upstream429s: 15 });
    await clock.advance(5000);
    const [plain, adaptive] = history.toJSON(['a', 'ad']).channels;
    expect(plain).not.toHaveProperty('adaptive_limit');
    expect(plain!.upstream_429_per_s).toEqual([0, 0, 0]);
    expect(adaptive).toMatchObject({
      id: 'ad',
      max_concurrency: [8, 8, 8],
      adaptive_limit: [null, 8, 5],
      upstream_429_per_s: [0, 2, 1],
    });
  });

  it('a read still under way when the next is due skips that one; the next point spans the longer interval', async () => {
    const clock = new ManualClock();
    const start = clock.now();
    const reader = fakeReader(clock);
    let stall: Promise<void> | undefined;
    const history = new History(
      async () => {
        const reading = await reader.read();
        if (stall) await stall;
        return reading;
      },
      { clock, intervalMs: 1000 },
    );
    await history.start();
    let resume!: () => void;
    stall = new Promise((resolve) => (resume = resolve));
    await clock.advance(2500); // the read at 1000 stalls; the one due at 2000 is skipped
    expect(reader.reads).toHaveLength(2);
    stall = undefined;
    resume();
    await clock.advance(0);
    expect(history.points.map((p) => p.t)).toEqual([start + 1000]);
    reader.state.acquired = 30;
    await clock.advance(500);
    const points = history.points;
    expect(points.map((p) => p.t)).toEqual([start + 1000, start + 3000]);
    expect(points.map((p) => p.admissionsPerS)).toEqual([0, 15]); // 30 over the 2 s since the stalled read
  });

  it('reads a real engine: admissions, 429s by reason, waits and slots in use against max', async () => {
    const { clock, admission } = setup({ wait_timeout_ms: 1000, max_waiting_per_channel: 1 });
    const a = { id: 'a', maxConcurrency: 2 };
    const free = { id: 'free', maxConcurrency: 0 };
    const history: History = new History(() => readAdmission(admission, [a, free], () => clock.now()), {
      clock,
      intervalMs: 5000,
    });
    const t0 = clock.now();
    const started = history.start();
    await clock.advance(0);
    await started;
    const held = [await admission.acquire({ candidates: [a] }), await admission.acquire({ candidates: [a] })];
    await admission.acquire({ candidates: [free] });
    const waiter = admission.acquire({ candidates: [a] });
    await clock.advance(10);
    const turnedAway = capacityError(admission.acquire({ candidates: [a] }));
    await clock.advance(200);
    expect((await turnedAway).reason).toBe('queue_full');
    await held[0]!.release(); // the waiter gets the slot after 210 ms
    await clock.advance(0);
    await waiter;
    const late = capacityError(admission.acquire({ candidates: [a] }));
    await elapse(clock, 1100);
    expect((await late).reason).toBe('wait_timeout');
    await clock.advance(t0 + 5000 - clock.now());
    const [point] = history.points;
    expect(point).toMatchObject({
      admissionsPerS: 4 / 5,
      rejectionsPerS: { full: 0, queue_full: 1 / 5, wait_timeout: 1 / 5 },
      waitP50Ms: 250, // the waits of 210 ms and 1000 ms, as bucket upper bounds
      waitP99Ms: 1000,
    });
    expect(Object.fromEntries(point!.channels)).toEqual({
      a: { max: 2, active: 2, waiting: 0, upstream429PerS: 0 },
      free: { max: 0, active: 1, waiting: 0, upstream429PerS: 0 },
    });
    history.stop();
  });
});

describe('readAdmission of an adaptive channel', () => {
  it('reads the limit as this instance last learned it, and the upstream 429s counted', async () => {
    const { clock, admission } = setup();
    const ad = { id: 'ad', maxConcurrency: 4, adaptive: {} };
    const plain = { id: 'plain', maxConcurrency: 4 };
    const counted = new Map([['ad', 3]]);
    const read = () =>
      readAdmission(
        admission,
        [ad, plain],
        () => clock.now(),
        (id) => counted.get(id) ?? 0,
      );
    const history = new History(read, { clock, intervalMs: 1000 });
    await history.start();
    const tickets = [];
    for (let i = 0; i < 4; i++) tickets.push(await admission.acquire({ candidates: [ad] }));
    // refused with 4 in flight: the limit falls to 3
    await tickets[0]!.release({ upstream: { kind: 'overloaded' } });
    counted.set('ad', 5);
    await clock.advance(1000);
    const [point] = history.points;
    expect(point!.channels.get('ad')).toEqual({
      max: 4,
      active: 3,
      waiting: 0,
      limit: 3,
      upstream429PerS: 2,
    });
    expect(point!.channels.get('plain')).toEqual({ max: 4, active: 0, waiting: 0, upstream429PerS: 0 });
    history.stop();
  });
});

describe('Admission.readHolders', () => {
  it('counts each channel’s slots by the instance holding them; unlimited channels from this instance', async () => {
    const { admission, other } = setup();
    const a = { id: 'a', maxConcurrency: 5 };
    const free = { id: 'free', maxConcurrency: 0 };
    await admission.acquire({ candidates: [a] });
    await other.acquire({ candidates: [a] });
    await other.acquire({ candidates: [a] });
    await admission.acquire({ candidates: [free] });
    const holders = await admission.readHolders([a, free, { id: 'idle', maxConcurrency: 1 }]);
    expect(Object.fromEntries(holders.get('a')!)).toEqual({
      [admission.instanceId]: 1,
      [other.instanceId]: 2,
    });
    expect(Object.fromEntries(holders.get('free')!)).toEqual({ [admission.instanceId]: 1 });
    expect(holders.get('idle')!.size).toBe(0);
  });
});
