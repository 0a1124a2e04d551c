/**
 * The load view's side of the load summary (packages/slotgate/src/admission/loads/summary-reports.ts and the rounds
 * of load-view.ts) on a MemoryStore given a fake `exchangeLoads` and a ManualClock. The fake records every exchange
 * (with the clock's time it went out) and answers from an in-test summary that works as RedisStore's does: each
 * exchange writes the instance's whole counts (its last ones with the exchange's changes applied), so a summary that
 * lost an instance's counts has them all back at its next write. The test can make the next exchanges fail, or be
 * held (applied when sent, answered when the test says).
 */
import { describe, expect, it } from 'vitest';
import { LoadView } from '../../packages/slotgate/src/admission/loads/load-view.js';
import type { Clock } from '../../packages/slotgate/src/core/clock.js';
import { ManualClock } from './manual-clock.js';
import { admissionSettings, type SettingsUpdate } from '../../packages/slotgate/src/core/settings.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import type {
  ChannelLoad,
  LoadExchange,
  OwnCounts,
  SlotStore,
} from '../../packages/slotgate/src/store/store.js';
import { elapse, flush, track } from './manual-time.js';

/** One exchange as the fake summary got it: `at` is the clock's time it went out. */
interface Recorded {
  at: number;
  instanceId: string;
  mode: LoadExchange['mode'];
  counts: Record<string, OwnCounts>;
  keepMs?: number;
  read: string[];
}

type Behaviour = 'answer' | 'fail' | 'hold';

function fakeSummary(store: SlotStore, clock: ManualClock) {
  /** What the summary holds: per instance, its counts as last written. */
  const held = new Map<string, Map<string, OwnCounts>>();
  /** What each instance's store last wrote (RedisStore keeps it: loads/reported-counts.ts). */
  const last = new Map<string, Map<string, OwnCounts>>();
  const summary = {
    exchanges: [] as Recorded[],
    /** The `maxAgeMs` of each exchange, in the same order (kept apart: most tests are about the rest). */
    ages: [] as { maxAgeMs?: number }[],
    /** How the next exchanges go, one entry each (then: answered at once). */
    next: [] as Behaviour[],
    /** Held exchanges: already applied, their replies waiting for `answer` (or `fail`). */
    held: [] as { answer(): void; fail(): void }[],
    /** The summary's figure of the channel: the sum of every instance's counts. */
    total(id: string): OwnCounts {
      let active = 0;
      let waiting = 0;
      for (const own of held.values()) {
        active += own.get(id)?.active ?? 0;
        waiting += own.get(id)?.waiting ?? 0;
      }
      return { active, waiting };
    },
    /** The summary loses an instance's counts (its keys were deleted, say). */
    lose(instanceId: string): void {
      held.delete(instanceId);
    },
    /** Another instance's counts, as if it had reported them. */
    put(instanceId: string, counts: Record<string, OwnCounts>): void {
      held.set(instanceId, new Map(Object.entries(counts)));
    },
  };
  const loadsOf = (ids: readonly string[]) =>
    new Map(
      ids.map((id): [string, ChannelLoad] => [
        id,
        { ...summary.total(id), coolingDown: false, cooldownRemainingMs: 0 },
      ]),
    );
  const apply = (ex: LoadExchange): void => {
    const own = ex.mode === 'leave' ? new Map<string, OwnCounts>() : new Map(last.get(ex.instanceId) ?? []);
    for (const [id, counts] of ex.counts) own.set(id, { ...counts });
    last.set(ex.instanceId, own);
    if (ex.mode === 'leave') held.delete(ex.instanceId);
    else if (ex.counts.size > 0 || ex.keepMs !== undefined) held.set(ex.instanceId, new Map(own));
  };

  store.exchangeLoads = (ex: LoadExchange): Promise<Map<string, ChannelLoad>> => {
    const { counts, read, maxAgeMs, ...rest } = ex;
    summary.ages.push({ maxAgeMs });
    summary.exchanges.push({
      at: clock.now(),
      ...rest,
      counts: Object.fromEntries([...counts].map(([id, c]) => [id, { ...c }])),
      read: [...read],
    });
    const behaviour = summary.next.shift() ?? 'answer';
    if (behaviour === 'fail') return Promise.reject(new Error('summary down'));
    apply(ex);
    const reply = loadsOf(ex.read);
    if (behaviour !== 'hold') return Promise.resolve(reply);
    return new Promise((resolve, reject) => {
      summary.held.push({ answer: () => resolve(reply), fail: () => reject(new Error('summary down')) });
    });
  };
  return summary;
}

