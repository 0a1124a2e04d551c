/**
 * The load view (packages/slotgate/src/admission/load-view.ts) on a MemoryStore and a ManualClock. Every store read
 * goes through a wrapper that records it and can answer at once, hold it (to send and answer it when the test says),
 * or fail it, so "zero store commands", "one fetch" and "falls back after the time-out" are asserted exactly.
 */
import { describe, expect, it } from 'vitest';
import { LoadView } from '../../packages/slotgate/src/admission/loads/load-view.js';
import { ManualClock } from './manual-clock.js';
import { admissionSettings, type SettingsUpdate } from '../../packages/slotgate/src/core/settings.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import type { ChannelLoad } from '../../packages/slotgate/src/store/store.js';
import { elapse, flush, track } from './manual-time.js';

type Loads = Map<string, ChannelLoad>;

/** A store read the test holds: `send` lets it go out (the store reads its state then), `answer` delivers it. */
interface HeldRead {
  ids: string[];
  send(): void;
  answer(): void;
  fail(): void;
}

/**
 * Records every store read (`exchangeLoads`, the cached rounds; `readLoads`, the direct reads of the rollback switch);
 * `mode` decides whether it answers at once, is held, or fails.
 */
function controlReads(store: MemoryStore) {
  const reads = {
    calls: [] as string[][],
    mode: 'answer' as 'answer' | 'hold' | 'fail' | 'throw',
    held: [] as HeldRead[],
  };
  const control = (ids: readonly string[], real: () => Promise<Loads>): Promise<Loads> => {
    reads.calls.push([...ids]);
    if (reads.mode === 'answer') return real();
    if (reads.mode === 'fail') return Promise.reject(new Error('store down'));
    if (reads.mode === 'throw') throw new Error('store broken');
    return new Promise<Loads>((resolve, reject) => {
      let sent: Promise<Loads> | undefined;
      const send = () => (sent ??= real());
      reads.held.push({
        ids: [...ids],
        send: () => void send(),
        answer: () => resolve(send()),
        fail: () => reject(new Error('store down')),
      });
    });
  };
  const readLoads = store.readLoads.bind(store);
  const exchangeLoads = store.exchangeLoads.bind(store);
  store.readLoads = (ids) => control(ids, () => readLoads(ids));
  store.exchangeLoads = (exchange) => control(exchange.read, () => exchangeLoads(exchange));
  return reads;
}

interface FixtureOptions {
  settings?: SettingsUpdate;
  fetchTimeoutMs?: number;
  maxConcurrentFetches?: number;
}

/** A view with a 200 ms TTL, and this instance's own knowledge (the fallback) in three maps the test fills. */
function fixture(options: FixtureOptions = {}) {
  const clock = new ManualClock();
  const store = new MemoryStore({ clock });
  const reads = controlReads(store);
  let settings = admissionSettings.merge(admissionSettings.defaults, {
    load_cache_ttl_ms: 200,
    ...options.settings,
  });
  const local = {
    active: new Map<string, number>(),
    waiting: new Map<string, number>(),
    cooling: new Map<string, number>(),
  };
  const view = new LoadView({
    store,
    clock,
    settings: () => settings,
    local: {
      active: (id) => local.active.get(id) ?? 0,
      waiting: (id) => local.waiting.get(id) ?? 0,
      coolingMs: (id) => local.cooling.get(id) ?? 0,
    },
    instanceId: () => 'me',
    ...(options.fetchTimeoutMs !== undefined ? { fetchTimeoutMs: options.fetchTimeoutMs } : {}),
    ...(options.maxConcurrentFetches !== undefined
      ? { maxConcurrentFetches: options.maxConcurrentFetches }
      : {}),
  });
  const update = (u: SettingsUpdate) => (settings = admissionSettings.merge(settings, u));
  return { clock, store, reads, local, view, update, t0: clock.now() };
}

const load = (active: number, waiting = 0, coolingMs = 0): ChannelLoad => ({
  active,
  waiting,
  coolingDown: coolingMs !== 0,
  cooldownRemainingMs: coolingMs,
});

