/**
 * Waiting requests follow the configuration in force (packages/slotgate/src/admission/waiting.ts, reconfigure): after
 * `admission.configChanged()` a waiter resolves its candidates again (`AcquireRequest.resolve`) before it claims any
 * grant. A lowered max applies to it in its place in the queue, a grant made under the old max is given back, a
 * disabled or removed channel's queue is left (the waiter moves to the channels still valid for it, or fails as a new
 * request would), and a ticket admitted while the configuration changed stands only under the new one. Without a call
 * to configChanged the next safety poll sees the change. Two engines on one MemoryStore and one ManualClock; a
 * `random` of 0 puts the safety polls at +1000, +2000, … (wait_interval_ms 40).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Ticket } from '../../packages/slotgate/src/admission/types.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { NoChannelError } from '../../packages/slotgate/src/core/errors.js';
import type { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import type { QueueListener } from '../../packages/slotgate/src/store/store.js';
import { closeEngines, engine, hold, holdReleases, load, memory, setup } from './admission-fixture.js';
import { elapse, flush, track } from './manual-time.js';

afterEach(closeEngines);

const zero = { random: () => 0 };
const LONG_WAIT = { wait_timeout_ms: 30_000, safety_poll_ms: 2000, max_waiting_per_channel: 10 };

/** A configuration that can be replaced, as a gateway's registry is on a reload: new objects each time. */
function config(...channels: Candidate[]) {
  let current = channels;
  return {
    resolve: () => current,
    get channels() {
      return current;
    },
    set(...next: Candidate[]) {
      current = next;
    },
  };
}

/** Puts a waiter of an instance with no engine in the channel's queue (behind whoever is there). */
function foreignWaiter(store: MemoryStore, channel: Candidate, n: number) {
  const waiter = { channelId: channel.id, token: `foreign:${n}`, max: channel.maxConcurrency! };
  return store.enqueue(waiter, { maxWaiting: 100, ttlMs: 60_000, leaseTtlMs: 60_000 });
}