interface FixtureOptions {
  settings?: SettingsUpdate;
  fetchTimeoutMs?: number;
  maxConcurrentFetches?: number;
  /** The views' timers fire this many ms before their time (as Node's may: it counts from the loop's cached time). */
  timersEarlyBy?: number;
}

/** One clock, one MemoryStore with the fake summary, shared settings (200 ms TTL); `view(id)` makes an instance. */
function fixture(options: FixtureOptions = {}) {
  const clock = new ManualClock();
  const memory = new MemoryStore({ clock });
  const readLoadsCalls: string[][] = [];
  const realRead = memory.readLoads.bind(memory);
  memory.readLoads = (ids) => {
    readLoadsCalls.push([...ids]);
    return realRead(ids);
  };
  const store: SlotStore = memory;
  const summary = fakeSummary(store, clock);
  let settings = admissionSettings.merge(admissionSettings.defaults, {
    load_cache_ttl_ms: 200,
    ...options.settings,
  });
  const early = options.timersEarlyBy ?? 0;
  const viewClock: Clock = {
    now: () => clock.now(),
    sleep: (ms, signal) => clock.sleep(ms, signal),
    setTimer: (fn, ms) => clock.setTimer(fn, ms > early ? ms - early : ms),
  };
  const view = (instanceId: string) =>
    new LoadView({
      store,
      clock: early > 0 ? viewClock : clock,
      settings: () => settings,
      local: { active: () => 0, waiting: () => 0, coolingMs: () => 0 },
      instanceId: () => instanceId,
      ...(options.fetchTimeoutMs !== undefined ? { fetchTimeoutMs: options.fetchTimeoutMs } : {}),
      ...(options.maxConcurrentFetches !== undefined
        ? { maxConcurrentFetches: options.maxConcurrentFetches }
        : {}),
    });
  const update = (u: SettingsUpdate) => (settings = admissionSettings.merge(settings, u));
  return { clock, summary, view, update, readLoadsCalls, t0: clock.now() };
}

const load = (active: number, waiting = 0): ChannelLoad => ({
  active,
  waiting,
  coolingDown: false,
  cooldownRemainingMs: 0,
});
const own = (active: number, waiting = 0): OwnCounts => ({ active, waiting });

const LEASE = 60_000; // lease_ttl_ms by default: a keep every 15 s

describe('reports of this instance’s own counts', () => {
  it('a change with no read is reported within one TTL, not before, in one exchange with the absolute count', async () => {
    const { clock, summary, view, t0 } = fixture();
    const a = view('i1');
    a.noteActive('x', 1);
    await elapse(clock, 199);
    expect(summary.exchanges).toEqual([]);
    await elapse(clock, 1);
    // the first report is a full one, and registers the instance
    expect(summary.exchanges).toStrictEqual([
      {
        at: t0 + 200,
        instanceId: 'i1',
        mode: 'changes',
        counts: { x: own(1) },
        keepMs: LEASE,
        read: [],
      },
    ]);
    expect(a.counters).toMatchObject({ reports: 1, fetches: 1, misses: 0 });

    // two more changes within a TTL: one exchange, one TTL after the first of them, with the counts as they stand
    a.noteActive('x', 1);
    await elapse(clock, 50);
    a.noteWaiter('y', 1);
    await elapse(clock, 149);
    expect(summary.exchanges).toHaveLength(1);
    await elapse(clock, 1);
    expect(summary.exchanges.slice(1)).toStrictEqual([
      { at: t0 + 400, instanceId: 'i1', mode: 'changes', counts: { x: own(2), y: own(0, 1) }, read: [] },
    ]);
    expect(summary.total('x')).toEqual(own(2));
    expect(summary.total('y')).toEqual(own(0, 1));
    expect(a.counters.reports).toBe(2);
  });

  it('a read round carries the pending changes: no report exchange of its own follows', async () => {
    const { clock, summary, view, t0 } = fixture();
    const a = view('i1');
    a.noteActive('x', 1);
    await elapse(clock, 50);
    expect(await a.read(['y'])).toEqual(new Map([['y', load(0)]]));
    expect(summary.exchanges).toStrictEqual([
      {
        at: t0 + 50,
        instanceId: 'i1',
        mode: 'changes',
        counts: { x: own(1) },
        keepMs: LEASE,
        read: ['y'],
      },
    ]);
    expect(summary.total('x')).toEqual(own(1));
    // nothing changed since, and the next keep is due only at +50 + 15 s
    await elapse(clock, 1000);
    expect(summary.exchanges.map((e) => e.at)).toEqual([t0 + 50]);
    expect(a.counters.reports).toBe(0);
  });
});