let tokens = 0;
/** Takes `n` slots of the channel in the store under fresh tokens (another instance's, unless told otherwise). */
async function take(store: MemoryStore, id: string, n = 1, owner = 'other'): Promise<string[]> {
  const taken = [];
  for (let i = 0; i < n; i++) {
    const token = `${owner}:${++tokens}`;
    await store.acquireFirst([{ channelId: id, max: 100 }], {
      token,
      leaseTtlMs: 60_000,
      checkCooldown: false,
    });
    taken.push(token);
  }
  return taken;
}

const counters = (view: LoadView) => ({ ...view.counters });

describe('the snapshot cache', () => {
  it('a read within load_cache_ttl_ms is a hit with zero store commands; at the TTL it fetches again', async () => {
    const { clock, store, reads, view } = fixture();
    await take(store, 'a', 2);
    await take(store, 'b');
    const waiter = { channelId: 'b', token: 'other:w', max: 1 };
    expect(await store.enqueue(waiter, { maxWaiting: 10, ttlMs: 60_000, leaseTtlMs: 60_000 })).toBe('queued');
    await store.setCooldown('b', 5000, 'upstream 429');
    expect(await view.read(['a', 'b'])).toEqual(
      new Map([
        ['a', load(2)],
        ['b', load(1, 1, 5000)], // waiting: the live length of b's queue
      ]),
    );
    expect(reads.calls).toEqual([['a', 'b']]);
    const commands = store.commands.load_read;

    await clock.advance(199);
    await take(store, 'a'); // another instance's change: invisible until the next fetch
    expect((await view.read(['b', 'a'])).get('a')).toEqual(load(2));
    expect(await view.read(['a'])).toEqual(new Map([['a', load(2)]]));
    expect(store.commands.load_read).toBe(commands);
    expect(reads.calls).toHaveLength(1);
    expect(counters(view)).toEqual({
      hits: 2,
      misses: 1,
      coalesced: 0,
      freshReads: 0,
      fallbacks: 0,
      fetches: 1,
      directReads: 0,
      reports: 0,
    });

    await clock.advance(1);
    expect((await view.read(['a'])).get('a')).toEqual(load(3));
    // a round also re-reads every channel wanted lately: one exchange whatever the channel count
    expect(reads.calls).toEqual([
      ['a', 'b'],
      ['a', 'b'],
    ]);
    expect(view.counters).toMatchObject({ hits: 2, misses: 2, fetches: 2 });
  });

  it('fetches once per TTL however many id sets contain a channel; a round re-reads what was wanted lately', async () => {
    const { reads, view } = fixture();
    await view.read(['a', 'b']);
    await view.read(['b', 'c']);
    await view.read(['c', 'a', 'b']);
    await view.read(['d', 'a']);
    await view.read(['d']);
    expect(reads.calls).toEqual([
      ['a', 'b'],
      ['c', 'a', 'b'],
      ['d', 'a', 'b', 'c'],
    ]);
    expect(view.counters).toMatchObject({ hits: 2, misses: 3, fetches: 3 });
  });

  it('an empty id list reads nothing and counts nothing', async () => {
    const { reads, view } = fixture();
    expect(await view.read([])).toEqual(new Map());
    expect(reads.calls).toEqual([]);
    expect(Object.values(view.counters).every((n) => n === 0)).toBe(true);
  });
});

describe('coalescing', () => {
  it('concurrent misses for the same channels share one fetch round; the latecomers count as coalesced', async () => {
    const { store, reads, view } = fixture();
    await take(store, 'b');
    reads.mode = 'hold';
    const pending = [view.read(['a', 'b']), view.read(['b', 'a']), view.read(['a'])];
    await flush();
    expect(reads.calls).toEqual([['a', 'b']]);
    expect(view.counters).toMatchObject({ misses: 1, coalesced: 2, fetches: 1 });
    reads.held[0]!.answer();
    const [both, reversed, one] = await Promise.all(pending);
    expect(both).toEqual(
      new Map([
        ['a', load(0)],
        ['b', load(1)],
      ]),
    );
    expect(reversed).toEqual(
      new Map([
        ['b', load(1)],
        ['a', load(0)],
      ]),
    );
    expect(one).toEqual(new Map([['a', load(0)]]));
    expect(reads.calls).toHaveLength(1);
  });

  it('a read that overlaps a round in flight fetches only its new channels and waits for both rounds', async () => {
    const { clock, reads, view } = fixture();
    reads.mode = 'hold';
    const first = track(clock, view.read(['a']));
    const second = track(clock, view.read(['a', 'b']));
    await flush();
    expect(reads.calls).toEqual([['a'], ['b']]);
    expect(view.counters).toMatchObject({ misses: 2, coalesced: 0, fetches: 2 });
    reads.held[1]!.answer(); // b's round
    await flush();
    expect(second.at).toBeUndefined(); // still waiting for a's round
    reads.held[0]!.answer();
    await flush();
    expect(first.value).toEqual(new Map([['a', load(0)]]));
    expect(second.value).toEqual(
      new Map([
        ['a', load(0)],
        ['b', load(0)],
      ]),
    );
  });
});