describe('a lowered max reaches the waiters', () => {
  it('max 3 → 1: a waiter is granted only once nothing is in flight, in its place ahead of a later waiter', async () => {
    const { clock, store, admission, other } = setup(LONG_WAIT, zero);
    const cfg = config({ id: 'm', maxConcurrency: 3 });
    const held = await hold(other, cfg.channels[0]!, 3);
    const t0 = clock.now();
    const first = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    const second = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await flush();
    // arrived after both, on an instance that applies the same change
    expect(await foreignWaiter(store, { id: 'm', maxConcurrency: 1 }, 1)).toBe('queued');
    expect(await load(store, 'm')).toMatchObject({ active: 3, waiting: 3 });

    cfg.set({ id: 'm', maxConcurrency: 1 });
    admission.configChanged();
    await elapse(clock, 10);
    const waitCalls = store.commands.wait;
    await held[0]!.release(); // two in flight: under max 3 the first waiter would be granted now
    await held[1]!.release(); // one in flight: still not
    await elapse(clock, 10);
    expect([first.at, second.at]).toEqual([undefined, undefined]);
    expect(await load(store, 'm')).toMatchObject({ active: 1, waiting: 3 });
    await held[2]!.release(); // nothing in flight: the first waiter, and only it
    await flush();
    expect([first.at, first.value?.waitedMs, second.at]).toEqual([t0 + 20, 20, undefined]);
    expect(first.value!.channel).toBe(cfg.channels[0]); // the channel as the configuration in force has it
    expect(await load(store, 'm')).toMatchObject({ active: 1, waiting: 2 });
    await elapse(clock, 5);
    await first.value!.release();
    await flush();
    expect(second.at).toBe(t0 + 25); // ahead of the foreign waiter that came after it
    expect(await load(store, 'm')).toMatchObject({ active: 1, waiting: 1 });
    expect(store.commands.wait - waitCalls).toBe(0); // both grants claimed with no further queue call
    await second.value!.release();
  });

  it('a grant made under the old max and not claimed yet is given back; the waiter waits under the new max', async () => {
    const m = memory();
    const { clock, store } = m;
    const grants = loseGrants(store); // the first grant's message never arrives: it stays unclaimed
    const [admission, other] = [engine(m, LONG_WAIT, zero), engine(m, LONG_WAIT, zero)];
    const cfg = config({ id: 'g', maxConcurrency: 2 });
    const held = await hold(other, cfg.channels[0]!, 2);
    const t0 = clock.now();
    const waiter = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await elapse(clock, 10);
    await held[0]!.release(); // granted to the waiter under max 2: two in flight
    await flush();
    expect(await load(store, 'g')).toMatchObject({ active: 2, waiting: 0 });
    expect(grants.lost).toHaveLength(1);
    grants.losing = false;

    cfg.set({ id: 'g', maxConcurrency: 1 });
    admission.configChanged();
    await flush();
    expect(waiter.at).toBeUndefined();
    expect(await load(store, 'g')).toMatchObject({ active: 1, waiting: 1 });
    await elapse(clock, 10);
    await held[1]!.release(); // nothing in flight: now granted under max 1
    await flush();
    expect([waiter.at, waiter.value?.waitedMs]).toEqual([t0 + 20, 20]);
    expect(await load(store, 'g')).toMatchObject({ active: 1, waiting: 0 });
    await waiter.value!.release();
  });

  it('a raised max: the waiter is granted at once under the new max', async () => {
    const { clock, store, admission, other } = setup(LONG_WAIT, zero);
    const cfg = config({ id: 'r', maxConcurrency: 1 });
    const [holder] = await hold(other, cfg.channels[0]!);
    const t0 = clock.now();
    const waiter = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await elapse(clock, 10);
    cfg.set({ id: 'r', maxConcurrency: 2 });
    admission.configChanged();
    await flush();
    expect([waiter.at, waiter.value?.channel.maxConcurrency]).toEqual([t0 + 10, 2]);
    expect(await load(store, 'r')).toMatchObject({ active: 2, waiting: 0 });
    for (const t of [holder!, waiter.value!]) await t.release();
  });

  it('without configChanged, the next safety poll sees the change (here, candidates changed in place)', async () => {
    const { clock, store, admission, other } = setup(LONG_WAIT, zero);
    const channel = { id: 'p', maxConcurrency: 3 };
    const candidates = [channel];
    const held = await hold(other, channel, 3);
    const waiter = track(clock, admission.acquire({ candidates }));
    await elapse(clock, 10);
    channel.maxConcurrency = 1;
    await elapse(clock, 1000); // the safety poll at +1000 resolves the set again
    await held[0]!.release();
    await held[1]!.release();
    await elapse(clock, 10);
    expect(waiter.at).toBeUndefined();
    expect(await load(store, 'p')).toMatchObject({ active: 1, waiting: 1 });
    await held[2]!.release();
    await flush();
    expect(waiter.value?.channel).toBe(channel);
    await waiter.value!.release();
  });
});

describe('a set resolved again that did not change', () => {
  it('costs no store command: a resolver returning a new array each time, at configChanged and at a safety poll', async () => {
    const { clock, store, admission, other } = setup(LONG_WAIT, zero);
    const channels = [
      { id: 'u1', maxConcurrency: 1 },
      { id: 'u2', maxConcurrency: 1 },
      { id: 'u3', maxConcurrency: 1 },
    ];
    for (const c of channels) await hold(other, c);
    const waiter = track(clock, admission.acquire({ candidates: channels, resolve: () => [...channels] }));
    await flush();
    // (the load summary's reports of the waiters' own counts are not counted: they owe nothing to the resolver)
    const commands = () => ({ ...store.commands, load_read: 0 });
    const before = commands();
    admission.configChanged();
    await elapse(clock, 999);
    expect(commands()).toEqual(before);
    await elapse(clock, 1); // the safety poll: one pollWaiter per queue, nothing else
    expect(commands()).toEqual({ ...before, wait: before.wait + 2 });
    expect(waiter.at).toBeUndefined();
  });
});