describe('reads through the summary', () => {
  it('cached channels cost nothing within the TTL; after it, one exchange reads every channel wanted within fifty TTLs', async () => {
    const { clock, summary, view, t0 } = fixture();
    summary.put('other', { a: own(2), c: own(1, 3) });
    const v = view('i1');

    expect(await v.read(['a', 'b'])).toEqual(
      new Map([
        ['a', load(2)],
        ['b', load(0)],
      ]),
    );
    await elapse(clock, 100);
    // a new channel: its round also reads the channels wanted lately (a and b, at t0)
    expect(await v.read(['c'])).toEqual(new Map([['c', load(1, 3)]]));
    const plain = { instanceId: 'i1', mode: 'changes', counts: {} } as const;
    expect(summary.exchanges).toStrictEqual([
      { at: t0, ...plain, read: ['a', 'b'] },
      { at: t0 + 100, ...plain, read: ['c', 'a', 'b'] },
    ]);

    await elapse(clock, 199); // +299: all three were fetched at +100
    summary.put('other', { a: own(5), c: own(1, 3) });
    expect(await v.read(['a', 'b'])).toEqual(
      new Map([
        ['a', load(2)],
        ['b', load(0)],
      ]),
    );
    expect(await v.read(['c', 'a'])).toEqual(
      new Map([
        ['c', load(1, 3)],
        ['a', load(2)],
      ]),
    );
    expect(summary.exchanges).toHaveLength(2);
    expect(v.counters).toMatchObject({ hits: 2, misses: 2, fetches: 2, reports: 0 });

    await elapse(clock, 1); // +300: the TTL is out; one exchange covers both sets
    expect(await v.read(['a'])).toEqual(new Map([['a', load(5)]]));
    expect(await v.read(['b', 'c'])).toEqual(
      new Map([
        ['b', load(0)],
        ['c', load(1, 3)],
      ]),
    );
    expect(summary.exchanges.slice(2)).toStrictEqual([{ at: t0 + 300, ...plain, read: ['a', 'b', 'c'] }]);

    // b and c were last wanted at +300: at +10300 (fifty TTLs) they are still read along with a, at +10500 no longer
    await elapse(clock, 10_000);
    await v.read(['a']);
    await elapse(clock, 200);
    await v.read(['a']);
    expect(summary.exchanges.slice(3)).toStrictEqual([
      { at: t0 + 10_300, ...plain, read: ['a', 'b', 'c'] }, // (a sweep every 5 s)
      { at: t0 + 10_500, ...plain, read: ['a'] },
    ]);
    expect(v.counters).toMatchObject({ hits: 3, misses: 5, fetches: 5, reports: 0 });
  });
});