describe('the fetch bound and the fallback', () => {
  it('runs at most maxConcurrentFetches rounds at once; the next goes out when one settles', async () => {
    const { clock, reads, view, t0 } = fixture({ maxConcurrentFetches: 2, fetchTimeoutMs: 1000 });
    reads.mode = 'hold';
    const a = track(clock, view.read(['a']));
    const b = track(clock, view.read(['b']));
    const c = track(clock, view.read(['c']));
    await flush();
    expect(reads.calls).toEqual([['a'], ['b']]);
    expect(view.counters).toMatchObject({ misses: 3, fetches: 2 });

    await elapse(clock, 100);
    reads.held[0]!.answer();
    await flush();
    expect(a.at).toBe(t0 + 100);
    expect(reads.calls).toEqual([['a'], ['b'], ['c']]); // c took the slot a gave back
    reads.held[1]!.answer();
    reads.held[2]!.answer();
    await flush();
    expect([b.at, c.at]).toEqual([t0 + 100, t0 + 100]);
    expect(c.value).toEqual(new Map([['c', load(0)]]));
    expect(view.counters).toMatchObject({ fetches: 3, fallbacks: 0 });
  });

  it('a read that gets no fetch slot within fetchTimeoutMs falls back to local counts, with no store call', async () => {
    const { clock, reads, local, view, t0 } = fixture({ maxConcurrentFetches: 1, fetchTimeoutMs: 1000 });
    reads.mode = 'hold';
    void view.read(['a']); // holds the only slot
    local.active.set('c', 2);
    local.waiting.set('c', 1);
    local.cooling.set('c', 300);
    const c = track(clock, view.read(['c', 'unknown']));
    await elapse(clock, 999);
    expect(c.at).toBeUndefined();
    await elapse(clock, 1);
    expect(c.at).toBe(t0 + 1000);
    expect(c.error).toBeUndefined();
    expect(c.value).toEqual(
      new Map([
        ['c', load(2, 1, 300)],
        ['unknown', load(0)],
      ]),
    );
    expect(reads.calls).toEqual([['a']]);
    expect(view.counters).toMatchObject({ misses: 2, fetches: 1, fallbacks: 2 }); // a's hung read fell back too

    // The timed-out wait left no claim on the slot: once the store call settles, the next read goes out.
    reads.held[0]!.answer();
    reads.mode = 'answer';
    expect(await view.read(['c'])).toEqual(new Map([['c', load(0)]]));
    expect(reads.calls).toEqual([['a'], ['c']]);
  });

  it('the wait for a slot counts against the time-out of the round', async () => {
    const { clock, reads, view, t0 } = fixture({ maxConcurrentFetches: 1, fetchTimeoutMs: 1000 });
    reads.mode = 'hold';
    void view.read(['a']);
    const b = track(clock, view.read(['b']));
    await elapse(clock, 600);
    reads.held[0]!.answer();
    await flush();
    expect(reads.calls).toEqual([['a'], ['b']]); // b's read went out at +600 and hangs
    await elapse(clock, 399);
    expect(b.at).toBeUndefined();
    await elapse(clock, 1);
    expect(b.at).toBe(t0 + 1000); // not +1600
    expect(b.value).toEqual(new Map([['b', load(0)]]));
    expect(view.counters.fallbacks).toBe(1);
  });

  it('a hung fetch falls back at fetchTimeoutMs, keeps its slot until the store answers, and its late answer is not cached', async () => {
    const { clock, store, reads, local, view, t0 } = fixture({
      maxConcurrentFetches: 1,
      fetchTimeoutMs: 1000,
    });
    await take(store, 'a', 3);
    local.active.set('a', 1);
    reads.mode = 'hold';
    const first = track(clock, view.read(['a']));
    await elapse(clock, 1000);
    expect(first.at).toBe(t0 + 1000);
    expect(first.value).toEqual(new Map([['a', load(1)]]));

    // The hung call still holds the only slot: the next round waits for it, then falls back, with no store call.
    const second = track(clock, view.read(['a']));
    await elapse(clock, 1000);
    expect(second.at).toBe(t0 + 2000);
    expect(second.value).toEqual(new Map([['a', load(1)]]));
    expect(reads.calls).toEqual([['a']]);
    expect(view.counters).toMatchObject({ misses: 2, fetches: 1, fallbacks: 2 });

    reads.held[0]!.answer(); // too late for anyone
    await flush();
    expect(view.peek(['a'], false, true)).toBeUndefined();
    reads.mode = 'answer';
    expect(await view.read(['a'])).toEqual(new Map([['a', load(3)]]));
    expect(reads.calls).toEqual([['a'], ['a']]);
  });

  it('a failing fetch falls back at once and never throws; nothing is cached, so the next read fetches again', async () => {
    const { clock, reads, local, view, t0 } = fixture();
    await view.read(['a']);
    local.active.set('b', 4);
    reads.mode = 'fail';
    const read = track(clock, view.read(['a', 'b']));
    await flush();
    expect(read.at).toBe(t0);
    // a still comes from its snapshot; only b falls back
    expect(read.value).toEqual(
      new Map([
        ['a', load(0)],
        ['b', load(4)],
      ]),
    );
    expect(view.counters).toMatchObject({ misses: 2, fetches: 2, fallbacks: 1 });
    reads.mode = 'answer';
    expect(await view.read(['b'])).toEqual(new Map([['b', load(0)]]));
    // (a round also re-reads what was wanted lately: one command whatever the channel count)
    expect(reads.calls).toEqual([['a'], ['b', 'a'], ['b', 'a']]);
  });

  it('a store that throws at once (no promise) falls back and gives its fetch slot back', async () => {
    const { reads, local, view } = fixture({ maxConcurrentFetches: 1 });
    local.active.set('a', 2);
    reads.mode = 'throw';
    expect(await view.read(['a'])).toEqual(new Map([['a', load(2)]]));
    reads.mode = 'answer';
    // with the only fetch slot kept by the throw, this read would fall back again without reaching the store
    expect(await view.read(['a'])).toEqual(new Map([['a', load(0)]]));
    expect(reads.calls).toEqual([['a'], ['a']]);
  });

  it('an aborted caller gets its own rejection at once; the shared fetch completes for the others', async () => {
    const { clock, reads, view, t0 } = fixture();
    reads.mode = 'hold';
    const controller = new AbortController();
    const reason = new Error('the caller went away');
    const mine = track(clock, view.read(['a'], controller.signal));
    const theirs = track(clock, view.read(['a']));
    await flush();
    controller.abort(reason);
    await flush();
    expect(mine.at).toBe(t0);
    expect(mine.error).toBe(reason);
    expect(theirs.at).toBeUndefined();
    reads.held[0]!.answer();
    await flush();
    expect(theirs.value).toEqual(new Map([['a', load(0)]]));
    expect(view.peek(['a'])).toEqual(new Map([['a', load(0)]]));
    expect(reads.calls).toEqual([['a']]);

    // Already aborted: rejected, and the fetch it started still fills the cache.
    reads.mode = 'answer';
    await expect(view.read(['b'], AbortSignal.abort(reason))).rejects.toBe(reason);
    await flush();
    expect(view.peek(['b'])).toEqual(new Map([['b', load(0)]]));
    expect(view.counters.fallbacks).toBe(0);
  });
});