describe('a disabled or removed channel reaches the waiters', () => {
  it('a waiter on two queues leaves the disabled one and keeps its place in the other; the freed slot goes to nobody', async () => {
    const { clock, store, admission, other } = setup(LONG_WAIT, zero);
    const cfg = config({ id: 'a', maxConcurrency: 1 }, { id: 'b', maxConcurrency: 1 });
    const [onA] = await hold(other, cfg.channels[0]!);
    const [onB] = await hold(other, cfg.channels[1]!);
    const t0 = clock.now();
    const waiter = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await flush();
    expect(admission.stats().channels).toMatchObject({ a: { waiting: 1 }, b: { waiting: 1 } });

    cfg.set({ id: 'a', maxConcurrency: 1, enabled: false }, { id: 'b', maxConcurrency: 1 });
    admission.configChanged();
    await flush();
    expect(admission.stats().channels.a).toBeUndefined();
    expect(await load(store, 'a')).toMatchObject({ active: 1, waiting: 0 });
    await elapse(clock, 10);
    await onA!.release();
    await flush();
    expect(waiter.at).toBeUndefined();
    expect(await load(store, 'a')).toMatchObject({ active: 0, waiting: 0 });
    await elapse(clock, 10);
    await onB!.release();
    await flush();
    expect([waiter.at, waiter.value?.channel.id, waiter.value?.waitedMs]).toEqual([t0 + 20, 'b', 20]);
    await waiter.value!.release();
  });

  it('a waiter none of whose queues is left takes up the new set in a new pass: a free channel admits it at once', async () => {
    const { clock, store, admission, other } = setup(LONG_WAIT, zero);
    const cfg = config({ id: 'old', maxConcurrency: 1 });
    const [holder] = await hold(other, cfg.channels[0]!);
    const t0 = clock.now();
    const waiter = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await elapse(clock, 30);
    cfg.set({ id: 'new', maxConcurrency: 1 }); // old removed
    admission.configChanged();
    await flush();
    expect([waiter.at, waiter.value?.channel.id, waiter.value?.waitedMs]).toEqual([t0 + 30, 'new', 30]);
    expect(await load(store, 'old')).toMatchObject({ active: 1, waiting: 0 });
    expect(admission.stats().outcomes.acquired).toBe(1);
    await waiter.value!.release();
    await holder!.release();
  });

  it('a waiter that moves to a full channel waits there under the same deadline', async () => {
    const { clock, admission, other } = setup({ ...LONG_WAIT, wait_timeout_ms: 1000 }, zero);
    const cfg = config({ id: 'x', maxConcurrency: 1 });
    await hold(other, cfg.channels[0]!);
    await hold(other, { id: 'y', maxConcurrency: 1 });
    const t0 = clock.now();
    const waiter = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await elapse(clock, 600);
    cfg.set({ id: 'y', maxConcurrency: 1 });
    admission.configChanged();
    await elapse(clock, 399);
    expect(waiter.at).toBeUndefined();
    expect(admission.stats().channels.y?.waiting).toBe(1);
    await elapse(clock, 1);
    expect(waiter.at).toBe(t0 + 1000);
    expect((waiter.error as { reason?: string }).reason).toBe('wait_timeout');
  });

  it('a waiter that left one of its two queues joins another channel still valid for it, and is served there', async () => {
    const { clock, store, admission, other } = setup(LONG_WAIT, zero);
    const ids = ['a', 'b', 'c'];
    const cfg = config(...ids.map((id) => ({ id, maxConcurrency: 1 })));
    const holders = new Map<string, Ticket<Candidate>>();
    for (const c of cfg.channels) holders.set(c.id, (await hold(other, c))[0]!);
    const t0 = clock.now();
    const waiter = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await flush();
    const joined = Object.keys(admission.stats().channels).sort();
    expect(joined).toHaveLength(2);
    const [gone, kept] = joined as [string, string];
    const spare = ids.find((id) => !joined.includes(id))!;

    cfg.set(...ids.map((id) => ({ id, maxConcurrency: 1, enabled: id !== gone })));
    admission.configChanged();
    await flush();
    expect(Object.keys(admission.stats().channels).sort()).toEqual([kept, spare].sort());
    expect(await load(store, gone)).toMatchObject({ waiting: 0 });
    await elapse(clock, 10);
    await holders.get(spare)!.release();
    await flush();
    expect([waiter.at, waiter.value?.channel.id]).toEqual([t0 + 10, spare]);
    await waiter.value!.release();
  });

  it('a channel added by the change with a free slot takes the waiter at once; one added full does not move it', async () => {
    const { clock, store, admission, other } = setup(LONG_WAIT, zero);
    const cfg = config({ id: 'old', maxConcurrency: 1 });
    await hold(other, cfg.channels[0]!);
    await hold(other, { id: 'busy', maxConcurrency: 1 });
    const t0 = clock.now();
    const waiter = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await elapse(clock, 10);
    cfg.set({ id: 'old', maxConcurrency: 1 }, { id: 'busy', maxConcurrency: 1 });
    admission.configChanged();
    await flush();
    expect(waiter.at).toBeUndefined();
    expect(admission.stats().channels).toEqual({ old: { active: 0, waiting: 1 } }); // still in its own queue
    await elapse(clock, 10);
    cfg.set(
      { id: 'old', maxConcurrency: 1 },
      { id: 'busy', maxConcurrency: 1 },
      { id: 'new', maxConcurrency: 2 },
    );
    admission.configChanged();
    await flush();
    expect([waiter.at, waiter.value?.channel.id, waiter.value?.waitedMs]).toEqual([t0 + 20, 'new', 20]);
    expect(await load(store, 'old')).toMatchObject({ active: 1, waiting: 0 });
    await waiter.value!.release();
  });

  it.each(['disabled', 'removed'] as const)(
    'the only channel %s: its waiters fail with NoChannelError at once, as a new request would',
    async (change) => {
      const { clock, store, admission, other } = setup(LONG_WAIT, zero);
      const cfg = config({ id: 'only', maxConcurrency: 1 });
      const [holder] = await hold(other, cfg.channels[0]!);
      const t0 = clock.now();
      const waiters = [0, 1].map(() =>
        track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve })),
      );
      await elapse(clock, 10);
      cfg.set(...(change === 'disabled' ? [{ id: 'only', maxConcurrency: 1, enabled: false }] : []));
      admission.configChanged();
      await flush();
      for (const w of waiters) {
        expect(w.at).toBe(t0 + 10);
        expect(w.error).toBeInstanceOf(NoChannelError);
        expect((w.error as Error).message).toMatch(/configuration changed while the request waited/);
      }
      expect(admission.stats().outcomes.no_channel).toBe(2);
      expect(await load(store, 'only')).toMatchObject({ active: 1, waiting: 0 });
      await holder!.release();
      await flush();
      expect(await load(store, 'only')).toMatchObject({ active: 0, waiting: 0 });
    },
  );

  it('an unlimited channel added by the change takes the waiter at once', async () => {
    const { clock, admission, other } = setup(LONG_WAIT, zero);
    const cfg = config({ id: 'busy', maxConcurrency: 1 });
    await hold(other, cfg.channels[0]!);
    const waiter = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await elapse(clock, 10);
    cfg.set({ id: 'busy', maxConcurrency: 1 }, { id: 'spare', maxConcurrency: 0 });
    admission.configChanged();
    await flush();
    expect([waiter.value?.channel.id, waiter.value?.token]).toEqual(['spare', undefined]);
  });
});