describe('report rounds', () => {
  it('read what a read round would while passes ask for loads, so the next pass finds it fresh; nothing once they stop', async () => {
    const { clock, summary, view, t0 } = fixture();
    const a = view('A');
    await a.read(['x', 'y']); // t0: a read round
    await elapse(clock, 10);
    a.noteActive('x', 1); // reported at +210
    await elapse(clock, 140);
    await a.read(['x']); // +150: fresh, no exchange
    await elapse(clock, 60); // +210: the report round also reads x and y (a pass asked within two TTLs)
    await elapse(clock, 40);
    await a.read(['x', 'y']); // +250: fresh from the report, no exchange
    a.noteActive('x', -1); // reported at +450, still reading (the last pass was 200 ms before)
    await elapse(clock, 400);
    a.noteActive('x', 1); // +650: reported at +850, with no pass for 600 ms: it reads nothing
    await elapse(clock, 200);
    expect(summary.exchanges.map((e) => [e.at - t0, e.mode, e.read])).toStrictEqual([
      [0, 'changes', ['x', 'y']],
      [210, 'changes', ['x', 'y']],
      [450, 'changes', ['x', 'y']],
      [850, 'changes', []],
    ]);
    expect(a.counters.reports).toBe(3);
  });
});

describe('how old the summary’s counts may be', () => {
  it('a round allows a quarter of the load TTL; a fresh read allows none', async () => {
    const { clock, summary, view, update } = fixture();
    summary.put('other', { a: own(1) });
    const v = view('i1');
    await v.read(['a']);
    expect(summary.ages).toEqual([{ maxAgeMs: 50 }]);
    expect(await v.readFresh(['a'])).toEqual(new Map([['a', load(1)]]));
    expect(summary.ages[1]).toEqual({ maxAgeMs: 0 });
    update({ load_cache_ttl_ms: 1000 });
    await elapse(clock, 1001);
    await v.read(['a']);
    expect(summary.ages[2]).toEqual({ maxAgeMs: 250 });
    expect(summary.ages).toHaveLength(summary.exchanges.length);
  });
});

describe('two instances on one summary', () => {
  it('sees the other’s counts after its report and its own TTL; corrects its own changes since locally', async () => {
    const { clock, summary, view, t0 } = fixture();
    const a = view('A');
    const b = view('B');
    b.noteActive('x', 1);
    b.noteActive('x', 1);
    await elapse(clock, 100);
    expect(await a.read(['x'])).toEqual(new Map([['x', load(0)]]));
    await elapse(clock, 100); // +200: B's report
    expect(summary.exchanges).toStrictEqual([
      { at: t0 + 100, instanceId: 'A', mode: 'changes', counts: {}, read: ['x'] },
      {
        at: t0 + 200,
        instanceId: 'B',
        mode: 'changes',
        counts: { x: own(2) },
        keepMs: LEASE,
        read: [],
      },
    ]);
    await elapse(clock, 99);
    expect(await a.read(['x'])).toEqual(new Map([['x', load(0)]])); // A's snapshot of +100 is still fresh
    await elapse(clock, 1);
    expect(await a.read(['x'])).toEqual(new Map([['x', load(2)]])); // +300
    b.noteActive('x', -1); // B's report goes out at +500

    await elapse(clock, 10);
    a.noteActive('x', 1); // +310: not reported yet, shown at once on top of the summary's figure
    expect(await a.read(['x'])).toEqual(new Map([['x', load(3)]]));
    expect(summary.exchanges.slice(2)).toStrictEqual([
      { at: t0 + 300, instanceId: 'A', mode: 'changes', counts: {}, read: ['x'] },
    ]);

    await elapse(clock, 189);
    expect(await a.read(['x'])).toEqual(new Map([['x', load(3)]])); // +499: A's snapshot of +300 is still fresh
    // +500 B reports 1 (B's passes read nothing lately: nor does its report); +510 A's first counts go as a full
    // report (the summary knows nothing of A), which also reads x: A's passes want it, and its +300 snapshot is half
    // stale
    await elapse(clock, 11);
    expect(summary.exchanges.slice(3)).toStrictEqual([
      { at: t0 + 500, instanceId: 'B', mode: 'changes', counts: { x: own(1) }, read: [] },
      { at: t0 + 510, instanceId: 'A', mode: 'changes', counts: { x: own(1) }, keepMs: LEASE, read: ['x'] },
    ]);
    expect(summary.total('x')).toEqual(own(2));
    expect(await a.read(['x'])).toEqual(new Map([['x', load(2)]])); // B's 1 + A's 1, A's not counted twice
    expect(await b.read(['x'])).toEqual(new Map([['x', load(2)]]));
    // A's read found the report's snapshot fresh; B's +100 one is stale
    expect(summary.exchanges.slice(5)).toStrictEqual([
      { at: t0 + 510, instanceId: 'B', mode: 'changes', counts: {}, read: ['x'] },
    ]);
  });

  it('a change while its exchange is in flight is added to the reply, and reported with the next exchange', async () => {
    const { clock, summary, view, t0 } = fixture();
    const a = view('A');
    summary.put('B', { x: own(4) });
    a.noteActive('x', 1);
    summary.next.push('hold');
    const first = track(clock, a.read(['x']));
    await flush();
    a.noteActive('x', 1); // after the exchange went out with x = 1
    summary.held[0]!.answer();
    await flush();
    expect(first.value).toEqual(new Map([['x', load(6)]])); // the summary's 5 + the change since
    expect(summary.total('x')).toEqual(own(5));
    await elapse(clock, 200); // the change's report, which reads x again (a pass wanted it within two TTLs)
    expect(summary.exchanges).toStrictEqual([
      {
        at: t0,
        instanceId: 'A',
        mode: 'changes',
        counts: { x: own(1) },
        keepMs: LEASE,
        read: ['x'],
      },
      { at: t0 + 200, instanceId: 'A', mode: 'changes', counts: { x: own(2) }, read: ['x'] },
    ]);
    expect(summary.total('x')).toEqual(own(6));
    expect(await a.read(['x'])).toEqual(new Map([['x', load(6)]]));
  });
});