describe('local correction', () => {
  /** A view holding a fresh snapshot of channel `a`, on which another instance holds `foreign` slots. */
  async function snapshotOfA(foreign: number) {
    const f = fixture();
    await take(f.store, 'a', foreign);
    await f.view.read(['a']);
    return f;
  }
  /** The active count the view shows for `a` now: its snapshot plus this instance's corrections. */
  const shown = (view: LoadView) => view.peek(['a'], false, true)!.get('a')!.active;

  it('noteActive and noteWaiter adjust cached counts between fetches, never below zero', async () => {
    const { reads, view } = await snapshotOfA(1);
    view.noteActive('a', 1);
    view.noteWaiter('a', 1);
    expect(view.peek(['a'])).toEqual(new Map([['a', load(2, 1)]]));
    // unchanged corrections hand out the same object
    expect(view.peek(['a'])!.get('a')).toBe(view.peek(['a'])!.get('a'));
    view.noteActive('a', -1);
    view.noteActive('a', -1);
    view.noteActive('a', -1);
    view.noteWaiter('a', -1);
    view.noteWaiter('a', -1);
    expect(view.peek(['a'])).toEqual(new Map([['a', load(0, 0)]]));
    expect(reads.calls).toHaveLength(1);
  });

  it('reserve shows a slot as taken while a try is out, and never becomes part of a fetched base', async () => {
    const { clock, view } = await snapshotOfA(0);
    view.reserve('a', 1);
    view.reserve('a', 1);
    expect(shown(view)).toBe(2);
    await clock.advance(200);
    expect((await view.read(['a'])).get('a')!.active).toBe(2); // the fetch saw 0; both reservations still show
    view.reserve('a', -1);
    view.reserve('a', -1);
    expect(shown(view)).toBe(0);
    view.reserve('a', -1); // one too many is forgotten, not carried as a debt
    view.reserve('a', 1);
    expect(shown(view)).toBe(1);
  });

  it('noteFull shows the channel at max until the next fetch, never lowers it, and needs a snapshot', async () => {
    const { clock, view } = await snapshotOfA(1);
    view.noteActive('a', 1);
    view.noteFull('a', 4);
    expect(shown(view)).toBe(4);
    view.noteActive('a', -1); // a slot this instance gave back shows as free
    expect(shown(view)).toBe(3);
    view.noteFull('a', 2);
    expect(shown(view)).toBe(3);
    view.noteFull('x', 5);
    expect(view.peek(['x'], false, true)).toBeUndefined();
    await clock.advance(200);
    expect((await view.read(['a'])).get('a')!.active).toBe(1);
  });

  it('noteCooling and noteCooldownCleared change the cached snapshot until the next fetch', async () => {
    const { clock, view } = await snapshotOfA(1);
    view.noteCooling('a', 5000);
    expect(view.peek(['a'])).toEqual(new Map([['a', load(1, 0, 5000)]]));
    view.noteCooldownCleared('a');
    expect(view.peek(['a'])).toEqual(new Map([['a', load(1)]]));
    view.noteCooling('a', 5000);
    view.noteCooling('x', 1);
    expect(view.peek(['x'], false, true)).toBeUndefined();
    await clock.advance(200);
    expect(await view.read(['a'])).toEqual(new Map([['a', load(1)]])); // the store knows of no cooldown
  });
});