describe('handoff after a lowered max', () => {
  it('a slot released in the turn a new request asks is not handed to it past the new max: it waits', async () => {
    const m = memory();
    const { clock, store } = m;
    holdReleases(store);
    const admission = engine(m, LONG_WAIT, zero);
    const cfg = config({ id: 'h', maxConcurrency: 3 });
    const held = await hold(admission, cfg.channels[0]!, 3);
    cfg.set({ id: 'h', maxConcurrency: 1 });
    admission.configChanged();
    const t0 = clock.now();
    await held[0]!.release(); // parked until the end of the turn
    const next = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await flush();
    expect(admission.stats().handoffs).toBe(0);
    expect(next.at).toBeUndefined();
    expect(await load(store, 'h')).toMatchObject({ active: 2, waiting: 1 });
    await elapse(clock, 10);
    await held[1]!.release();
    await flush();
    expect(next.at).toBeUndefined();
    await held[2]!.release();
    await flush();
    expect([next.at, next.value?.waitedMs]).toEqual([t0 + 10, 10]);
    await next.value!.release();
  });
});

describe('a ticket admitted while the configuration changed', () => {
  it('is given back when its channel now has a lower max, and the request waits under the new one', async () => {
    const { clock, store, admission, other } = setup(LONG_WAIT, zero);
    const cfg = config({ id: 'race', maxConcurrency: 3 });
    const held = await hold(other, cfg.channels[0]!, 2);
    // the reload lands while the pass's acquire is on its way
    const acquireFirst = store.acquireFirst.bind(store);
    store.acquireFirst = async (targets, opts) => {
      const replies = await acquireFirst(targets, opts);
      cfg.set({ id: 'race', maxConcurrency: 1 });
      admission.configChanged();
      store.acquireFirst = acquireFirst;
      return replies;
    };
    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await flush();
    expect(pending.at).toBeUndefined();
    expect(await load(store, 'race')).toMatchObject({ active: 2, waiting: 1 });
    await elapse(clock, 10);
    for (const t of held) await t.release();
    await flush();
    expect([pending.at, pending.value?.waitedMs, pending.value?.channel.maxConcurrency]).toEqual([
      t0 + 10,
      10,
      1,
    ]);
    await pending.value!.release();
  });

  it('stands when its channel is still there under a max no lower, and carries the channel as now configured', async () => {
    const { clock, store, admission } = setup(LONG_WAIT, zero);
    const cfg = config({ id: 'keep', maxConcurrency: 2 });
    const acquireFirst = store.acquireFirst.bind(store);
    store.acquireFirst = async (targets, opts) => {
      const replies = await acquireFirst(targets, opts);
      cfg.set({ id: 'keep', maxConcurrency: 2, weight: 5 });
      admission.configChanged();
      return replies;
    };
    const pending = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
    await flush();
    expect(pending.value?.channel).toBe(cfg.channels[0]);
    expect(await load(store, 'keep')).toMatchObject({ active: 1, waiting: 0 });
    await pending.value!.release();
  });
});