describe('failures and resyncs', () => {
  it('a failed exchange: its counts are sent again (absolute) one second later at the earliest, or with the next read', async () => {
    const { clock, summary, view, t0 } = fixture();
    const a = view('i1');
    a.noteActive('x', 1);
    summary.next.push('fail');
    await elapse(clock, 200);
    const first = { instanceId: 'i1', mode: 'changes', counts: { x: own(1) }, keepMs: LEASE } as const;
    expect(summary.exchanges).toStrictEqual([{ at: t0 + 200, ...first, read: [] }]);
    await elapse(clock, 999);
    expect(summary.exchanges).toHaveLength(1);
    await elapse(clock, 1); // +1200: the full report again, keep included
    expect(summary.exchanges.slice(1)).toStrictEqual([{ at: t0 + 1200, ...first, read: [] }]);
    expect(summary.total('x')).toEqual(own(1));

    a.noteActive('x', 1);
    summary.next.push('fail');
    await elapse(clock, 200); // +1400: fails
    await elapse(clock, 999);
    expect(summary.exchanges.map((e) => e.at)).toEqual([t0 + 200, t0 + 1200, t0 + 1400]);
    await elapse(clock, 1); // +2400
    const changes = { instanceId: 'i1', mode: 'changes', counts: { x: own(2) }, read: [] } as const;
    expect(summary.exchanges.slice(2)).toStrictEqual([
      { at: t0 + 1400, ...changes },
      { at: t0 + 2400, ...changes },
    ]);
    expect(summary.total('x')).toEqual(own(2));

    // a read after a failure carries the counts at once, without waiting for the retry
    a.noteWaiter('x', 1);
    summary.next.push('fail');
    await elapse(clock, 200); // +2600: fails
    await elapse(clock, 100);
    expect(await a.read(['y'])).toEqual(new Map([['y', load(0)]]));
    expect(summary.exchanges.slice(4)).toStrictEqual([
      { at: t0 + 2600, instanceId: 'i1', mode: 'changes', counts: { x: own(2, 1) }, read: [] },
      { at: t0 + 2700, instanceId: 'i1', mode: 'changes', counts: { x: own(2, 1) }, read: ['y'] },
    ]);
    expect(summary.total('x')).toEqual(own(2, 1));
  });

  it("a summary that lost this instance's counts has them all back at its next write, a change or a keep", async () => {
    const { clock, summary, view } = fixture();
    const a = view('i1');
    a.noteActive('x', 1);
    a.noteActive('x', 1);
    await elapse(clock, 200);
    expect(summary.total('x')).toEqual(own(2));
    summary.lose('i1');
    a.noteActive('y', 1);
    await elapse(clock, 200); // y's change alone: the store writes the instance's whole counts
    expect(summary.total('y')).toEqual(own(1));
    expect(summary.total('x')).toEqual(own(2));
    summary.lose('i1');
    await elapse(clock, LEASE / 4); // the keep
    expect(summary.exchanges.at(-1)).toMatchObject({ counts: {}, keepMs: LEASE });
    expect(summary.total('x')).toEqual(own(2));
  });
});