describe('peek', () => {
  it('answers only when every channel has a fresh snapshot, counts hits unless told not to, and never reads', async () => {
    const { clock, reads, view } = fixture();
    expect(view.peek([])).toBeUndefined();
    expect(view.peek(['a'])).toBeUndefined();
    await view.read(['a', 'b']);
    expect(view.peek(['a', 'b'])).toEqual(
      new Map([
        ['a', load(0)],
        ['b', load(0)],
      ]),
    );
    expect(view.counters.hits).toBe(1);
    expect(view.peek(['a'], false)).toEqual(new Map([['a', load(0)]]));
    expect(view.peek(['a', 'c'])).toBeUndefined();
    expect(view.counters.hits).toBe(1);

    await clock.advance(200);
    expect(view.peek(['a'])).toBeUndefined();
    expect(view.peek(['a'], false, true)).toEqual(new Map([['a', load(0)]])); // any age
    expect(view.peek(['a', 'c'], false, true)).toBeUndefined();
    expect(view.counters.hits).toBe(1);
    expect(view.peek(['a'], true, true)).toBeDefined();
    expect(view.counters.hits).toBe(2);
    expect(reads.calls).toEqual([['a', 'b']]);
  });
});

describe('readFresh', () => {
  it('bypasses the cache and stores the result, with a new fetch time', async () => {
    const { clock, store, reads, view } = fixture();
    await view.read(['a', 'b']);
    await take(store, 'a');
    await clock.advance(100);
    view.reserve('b', 1);
    expect(await view.readFresh(['a', 'b'])).toEqual(
      new Map([
        ['a', load(1)],
        ['b', load(1)], // corrected like any read
      ]),
    );
    expect(reads.calls).toEqual([
      ['a', 'b'],
      ['a', 'b'],
    ]);
    expect(view.counters).toMatchObject({ freshReads: 1, fetches: 2, misses: 1, hits: 0 });
    await clock.advance(199); // 299 ms after the first read, 199 after the fresh one
    expect((await view.read(['a'])).get('a')).toEqual(load(1));
    expect(reads.calls).toHaveLength(2);
    await clock.advance(1);
    await view.read(['a']);
    expect(reads.calls).toHaveLength(3);
  });

  it('coalesces per channel set: the same set in any order shares one read, another set reads apart', async () => {
    const { reads, view } = fixture();
    reads.mode = 'hold';
    const pending = [view.readFresh(['a', 'b']), view.readFresh(['b', 'a']), view.readFresh(['a'])];
    await flush();
    expect(reads.calls).toEqual([['a', 'b'], ['a']]);
    expect(view.counters.freshReads).toBe(2);
    for (const held of reads.held) held.answer();
    const [ab, ba, a] = await Promise.all(pending);
    expect(ab).toEqual(ba);
    expect(a).toEqual(new Map([['a', load(0)]]));
    // settled, the set is read again the next time
    reads.mode = 'answer';
    await view.readFresh(['b', 'a']);
    expect(reads.calls).toHaveLength(3);
  });

  it('returns null when the read fails (the caller keeps what it had), and an empty map for no ids', async () => {
    const { reads, view } = fixture();
    await view.read(['a']);
    reads.mode = 'fail';
    expect(await view.readFresh(['a'])).toBeNull();
    expect(view.peek(['a'])).toEqual(new Map([['a', load(0)]]));
    expect(await view.readFresh([])).toEqual(new Map());
    expect(reads.calls).toEqual([['a'], ['a']]);
    expect(view.counters.fallbacks).toBe(0);
  });
});