/** A store whose grant messages are lost while `losing` is set (the grants stay unclaimed); `lost` lists them. */
function loseGrants(store: MemoryStore) {
  const listen = store.listen.bind(store);
  const control = { losing: true, lost: [] as [string, string][] };
  store.listen = (id, listener: QueueListener) =>
    listen(id, {
      grant: (grant) => {
        if (control.losing) control.lost.push([grant.channelId, grant.token]);
        else listener.grant(grant);
      },
      queued: (c) => listener.queued(c),
      resync: () => listener.resync(),
    });
  return control;
}

describe('two changes in a row', () => {
  // The second change can come while the waiter is between its check of the configuration and its nap (in the
  // awaits of following the first): its wake-up then finds no nap to cut short. Found by the model tests (max 2 → 1
  // → 2, then a release: the waiter stayed under max 1 until its next safety poll). Every gap in microtasks is tried.
  it('max 2 → 1 → 2: the waiter follows both, and a release grants it at once', async () => {
    for (let gap = 0; gap <= 30; gap++) {
      const { clock, store, admission } = setup({ ...LONG_WAIT, safety_poll_ms: 20_000 }, zero);
      const cfg = config({ id: 'm', maxConcurrency: 2 });
      const held = await hold(admission, cfg.channels[0]!, 2);
      const waiter = track(clock, admission.acquire({ candidates: cfg.channels, resolve: cfg.resolve }));
      await flush();
      cfg.set({ id: 'm', maxConcurrency: 1 });
      admission.configChanged();
      for (let i = 0; i < gap; i++) await Promise.resolve();
      cfg.set({ id: 'm', maxConcurrency: 2 });
      admission.configChanged();
      await elapse(clock, 10);
      await held[0]!.release();
      await elapse(clock, 10);
      expect(waiter.at, `gap ${gap}: ${JSON.stringify(await load(store, 'm'))}`).toBeDefined();
      await closeEngines();
    }
  });
});