describe('the registration', () => {
  it('while holding, a keep of lease_ttl_ms goes out every quarter of it, with or without changes and reads', async () => {
    const { clock, summary, view, t0 } = fixture({ settings: { lease_ttl_ms: 5000 } });
    const a = view('i1');
    a.noteActive('x', 1);
    await elapse(clock, 1100);
    expect(await a.read(['y'])).toEqual(new Map([['y', load(0)]])); // +1100: no keep due yet
    await elapse(clock, 5400);
    const base = { instanceId: 'i1', mode: 'changes', counts: {} } as const;
    expect(summary.exchanges).toStrictEqual([
      {
        at: t0 + 200,
        instanceId: 'i1',
        mode: 'changes',
        counts: { x: own(1) },
        keepMs: 5000,
        read: [],
      },
      { at: t0 + 1100, ...base, read: ['y'] },
      { at: t0 + 1450, ...base, keepMs: 5000, read: ['y'] }, // a pass wanted y within two TTLs: read again
      // later keeps read nothing: no pass since
      { at: t0 + 2700, ...base, keepMs: 5000, read: [] },
      { at: t0 + 3950, ...base, keepMs: 5000, read: [] },
      { at: t0 + 5200, ...base, keepMs: 5000, read: [] },
      { at: t0 + 6450, ...base, keepMs: 5000, read: [] },
    ]);
    expect(a.counters.reports).toBe(6);
    expect(summary.total('x')).toEqual(own(1));
  });

  it('a keep timer that fires before its time by the clock puts the keep off, and the keeps go on', async () => {
    const { clock, summary, view, t0 } = fixture({ settings: { lease_ttl_ms: 5000 }, timersEarlyBy: 1 });
    const a = view('i1');
    a.noteActive('x', 1);
    await elapse(clock, 4000);
    // the first timer (200 ms) fired at 199 with a change due; each keep timer fires 1 ms early, finds no keep due
    // yet and puts it off by the 1 ms left
    expect(summary.exchanges.map((e) => [e.at - t0, e.mode, e.keepMs])).toStrictEqual([
      [199, 'changes', 5000],
      [1449, 'changes', 5000],
      [2699, 'changes', 5000],
      [3949, 'changes', 5000],
    ]);
  });

  it('an instance that never held anything never sends a keep', async () => {
    const { clock, summary, view, t0 } = fixture({ settings: { lease_ttl_ms: 5000 } });
    const a = view('i1');
    for (let i = 0; i <= 10; i++) {
      if (i > 0) await elapse(clock, 1000);
      await a.read(['x']);
    }
    const plain = { instanceId: 'i1', mode: 'changes', counts: {}, read: ['x'] } as const;
    expect(summary.exchanges).toStrictEqual(
      Array.from({ length: 11 }, (_, i) => ({
        at: t0 + i * 1000,
        ...plain,
      })),
    );
  });
});

