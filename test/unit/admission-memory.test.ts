/**
 * The admission engine on MemoryStore: selection, tiers and the acquire budget, tickets, cooldowns, store failures and
 * candidate validation (waiting has its own file, admission-waiting.test.ts). A second engine on the same store plays
 * "another instance" (admission-fixture.ts). Every engine and store here runs on a ManualClock.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { NoChannelError } from '../../packages/slotgate/src/core/errors.js';
import { PURPOSES } from '../../packages/slotgate/src/store/store.js';
import { seededRandom as mulberry32, weightedPick } from '../../packages/slotgate/src/core/order.js';
import {
  capacityError,
  closeEngines,
  engine,
  hold,
  load,
  memory,
  setup,
  totalCommands,
} from './admission-fixture.js';
import { elapse, flush, track } from './manual-time.js';

afterEach(closeEngines);

describe('unlimited channels', () => {
  it('1,000 acquires and releases on an unlimited-only set issue zero store commands and pick only the highest tier, by weight', async () => {
    const m = memory();
    const { store } = m;
    const admission = engine(m, {}, { random: mulberry32(1) });
    const candidates: Candidate[] = [
      { id: 'top-3', priority: 10, weight: 3 },
      { id: 'top-1', priority: 10, weight: 1, maxConcurrency: 0 },
      { id: 'mid', priority: 5, weight: 1000 },
      { id: 'low' },
    ];
    // The same seed replayed over the top tier alone: the engine draws once per acquire, from that tier only.
    const replay = mulberry32(1);
    const topTier = candidates.slice(0, 2);
    const picks: Record<string, number> = {};
    for (let i = 0; i < 1000; i++) {
      const ticket = await admission.acquire({ candidates });
      expect(ticket.token).toBeUndefined();
      expect(ticket.channel.id).toBe(weightedPick(topTier, replay)!.id);
      picks[ticket.channel.id] = (picks[ticket.channel.id] ?? 0) + 1;
      await ticket.release();
    }
    expect(Object.keys(picks).sort()).toEqual(['top-1', 'top-3']);
    // A fixed seed: the share is one number, not a sample; 3:1 puts it near 0.75.
    expect(picks['top-3']! / 1000).toBeGreaterThan(0.7);
    expect(picks['top-3']! / 1000).toBeLessThan(0.8);
    expect(totalCommands(store)).toBe(0);
    const stats = admission.stats();
    expect(Object.values(stats.commands).every((n) => n === 0)).toBe(true);
    expect(stats.outcomes.acquired).toBe(1000);
    expect(stats.acquireCalls).toBe(0);
    expect(stats.loadView.misses + stats.loadView.hits + stats.loadView.fetches).toBe(0);
  });

  it('an unlimited channel in a set with bounded ones is admitted at once when it comes first', async () => {
    const { store, admission } = setup();
    const candidates: Candidate[] = [
      { id: 'free', priority: 1 },
      { id: 'bounded', priority: 0, maxConcurrency: 1 },
    ];
    const ticket = await admission.acquire({ candidates });
    expect(ticket.channel.id).toBe('free');
    expect(store.commands.acquire).toBe(0);
    await ticket.release();
    expect(store.commands.release).toBe(0);
  });
});

describe('candidate filtering', () => {
  it('respects exclude and enabled:false for unlimited and bounded channels', async () => {
    const { store, admission } = setup({}, { random: mulberry32(2) });
    const unlimited: Candidate[] = [
      { id: 'u-off', enabled: false, weight: 1000 },
      { id: 'u-tried', weight: 1000 },
      { id: 'u-ok', weight: 1 },
    ];
    for (let i = 0; i < 200; i++) {
      const t = await admission.acquire({ candidates: unlimited, exclude: new Set(['u-tried']) });
      expect(t.channel.id).toBe('u-ok');
      await t.release();
    }

    const bounded: Candidate[] = [
      { id: 'b-off', maxConcurrency: 5, enabled: false, priority: 9 },
      { id: 'b-tried', maxConcurrency: 5, priority: 9 },
      { id: 'b-ok', maxConcurrency: 5, priority: 0 },
    ];
    const held = [];
    for (let i = 0; i < 5; i++) {
      const t = await admission.acquire({ candidates: bounded, exclude: new Set(['b-tried']) });
      expect(t.channel.id).toBe('b-ok');
      held.push(t);
    }
    expect((await load(store, 'b-off')).active).toBe(0);
    expect((await load(store, 'b-tried')).active).toBe(0);
    expect((await load(store, 'b-ok')).active).toBe(5);
    for (const t of held) await t.release();
  });

  it('throws NoChannelError when nothing is left, with zero store commands', async () => {
    const { store, admission } = setup();
    const cases: Array<[Candidate[], Set<string> | undefined]> = [
      [[], undefined],
      [
        [
          { id: 'a', enabled: false },
          { id: 'b', maxConcurrency: 2, enabled: false },
        ],
        undefined,
      ],
      [[{ id: 'a' }, { id: 'b', maxConcurrency: 2 }], new Set(['a', 'b'])],
      [
        [
          { id: 'a', enabled: false },
          { id: 'b', maxConcurrency: 2 },
        ],
        new Set(['b']),
      ],
    ];
    for (const [candidates, exclude] of cases) {
      const err = await admission
        .acquire({ candidates, ...(exclude ? { exclude } : {}) })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NoChannelError);
      expect((err as NoChannelError).code).toBe('no_channel');
    }
    expect(admission.stats().outcomes.no_channel).toBe(4);
    expect(totalCommands(store)).toBe(0);
  });
});

describe('tiers and the acquire budget', () => {
  it('a full high tier falls through to a lower tier in the same pass, without waiting', async () => {
    const { store, admission, other } = setup();
    const a = { id: 'hi-a', maxConcurrency: 1, priority: 10 };
    const b = { id: 'hi-b', maxConcurrency: 1, priority: 10 };
    const c = { id: 'lo-c', maxConcurrency: 1, priority: 0 };
    const held = [...(await hold(other, a)), ...(await hold(other, b))];

    const ticket = await admission.acquire({ candidates: [c, a, b] });
    expect(ticket.channel.id).toBe('lo-c');
    expect(ticket.waitedMs).toBe(0);
    const stats = admission.stats();
    expect(stats.acquireAttempts).toBe(3); // hi-a, hi-b (full), then lo-c
    expect(stats.outcomes.acquired).toBe(1);
    expect(store.commands.wait).toBe(0);

    // and an unlimited channel in a lower tier is taken the same way
    const u = { id: 'lo-u', priority: -1 };
    const second = await admission.acquire({ candidates: [a, b, c, u] });
    expect(second.channel.id).toBe('lo-u');
    expect(admission.stats().acquireAttempts).toBe(3 + 3);

    await ticket.release();
    await second.release();
    for (const t of held) await t.release();
  });

  it('max_acquire_attempts is one budget shared by all tiers of a pass', async () => {
    const { store, admission, other } = setup({ wait_enabled: false, max_acquire_attempts: 2 });
    const t3 = { id: 'p3', maxConcurrency: 1, priority: 3 };
    const t2 = { id: 'p2', maxConcurrency: 1, priority: 2 };
    const t1 = { id: 'p1-free', maxConcurrency: 1, priority: 1 };
    const held = [...(await hold(other, t3)), ...(await hold(other, t2))];
    const candidates = [t1, t2, t3];

    // Budget 2: the two full tiers use it up; the free lowest tier is skipped in this pass.
    const err = await capacityError(admission.acquire({ candidates }));
    expect(err.reason).toBe('full');
    expect(admission.stats().acquireAttempts).toBe(2);
    expect((await load(store, 'p1-free')).active).toBe(0);

    // Budget 3 reaches it.
    admission.updateSettings({ max_acquire_attempts: 3 });
    const ticket = await admission.acquire({ candidates });
    expect(ticket.channel.id).toBe('p1-free');
    expect(admission.stats().acquireAttempts).toBe(2 + 3);

    await ticket.release();
    for (const t of held) await t.release();
  });

  it('budget exhaustion recovers through waiting: 4 full channels of max 1, budget 2, released after 50 ms', async () => {
    const { clock, store, admission, other } = setup(
      { max_acquire_attempts: 2, safety_poll_ms: 2000, wait_timeout_ms: 3000 },
      { random: () => 0 },
    );
    const channels = ['w1', 'w2', 'w3', 'w4'].map((id) => ({ id, maxConcurrency: 1 }));
    const held = [];
    for (const c of channels) held.push(...(await hold(other, c)));

    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: channels }));
    await elapse(clock, 49);
    expect(pending.at).toBeUndefined();
    expect(admission.stats().acquireAttempts).toBe(2); // the budget: two tried, two skipped, all four wait options
    // It queued on two of them (QUEUES_PER_WAITER), with one enqueue each and no poll yet (the first is at +500).
    const waiting: number[] = [];
    for (const c of channels) waiting.push((await load(store, c.id)).waiting);
    expect(waiting.reduce((a, b) => a + b)).toBe(2);
    expect(store.commands.wait).toBe(2);
    const queuedOn = channels.filter((_, i) => waiting[i] === 1);
    await elapse(clock, 1);
    for (const t of held) await t.release(); // w1, w2, w3, w4 in turn: the first of its queues released is granted
    await flush();
    expect(pending.at).toBe(t0 + 50);
    const ticket = pending.value!;
    expect(ticket.channel.id).toBe(queuedOn[0]!.id);
    expect(ticket.waitedMs).toBe(50);
    // Its other queue was left, the grant it got there given back: one lease in all, nobody waiting.
    const loads = await store.readLoads(channels.map((c) => c.id));
    expect([...loads.values()].map((l) => [l.active, l.waiting])).toEqual(
      channels.map((c) => [c.id === ticket.channel.id ? 1 : 0, 0]),
    );
    expect(store.commands.wait).toBe(3);
    await ticket.release();
  });
});

describe('tickets', () => {
  it('release() twice on a bounded ticket removes the lease once and never touches a later holder', async () => {
    const { store, admission, other } = setup();
    const channel = { id: 'twice', maxConcurrency: 1 };
    const ticket = await admission.acquire({ candidates: [channel] });
    expect(ticket.token).toMatch(new RegExp(`^${admission.instanceId}:\\d+$`));
    await Promise.all([ticket.release(), ticket.release()]);
    expect(store.commands.release).toBe(1);
    expect((await load(store, 'twice')).active).toBe(0);
    expect(admission.stats().liveLeases).toBe(0);

    const next = await other.acquire({ candidates: [channel] });
    await ticket.release();
    expect(store.commands.release).toBe(1);
    expect((await load(store, 'twice')).active).toBe(1);
    await next.release();
  });

  it('release() twice on an unlimited ticket counts it down once', async () => {
    const { store, admission } = setup();
    const u = { id: 'u' };
    const first = await admission.acquire({ candidates: [u] });
    const second = await admission.acquire({ candidates: [u] });
    expect(admission.stats().channels.u?.active).toBe(2);
    await first.release();
    await first.release();
    expect(admission.stats().channels.u?.active).toBe(1);
    expect((await admission.readLoads([u])).get('u')?.active).toBe(1);
    await second.release();
    expect(admission.stats().channels.u).toBeUndefined();
    expect(totalCommands(store)).toBe(0);
  });
});

describe('cooldowns', () => {
  it('cooldown() of an unlimited channel keeps it out of selection with zero store commands, until it ends', async () => {
    const m = memory();
    const { clock, store } = m;
    const admission = engine(m, {}, { random: mulberry32(4) });
    const hot = { id: 'hot', weight: 1000 };
    const cold = { id: 'cold', weight: 1 };
    const candidates = [hot, cold];

    await admission.cooldown(hot, { ms: 1000, reason: 'upstream 429' });
    for (let i = 0; i < 500; i++) {
      const t = await admission.acquire({ candidates });
      expect(t.channel.id).toBe('cold');
      await t.release();
    }
    // By id, once the engine has seen the channel as unlimited: still no store command.
    await admission.cooldown('cold', { ms: 5000 });
    const err = await capacityError(admission.acquire({ candidates }));
    expect(err.reason).toBe('full');
    expect(err.retryAfterMs).toBeGreaterThanOrEqual(1000);

    await clock.advance(1001); // hot's cooldown is over, cold's is not
    let hotPicks = 0;
    for (let i = 0; i < 100; i++) {
      const t = await admission.acquire({ candidates });
      if (t.channel.id === 'hot') hotPicks++;
      await t.release();
    }
    expect(hotPicks).toBe(100);

    await admission.clearCooldown(cold);
    const picks = new Set<string>();
    for (let i = 0; i < 5000; i++) {
      const t = await admission.acquire({ candidates });
      picks.add(t.channel.id);
      await t.release();
    }
    expect(picks).toEqual(new Set(['hot', 'cold']));
    expect(totalCommands(store)).toBe(0);
  });

  it('cooldown() of a bounded channel makes the acquire skip it, in this engine and in another one', async () => {
    const { store, admission, other } = setup({ load_cache_ttl_ms: 5000 }, { random: mulberry32(5) });
    const a = { id: 'a', maxConcurrency: 4, weight: 1000 };
    const b = { id: 'b', maxConcurrency: 4, weight: 1 };
    // Both engines have a cached snapshot of a as idle.
    for (const e of [admission, other]) await (await e.acquire({ candidates: [a] })).release();

    await admission.cooldown(a, { ms: 60_000, reason: 'upstream 429' });
    expect(store.commands.cooldown).toBe(1);
    expect((await store.readLoads(['a'])).get('a')!.coolingDown).toBe(true);
    for (const e of [admission, other]) {
      const before = e.stats().acquireAttempts;
      for (let i = 0; i < 20; i++) {
        const t = await e.acquire({ candidates: [a, b] });
        expect(t.channel.id).toBe('b');
        await t.release();
      }
      // This engine knows of the cooldown and never tries a; the other one learns it from at most one
      // "cooling" reply of the acquire script and skips a from then on.
      expect(e.stats().acquireAttempts - before).toBeLessThanOrEqual(e === admission ? 20 : 21);
    }
    expect((await load(store, 'a')).active).toBe(0);

    // A cooling channel is never a wait candidate: alone, it fails at once with reason full, without an acquire.
    const acquires = store.commands.acquire;
    const err = await capacityError(admission.acquire({ candidates: [a] }));
    expect(err.reason).toBe('full');
    expect(store.commands.wait).toBe(0);
    expect(store.commands.acquire).toBe(acquires);
  });

  it('cooldown_enabled = false makes cooldown() a no-op for bounded and unlimited channels', async () => {
    const { store, admission } = setup({ cooldown_enabled: false }, { random: mulberry32(6) });
    const bounded = { id: 'bd', maxConcurrency: 2 };
    const unlimited = { id: 'ul' };
    await admission.cooldown(bounded, { ms: 60_000 });
    await admission.cooldown(unlimited, { ms: 60_000 });
    await admission.cooldown('never-seen', { ms: 60_000 });
    expect(store.commands.cooldown).toBe(0);
    expect((await store.readLoads(['bd'])).get('bd')!.coolingDown).toBe(false);
    const t1 = await admission.acquire({ candidates: [bounded] });
    expect(t1.channel.id).toBe('bd');
    const t2 = await admission.acquire({ candidates: [unlimited] });
    expect(t2.channel.id).toBe('ul');
    expect((await admission.readLoads([unlimited])).get('ul')?.coolingDown).toBe(false);
    await t1.release();
    await t2.release();
  });

  it('turning cooldown_enabled off frees channels that are already cooling (the master switch)', async () => {
    const { admission } = setup({}, { random: mulberry32(7) });
    const bounded = { id: 'bc', maxConcurrency: 2 };
    const unlimited = { id: 'uc' };
    await admission.cooldown(bounded, { ms: 60_000 });
    await admission.cooldown(unlimited, { ms: 60_000 });
    expect((await capacityError(admission.acquire({ candidates: [bounded] }))).reason).toBe('full');
    expect((await capacityError(admission.acquire({ candidates: [unlimited] }))).reason).toBe('full');
    admission.updateSettings({ cooldown_enabled: false });
    const t1 = await admission.acquire({ candidates: [bounded] });
    const t2 = await admission.acquire({ candidates: [unlimited] });
    expect([t1.channel.id, t2.channel.id]).toEqual(['bc', 'uc']);
    await t1.release();
    await t2.release();
  });
});

describe('store failures with unlimited channels in the candidate set (I4)', () => {
  it('a failing bounded acquire in a higher tier still lets a lower-tier unlimited channel serve', async () => {
    const m = memory();
    const { store } = m;
    const admission = engine(m);
    store.acquireFirst = async () => {
      throw new (await import('../../packages/slotgate/src/core/errors.js')).StoreUnavailableError(
        'acquire',
        'down',
      );
    };
    const ticket = await admission.acquire({
      candidates: [
        { id: 'bounded', maxConcurrency: 2, priority: 10 },
        { id: 'free', priority: 0 },
      ],
    });
    expect(ticket.channel.id).toBe('free');
    await ticket.release();
    await expect(
      admission.acquire({ candidates: [{ id: 'bounded', maxConcurrency: 2 }] }),
    ).rejects.toMatchObject({
      code: 'admission_store_unavailable',
    });
  });
});

describe('candidate sets passed again', () => {
  it('a caller that changes its array or its channels in place is never served a stale candidate set', async () => {
    const admission = engine(memory());
    const a: Candidate = { id: 'a', maxConcurrency: 1, priority: 10 };
    const b: Candidate = { id: 'b', maxConcurrency: 1, priority: 0 };
    const set: Candidate[] = [a, b];
    const first = await admission.acquire({ candidates: set });
    expect(first.channel.id).toBe('a');
    await first.release();
    a.enabled = false; // disabled in place, same array
    const second = await admission.acquire({ candidates: set });
    expect(second.channel.id).toBe('b');
    await second.release();
    a.enabled = true;
    a.priority = -1; // demoted in place
    const third = await admission.acquire({ candidates: set });
    expect(third.channel.id).toBe('b');
    await third.release();
    set.splice(1, 1); // b removed from the same array
    const fourth = await admission.acquire({ candidates: set });
    expect(fourth.channel.id).toBe('a');
    await fourth.release();
    await expect(admission.acquire({ candidates: set, exclude: new Set(['a']) })).rejects.toBeInstanceOf(
      NoChannelError,
    );
  });
});

describe('candidate validation', () => {
  it('rejects a malformed candidate with the field, the expectation and the value, and changes nothing', async () => {
    const m = memory();
    const { store } = m;
    const admission = engine(m);
    const cases: [Candidate, RegExp][] = [
      [{ id: '' }, /`id` to be a non-empty string, got ""/],
      [{ id: 'a', maxConcurrency: 1.5 }, /`maxConcurrency of a` to be an integer .* got 1.5/],
      [{ id: 'a', maxConcurrency: 2, maxWaiting: 0 }, /`maxWaiting of a` to be an integer ≥ 1, got 0/],
      [{ id: 'a', priority: Number.NaN }, /`priority of a` to be a finite number, got null/],
      [{ id: 'a', weight: Number.POSITIVE_INFINITY }, /`weight of a` to be a finite number/],
    ];
    for (const [candidate, message] of cases) {
      await expect(admission.acquire({ candidates: [candidate] })).rejects.toThrow(message);
    }
    expect(PURPOSES.reduce((n, p) => n + store.commands[p], 0)).toBe(0);
    // ≤ 0 is unlimited (spec I2), a negative weight is a last resort
    const t = await admission.acquire({ candidates: [{ id: 'neg', maxConcurrency: -1, weight: -2 }] });
    expect(t.channel.id).toBe('neg');
    await t.release();
  });
});