describe('load_cache_enabled = false (the rollback switch)', () => {
  it('reads the store on every call, without coalescing, and counts direct reads', async () => {
    const { store, reads, view, update } = fixture();
    await view.read(['a']);
    update({ load_cache_enabled: false });
    await take(store, 'a');
    expect(await view.read(['a'])).toEqual(new Map([['a', load(1)]])); // the warm cache is not used
    expect(await view.read(['a'])).toEqual(new Map([['a', load(1)]]));
    expect(view.peek(['a'], false, true)).toBeUndefined();
    reads.mode = 'hold';
    const both = [view.read(['a']), view.read(['a'])];
    await flush();
    for (const held of reads.held) held.answer();
    await Promise.all(both);
    expect(reads.calls).toEqual([['a'], ['a'], ['a'], ['a'], ['a']]);
    expect(view.counters).toMatchObject({ directReads: 4, fetches: 5, misses: 1, hits: 0, coalesced: 0 });
  });

  it('falls back when the store fails at once or hangs past fetchTimeoutMs', async () => {
    const { clock, reads, local, view, t0 } = fixture({
      settings: { load_cache_enabled: false },
      fetchTimeoutMs: 1000,
    });
    local.active.set('a', 2);
    reads.mode = 'fail';
    expect(await view.read(['a'])).toEqual(new Map([['a', load(2)]]));
    reads.mode = 'hold';
    const hung = track(clock, view.read(['a']));
    await elapse(clock, 999);
    expect(hung.at).toBeUndefined();
    await elapse(clock, 1);
    expect(hung.at).toBe(t0 + 1000);
    expect(hung.value).toEqual(new Map([['a', load(2)]]));
    expect(view.counters).toMatchObject({ directReads: 2, fallbacks: 2 });
  });
});