describe('load_cache_enabled = false (the rollback switch)', () => {
  it('reads readLoads and sends no exchange; back on, the changes made meanwhile go out with the next exchange', async () => {
    const { clock, summary, view, update, readLoadsCalls } = fixture();
    const a = view('i1');
    a.noteActive('x', 1);
    await elapse(clock, 200);
    expect(summary.exchanges).toHaveLength(1);
    update({ load_cache_enabled: false });
    a.noteActive('x', 1);
    a.noteWaiter('y', 1);
    await a.read(['x', 'z']);
    expect(readLoadsCalls).toEqual([['x', 'z']]);
    await elapse(clock, 20_000);
    expect(summary.exchanges).toHaveLength(1);
    update({ load_cache_enabled: true });
    expect(await a.read(['x'])).toEqual(new Map([['x', load(2)]]));
    expect(summary.exchanges.at(-1)).toMatchObject({ counts: { x: own(2), y: own(0, 1) }, keepMs: LEASE });
    expect(readLoadsCalls).toHaveLength(1);
  });
});

describe('close', () => {
  it('sends one leave when it had reported counts, and nothing after it', async () => {
    const { clock, summary, view, t0 } = fixture();
    const a = view('i1');
    a.noteActive('x', 1);
    await elapse(clock, 200);
    await elapse(clock, 100);
    await a.close();
    expect(summary.exchanges).toStrictEqual([
      {
        at: t0 + 200,
        instanceId: 'i1',
        mode: 'changes',
        counts: { x: own(1) },
        keepMs: LEASE,
        read: [],
      },
      { at: t0 + 300, instanceId: 'i1', mode: 'leave', counts: {}, read: [] },
    ]);
    expect(summary.total('x')).toEqual(own(0));
    a.noteActive('x', 1);
    expect(await a.read(['y'])).toEqual(new Map([['y', load(0)]])); // the fallback
    await elapse(clock, 20_000);
    expect(summary.exchanges).toHaveLength(2);
  });

  it('sends nothing when it never reported counts (a change still pending included)', async () => {
    const { clock, summary, view } = fixture();
    const a = view('i1');
    await a.read(['x']);
    a.noteActive('x', 1);
    await elapse(clock, 100);
    await a.close();
    await elapse(clock, 20_000);
    expect(summary.exchanges.map((e) => e.mode)).toEqual(['changes']);
  });

  it('a report round that gets no fetch slot in time is tried again: the change still goes out', async () => {
    const { clock, summary, view } = fixture({ maxConcurrentFetches: 1, fetchTimeoutMs: 500 });
    const a = view('i1');
    summary.next.push('hold');
    void a.read(['y']); // its exchange holds the only fetch slot until answered
    await flush();
    a.noteActive('x', 1);
    await elapse(clock, 200 + 500); // the report's round waits for the slot, and gives up
    expect(summary.exchanges).toHaveLength(1);
    summary.held[0]!.answer();
    await elapse(clock, 2000);
    expect(summary.exchanges).toHaveLength(2);
    expect(summary.exchanges[1]).toMatchObject({ mode: 'changes', counts: { x: own(1) } });
    expect(summary.total('x')).toEqual(own(1));
  });

  it('a round waiting for a fetch slot at close sends nothing: the leave is the last exchange', async () => {
    const { clock, summary, view } = fixture({ maxConcurrentFetches: 1 });
    const a = view('i1');
    a.noteActive('x', 1);
    summary.next.push('hold');
    const first = track(clock, a.read(['x']));
    const second = track(clock, a.read(['y']));
    await flush();
    expect(summary.exchanges.map((e) => e.read)).toEqual([['x']]);
    const closing = track(clock, a.close());
    await flush();
    expect(closing.at).toBeDefined();
    summary.held[0]!.answer(); // frees the slot the second round waits for
    await elapse(clock, 5000);
    expect(first.value).toEqual(new Map([['x', load(1)]]));
    expect(second.value).toEqual(new Map([['y', load(0)]]));
    expect(summary.exchanges.map((e) => [e.mode, e.read])).toEqual([
      ['changes', ['x']],
      ['leave', []],
    ]);
    expect(summary.total('x')).toEqual(own(0));
  });
});
