/**
 * The admission engine on a real Redis, with every command counted by a wrapper around the client.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { createAdmission, type AdmissionEngine } from '../../packages/slotgate/src/admission/admission.js';
import type { Admission, Ticket } from '../../packages/slotgate/src/admission/types.js';
import { LoadView } from '../../packages/slotgate/src/admission/loads/load-view.js';
import { systemClock } from '../../packages/slotgate/src/core/clock.js';
import { CapacityError, StoreUnavailableError } from '../../packages/slotgate/src/core/errors.js';
import { admissionSettings } from '../../packages/slotgate/src/core/settings.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { ChannelLoad, LoadExchange, SlotStore } from '../../packages/slotgate/src/store/store.js';
import { countingClient, redisUrl, uniquePrefix, type CountingClient } from '../helpers/redis.js';
import { RedisServer } from '../helpers/redis-server.js';
import { useCleanups } from '../helpers/cleanups.js';
import { answered, until } from '../helpers/until.js';

/** What a load read sends: a summary exchange (a GET of the snapshot, a script call, an HSET, a TIME). */
const LOAD_READ_COMMANDS = ['time', 'get', 'hset', 'pexpire'];
const bounded = (n: number, max: number, prefix = 'ch'): Candidate[] =>
  Array.from({ length: n }, (_, i) => ({ id: `${prefix}${i}`, maxConcurrency: max }));

describe('admission on Redis', () => {
  let counter: CountingClient;
  let prefix: string;
  let store: RedisStore;
  let admission: AdmissionEngine;
  const loadReads = () => store.commands.load_read;
  const others = useCleanups();

  /** One instance on a counting client. */
  async function setup(settings: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) {
    counter = await countingClient();
    prefix = uniquePrefix('adm');
    store = new RedisStore({ client: counter.client, prefix });
    admission = createAdmission({
      store,
      settings,
      ...extra,
    }) as AdmissionEngine;
    await store.ready(); // the epoch check of a new connection, not counted below
    counter.reset();
  }

  /** Another gateway instance on the same Redis and prefix: its own client, store and admission engine. */
  function otherInstance(settings: Record<string, unknown> = {}, instanceId?: string): Admission {
    const otherStore = new RedisStore({ url: redisUrl(), prefix });
    const other = createAdmission({
      store: otherStore,
      settings,
      ...(instanceId ? { instanceId } : {}),
    });
    others.push(() => otherStore.close());
    others.push(() => other.close());
    return other;
  }

  afterEach(async () => {
    await admission?.close();
    const keys = await counter.client.keys(store.keys.pattern());
    if (keys.length) await counter.client.del(...keys);
    await counter.close();
  });

  it('a cached snapshot serves later passes with zero load-read commands (item 1)', async () => {
    // (no handoff: each pass here releases and acquires again in the same turn, and should reach the store)
    await setup({ load_cache_ttl_ms: 5000, slot_handoff_enabled: false });
    const candidates = bounded(3, 4);
    const first = await admission.acquire({ candidates });
    await first.release();
    const afterFirst = loadReads();
    const commands = { ...store.commands };
    for (let i = 0; i < 5; i++) await (await admission.acquire({ candidates })).release();
    expect(loadReads() - afterFirst).toBe(0);
    expect(admission.stats().loadView.hits).toBe(5);
    // each pass still decides ownership live: one acquire script and one release script per pass
    expect(store.commands.acquire - commands.acquire).toBe(5);
    expect(store.commands.release - commands.release).toBe(5);
  });

  it("passes that waited for the same fetch see each other's reservations: no pass tries a channel already taken", async () => {
    await setup({ load_cache_ttl_ms: 5000 });
    const candidates = bounded(4, 2);
    // a cold cache: all eight passes wait for one fetch, then resume one after another
    const tickets = await Promise.all(Array.from({ length: 8 }, () => admission.acquire({ candidates })));
    const perChannel = new Map<string, number>();
    for (const t of tickets) perChannel.set(t.channel.id, (perChannel.get(t.channel.id) ?? 0) + 1);
    expect([...perChannel.values()]).toEqual([2, 2, 2, 2]);
    // every pass found room on the first channel it tried: eight attempts, no full reply
    expect(admission.stats().acquireAttempts).toBe(8);
    expect(admission.stats().loadView.fetches).toBe(1);
    for (const t of tickets) await t.release();
  });

  it('reading a channel set whose channels are cached costs nothing, whatever set they come in (item 1)', async () => {
    await setup({ load_cache_ttl_ms: 5000 });
    const view = admission.loadView;
    await view.read(['a', 'b', 'c', 'd']);
    counter.reset();
    for (const ids of [['a'], ['b', 'c'], ['d', 'a'], ['c', 'b', 'a'], ['a', 'b', 'c', 'd']])
      await view.read(ids);
    expect(counter.sent).toEqual([]);
    // a new channel: one round, one command (the summary's shared snapshot), whatever the channel count
    await view.read(['a', 'e']);
    expect(counter.sent).toHaveLength(1); // a GET of the shared snapshot, or the script call that builds it
    expect(view.counters.fetches).toBe(2);
  });

  it('load_cache_enabled = false reads Redis on every selection (item 2)', async () => {
    await setup({ load_cache_enabled: false });
    const candidates = bounded(2, 4);
    for (let i = 0; i < 5; i++) await (await admission.acquire({ candidates })).release();
    // one read-only script call per selection, over the channels' own keys
    expect(loadReads()).toBe(5);
    expect(admission.stats().loadView.directReads).toBe(5);
    // switching back on at run time uses the cache again: one round for 3 selections
    admission.updateSettings({ load_cache_enabled: true, load_cache_ttl_ms: 5000 });
    const fetches = admission.stats().loadView.fetches;
    for (let i = 0; i < 3; i++) await (await admission.acquire({ candidates })).release();
    expect(admission.stats().loadView.fetches - fetches).toBe(1);
    expect(admission.stats().loadView.directReads).toBe(5);
  });

  it('16 concurrent misses for one candidate set coalesce into one fetch (item 3)', async () => {
    await setup({ load_cache_ttl_ms: 5000 });
    const ids = bounded(10, 4).map((c) => c.id);
    const results = await Promise.all(Array.from({ length: 16 }, () => admission.loadView.read(ids)));
    expect(admission.stats().loadView.fetches).toBe(1);
    expect(results.every((r) => r.size === 10)).toBe(true);
    const lv = admission.stats().loadView;
    expect(lv.misses).toBe(1);
    expect(lv.coalesced).toBe(15);
  });

  it('125 bounded channels are read directly in batches of at most 50 and all take part in selection (item 4, I3)', async () => {
    await setup({ load_cache_enabled: false });
    const candidates = bounded(125, 1);
    // fill all but the last channel
    for (const c of candidates.slice(0, 124)) {
      expect(
        await store.acquireFirst([{ channelId: c.id, max: 1 }], {
          token: `pre:${c.id}`,
          leaseTtlMs: 60_000,
          checkCooldown: true,
        }),
      ).toEqual(['acquired']);
    }
    counter.reset();
    const ticket = await admission.acquire({ candidates });
    expect(ticket.channel.id).toBe('ch124');
    // three read-only script calls of 50, 50 and 25 channels, then one acquire call
    expect(counter.count('evalsha')).toBe(4);
    expect(loadReads()).toBe(3);
    // the free channel sorted first by load: one acquire call, one channel tried
    expect(admission.stats().acquireAttempts).toBe(1);
    await ticket.release();
  });

  it("a cooling channel's acquire is rejected in one script call, no separate EXISTS (item 5)", async () => {
    await setup({ load_cache_ttl_ms: 5000 });
    const candidates = bounded(1, 2);
    await (await admission.acquire({ candidates })).release(); // warm cache: not cooling
    const other = new RedisStore({ url: redisUrl(), prefix: store.keys.base.split(':')[0]! });
    await other.setCooldown('ch0', 30_000, 'another instance saw a 429');
    await other.close();
    counter.reset();
    const err = await admission.acquire({ candidates }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CapacityError);
    expect(counter.count('evalsha')).toBe(1);
    expect(counter.count('exists')).toBe(0);
    // the fresh re-read after the cached view turned the tier to all-cooling is the only other traffic
    expect(counter.sent.filter((c) => c !== 'evalsha' && !LOAD_READ_COMMANDS.includes(c))).toEqual([]);
  });

  it('20 concurrent waiters with max waiting 3: exactly 3 wait, 17 get queue_full at once (item 6, I6)', async () => {
    await setup({ max_waiting_per_channel: 3, wait_timeout_ms: 2000, safety_poll_ms: 2500 });
    const candidates = bounded(1, 1);
    const holder = await admission.acquire({ candidates });
    const attempts = Array.from({ length: 20 }, () =>
      admission.acquire({ candidates }).then(
        (t) => t,
        (e: unknown) => e,
      ),
    );
    // the queue's guard is in Redis: it never shows more than 3, and shows 3 once the registrations are in
    await expect.poll(async () => (await store.readLoads(['ch0'])).get('ch0')!.waiting).toBe(3);
    await holder.release();
    const results = await Promise.all(attempts);
    const reasons = results.map((r) => (r instanceof CapacityError ? r.reason : 'ticket'));
    expect(reasons.filter((r) => r === 'queue_full')).toHaveLength(17);
    expect(reasons.filter((r) => r === 'ticket').length).toBeGreaterThanOrEqual(1);
    for (const r of results)
      if (!(r instanceof CapacityError)) await (r as { release(): Promise<void> }).release();
    await expect
      .poll(async () => (await store.readLoads(['ch0'])).get('ch0'))
      .toMatchObject({ active: 0, waiting: 0 });
  });

  it('budget exhaustion recovers through waiting (item 7)', async () => {
    // A safety poll far away (wait_interval_ms × 20, at most 5 s): the grant made by a release is what serves it.
    await setup({ max_acquire_attempts: 2, safety_poll_ms: 10_000, wait_timeout_ms: 10_000 });
    const candidates = bounded(4, 1);
    const holders = await Promise.all(candidates.map(() => admission.acquire({ candidates })));
    expect(new Set(holders.map((t) => t.channel.id)).size).toBe(4);
    const before = { ...admission.stats() };
    const pass = admission.acquire({ candidates });
    const queued = () => Object.values(admission.stats().channels).reduce((n, c) => n + c.waiting, 0);
    // one waiter, in the queues of two of the full channels
    await expect.poll(queued).toBe(2);
    // Before it waited the pass tried exactly its budget, 2 of the 4 channels, both in one script call (the view
    // shows every channel full, so one batch carries the whole budget); the other 2 went to the wait pool untried.
    expect(admission.stats().acquireAttempts - before.acquireAttempts).toBe(2);
    expect(admission.stats().acquireCalls - before.acquireCalls).toBe(1);
    await Promise.all(holders.map((t) => t.release()));
    const ticket = await pass;
    expect(ticket.waitedMs).toBeGreaterThan(0);
    // a release gave it a slot of one of its queues (a grant, claimed): no further attempt, no handoff
    expect(admission.stats().acquireAttempts - before.acquireAttempts).toBe(2);
    expect(admission.stats().grants).toBe(1);
    expect(admission.stats().handoffs).toBe(0);
    expect(admission.stats().outcomes.acquired).toBe(5);
    await ticket.release();
  });

  it('a pass whose cached snapshot shows the whole tier cooling re-reads it fresh (item 9)', async () => {
    await setup({ load_cache_ttl_ms: 5000, wait_enabled: false });
    const candidates = bounded(2, 2);
    await admission.cooldown(candidates[0]!, { ms: 30_000 });
    await admission.cooldown(candidates[1]!, { ms: 30_000 });
    await expect(admission.acquire({ candidates })).rejects.toBeInstanceOf(CapacityError);
    // another instance clears the cooldown; this instance's snapshot still says cooling
    const other = new RedisStore({ url: redisUrl(), prefix: store.keys.base.split(':')[0]! });
    await other.clearCooldown('ch0');
    await other.close();
    const fresh = admission.stats().loadView.freshReads;
    const ticket = await admission.acquire({ candidates });
    expect(ticket.channel.id).toBe('ch0');
    expect(admission.stats().loadView.freshReads).toBe(fresh + 1);
    await ticket.release();
  });

  it('16 concurrent fresh reads of one set make at most 3 fetches (item 11)', async () => {
    await setup();
    const ids = bounded(5, 2).map((c) => c.id);
    const results = await Promise.all(Array.from({ length: 16 }, () => admission.loadView.readFresh(ids)));
    expect(counter.count('time')).toBeLessThanOrEqual(3);
    expect(counter.count('time')).toBeGreaterThanOrEqual(1);
    expect(results.every((r) => r?.size === 5)).toBe(true);
    // stored back: a cached read now costs nothing
    counter.reset();
    await admission.loadView.read(ids);
    expect(counter.sent).toEqual([]);
  });

  it('unlimited channels cost zero Redis commands for acquire and for loads (item 12, I2)', async () => {
    await setup();
    const unlimited: Candidate[] = [
      { id: 'u1', maxConcurrency: 0, weight: 2 },
      { id: 'u2', weight: 1 },
      { id: 'low', maxConcurrency: 0, priority: -1 },
    ];
    for (let i = 0; i < 1000; i++) await (await admission.acquire({ candidates: unlimited })).release();
    expect(counter.sent).toEqual([]);
    // in a mixed set only the bounded channel is read (one summary round) and acquired
    const mixed: Candidate[] = [...unlimited, { id: 'b', maxConcurrency: 1, priority: 5 }];
    await (await admission.acquire({ candidates: mixed })).release();
    expect(admission.stats().loadView.fetches).toBe(1);
    expect(store.commands.acquire).toBeGreaterThanOrEqual(1);
  });

  it('abort while waiting removes the waiter registration and never leaves a lease', async () => {
    await setup({ wait_timeout_ms: 5000, safety_poll_ms: 2500 });
    const candidates = bounded(1, 1);
    const holder = await admission.acquire({ candidates });
    const ac = new AbortController();
    const waiting = admission.acquire({ candidates, signal: ac.signal }).catch((e: unknown) => e);
    await expect.poll(async () => (await store.readLoads(['ch0'])).get('ch0')!.waiting).toBe(1);
    ac.abort();
    const err = await waiting;
    expect(err).toBeInstanceOf(CapacityError);
    expect((err as CapacityError).reason).toBe('aborted');
    // the registration's removal is sent without waiting for it
    await expect
      .poll(async () => (await store.readLoads(['ch0'])).get('ch0'))
      .toMatchObject({ active: 1, waiting: 0 });
    await holder.release();
    expect((await store.readLoads(['ch0'])).get('ch0')).toMatchObject({ active: 0, waiting: 0 });
  });

  it('with waiting off, a channel marked queued is still asked: a queue that drained unseen does not turn requests away', async () => {
    await setup({ wait_enabled: false });
    const [channel] = bounded(1, 1, 'drained');
    const other = otherInstance({ wait_timeout_ms: 5000 });
    const held = await other.acquire({ candidates: [channel!] });
    const waiting = other.acquire({ candidates: [channel!] });
    await expect.poll(async () => (await store.readLoads([channel!.id])).get(channel!.id)!.waiting).toBe(1);
    // this instance learns of the queue (its acquire answers `queued`) and turns the request away: it cannot wait
    await expect(admission.acquire({ candidates: [channel!] })).rejects.toMatchObject({ reason: 'full' });
    expect(store.queued(channel!.id)).toBe(true);
    // the queue drains on the other instance, which this one does not hear of
    await held.release();
    await (await waiting).release();
    await expect
      .poll(async () => (await store.readLoads([channel!.id])).get(channel!.id))
      .toMatchObject({ active: 0, waiting: 0 });
    expect(store.queued(channel!.id)).toBe(true);
    // the acquire is sent all the same, takes the free slot, and its reply clears the mark
    const ticket = await admission.acquire({ candidates: [channel!] });
    expect(ticket.channel.id).toBe(channel!.id);
    expect(store.queued(channel!.id)).toBe(false);
    await ticket.release();
  });

  it('stats count the same commands the client sent', async () => {
    await setup({ safety_poll_ms: 2000, wait_timeout_ms: 200 });
    const base = { ...admission.stats().commands }; // the epoch check, sent before the counter was reset
    const candidates = bounded(3, 1);
    const tickets = [];
    for (let i = 0; i < 3; i++) tickets.push(await admission.acquire({ candidates }));
    // every channel is held: the fourth pass waits on one of them and gives up after wait_timeout_ms
    await expect(admission.acquire({ candidates })).rejects.toMatchObject({
      code: 'channel_capacity_exhausted',
      reason: 'wait_timeout',
    });
    await admission.cooldown(candidates[0]!, { ms: 1000 });
    // given back through the store (confirmed), so every command has been sent when the counts are compared
    for (const t of tickets) await t.release({ handoff: false });
    const now = admission.stats().commands;
    const c = Object.fromEntries(
      Object.entries(now).map(([k, v]) => [k, v - base[k as keyof typeof base]]),
    ) as typeof now;
    const total = Object.values(c).reduce((a, b) => a + b, 0);
    expect(c.release).toBe(3);
    expect(total).toBe(counter.sent.length);
    // the cooldown key and its end noted in the load summary; everything else is a script call, a summary read or a
    // leave (the ZREM of a member still queued)
    expect(c.cooldown).toBe(counter.count('set') + counter.count('hset') + counter.count('pexpire'));
    expect(c.acquire + c.wait + c.release + c.renew + c.load_read).toBe(
      counter.count('evalsha') +
        counter.count('eval') +
        counter.count('get') +
        counter.count('time') +
        counter.count('zrem'),
    );
    expect(counter.count('zrem')).toBe(2);
    expect(c.acquire).toBeGreaterThanOrEqual(4);
    // the waiter: two queues joined in one call (a single node coalesces the registrations sent together), two left
    // (its safety poll is 1 s away, past its 200 ms deadline)
    expect(c.wait).toBe(3);
  });

  describe('the load summary', () => {
    const summaryOn = {};
    /** What the summary holds of a channel (active, waiting), as an exchange reads it. */
    async function summaryOf(id: string): Promise<[number, number]> {
      // each instance's field: [version, lapse time, channel, packed count, …]
      let n = 0;
      for (const field of await counter.client.hvals(store.keys.loadCounts())) {
        const c = JSON.parse(field) as (string | number)[];
        for (let i = 2; i + 1 < c.length; i += 2) if (c[i] === id) n += Number(c[i + 1]);
      }
      return [n % 2 ** 26, Math.floor(n / 2 ** 26)];
    }

    it('a pass reads all of its 125 candidates with one command, and tries the free one first', async () => {
      await setup({ ...summaryOn, load_cache_ttl_ms: 5000 });
      const candidates = bounded(125, 1);
      // another instance holds all but the last channel; it reports within its TTL
      const other = otherInstance({ ...summaryOn, load_cache_ttl_ms: 20 });
      const held = [];
      for (const c of candidates.slice(0, 124)) held.push(await other.acquire({ candidates: [c] }));
      await expect.poll(() => summaryOf('ch123')).toEqual([1, 0]);
      counter.reset();
      const before = admission.stats().commands.load_read;
      const ticket = await admission.acquire({ candidates });
      expect(ticket.channel.id).toBe('ch124');
      expect(admission.stats().acquireAttempts).toBe(1);
      // one exchange (an HMGET of the 125 counts, or the script when a sweep is due), the cooldown ends (read at most
      // once a second, inside the script or one HGETALL) and the TIME of a clock never read; no per-channel read
      expect(counter.count('zcount') + counter.count('pttl')).toBe(0);
      const reads = admission.stats().commands.load_read - before - counter.count('time');
      expect(reads).toBeGreaterThanOrEqual(1);
      expect(reads).toBeLessThanOrEqual(2);
      await ticket.release();
      for (const t of held) await t.release();
    });

    it("another instance's slots, waiters and releases show in this instance's view within a few TTLs", async () => {
      await setup({ ...summaryOn, load_cache_ttl_ms: 20, wait_timeout_ms: 10_000 });
      const [ch] = bounded(1, 2);
      const other = otherInstance({ ...summaryOn, load_cache_ttl_ms: 20, wait_timeout_ms: 10_000 });
      const a = await other.acquire({ candidates: [ch!] });
      const b = await other.acquire({ candidates: [ch!] });
      const waiting = other.acquire({ candidates: [ch!] });
      const view = async () => (await admission.viewLoads([ch!])).get('ch0')!;
      await expect.poll(view).toMatchObject({ active: 2, waiting: 1 });
      await a.release();
      const c = await waiting; // the waiter got the slot a gave back
      await b.release();
      await expect.poll(view).toMatchObject({ active: 1, waiting: 0 });
      await c.release();
      await expect.poll(view).toMatchObject({ active: 0, waiting: 0 });
    });

    it('closing an instance takes its counts out of the summary (its leases are given back first)', async () => {
      await setup(summaryOn);
      const other = createAdmission({
        store: new RedisStore({ url: redisUrl(), prefix }),
        settings: { ...summaryOn, load_cache_ttl_ms: 20 },
      });
      others.push(() => other.close());
      await other.acquire({ candidates: bounded(1, 3) });
      await other.acquire({ candidates: bounded(1, 3) });
      await expect.poll(() => summaryOf('ch0')).toEqual([2, 0]);
      await other.close();
      expect(await summaryOf('ch0')).toEqual([0, 0]);
      // its field is gone (this instance never put any counts in)
      expect(await counter.client.hlen(store.keys.loadCounts())).toBe(0);
    });

    it('an instance whose counts the summary lost puts everything it holds back within a quarter lease TTL', async () => {
      // (a Redis restart is also seen at once by the epoch check of the new connection: docs/redis.md)
      await setup({ ...summaryOn, load_cache_ttl_ms: 20, lease_ttl_ms: 5000 });
      const held = [
        await admission.acquire({ candidates: bounded(1, 4) }),
        await admission.acquire({ candidates: bounded(1, 4) }),
      ];
      await expect.poll(() => summaryOf('ch0')).toEqual([2, 0]);
      // the summary's keys are gone: the instance's next report (here, of its new slot) rewrites its whole field
      const summaryKeys = await counter.client.keys(`${store.keys.base}:loads*`);
      expect(summaryKeys.length).toBeGreaterThanOrEqual(1);
      await counter.client.del(...summaryKeys);
      held.push(await admission.acquire({ candidates: bounded(1, 4, 'other') }));
      await expect.poll(() => summaryOf('ch0'), { timeout: 10_000 }).toEqual([2, 0]);
      expect(await summaryOf('other0')).toEqual([1, 0]);
      for (const t of held) await t.release();
    });

    it('the rollback switch reads the channels directly, never the summary', async () => {
      await setup({ load_cache_enabled: false });
      for (let i = 0; i < 3; i++) await (await admission.acquire({ candidates: bounded(2, 4) })).release();
      expect(admission.stats().loadView.directReads).toBe(3);
      expect(admission.stats().loadView.fetches).toBe(3);
      expect(counter.count('get') + counter.count('hset')).toBe(0);
    });
  });

  describe('slot handoff within one event-loop turn', () => {
    const slotMembers = (id: string) => counter.client.zrange(store.keys.slots(id), 0, -1);

    /** Gives `first` back and asks again in the same turn: the pass must reach Redis (a new token, no handoff). */
    async function sentThroughRedis(
      first: Ticket<Candidate>,
      again: () => Promise<Ticket<Candidate>>,
      options?: { handoff?: boolean },
    ): Promise<Ticket<Candidate>> {
      const released = first.release(options);
      const second = await again();
      await released;
      expect(second.token).not.toBe(first.token);
      expect(admission.stats().handoffs).toBe(0);
      return second;
    }

    it('a slot released while a pass of this instance wants its channel passes to it with no Redis command', async () => {
      await setup({ load_cache_ttl_ms: 5000 });
      const candidates = bounded(1, 1);
      const first = await admission.acquire({ candidates });
      counter.reset();
      // released and asked for in the same turn: the release is still queued when the pass runs
      const released = first.release();
      const second = await admission.acquire({ candidates });
      await released;
      expect(second.channel.id).toBe('ch0');
      expect(second.token).toBe(first.token);
      expect(counter.sent).toEqual([]);
      expect(admission.stats().handoffs).toBe(1);
      expect(await slotMembers('ch0')).toEqual([first.token]);
      expect(admission.stats().liveLeases).toBe(1);
      // the new holder's release removes the slot, exactly once (sent at the end of the turn)
      await second.release();
      await expect.poll(() => store.commands.release).toBe(1);
      expect(await slotMembers('ch0')).toEqual([]);
      expect(admission.stats().liveLeases).toBe(0);
    });

    it('a handoff in the first tier needs no load read, even with the snapshot expired', async () => {
      await setup({ load_cache_ttl_ms: 1 });
      const candidates = bounded(2, 1);
      const first = await admission.acquire({ candidates });
      await sleep(5); // the snapshot is stale now: a selection would read Redis
      counter.reset();
      await first.release();
      const second = await admission.acquire({ candidates });
      expect(second.token).toBe(first.token);
      expect(counter.sent).toEqual([]);
      expect(admission.stats().handoffs).toBe(1);
      await second.release();
    });

    it('a slot passes on at most once per turn: a release-and-acquire loop reaches Redis the second time round', async () => {
      await setup({ load_cache_ttl_ms: 5000 });
      const candidates = bounded(1, 2);
      const first = await admission.acquire({ candidates });
      counter.reset();
      // one turn: each release resolves once queued, so the loop never leaves it until it waits for Redis
      await first.release();
      const second = await admission.acquire({ candidates });
      await second.release();
      const third = await admission.acquire({ candidates });
      expect(second.token).toBe(first.token);
      expect(third.token).not.toBe(first.token);
      expect(admission.stats().handoffs).toBe(1);
      // the second release and the third acquire went out together: one release call, one acquire call
      expect(counter.count('evalsha')).toBe(2);
      expect(counter.pipelines).toContain(2);
      expect(await slotMembers('ch0')).toEqual([third.token]);
      await third.release();
    });

    it('a release whose turn has ended went to Redis: nothing is held back across turns', async () => {
      await setup({ load_cache_ttl_ms: 5000 });
      const candidates = bounded(1, 1);
      const first = await admission.acquire({ candidates });
      await first.release();
      await new Promise((r) => setImmediate(r)); // the turn ends: its removals are sent
      await expect.poll(() => slotMembers('ch0')).toEqual([]);
      const second = await admission.acquire({ candidates });
      expect(second.token).not.toBe(first.token);
      expect(admission.stats().handoffs).toBe(0);
      await second.release();
    });

    it('no handoff onto a channel this instance has just put in cooldown', async () => {
      await setup({ load_cache_ttl_ms: 5000, wait_enabled: false });
      const candidates = bounded(1, 1);
      const first = await admission.acquire({ candidates });
      const released = first.release();
      const cooled = admission.cooldown(candidates[0]!, { ms: 5_000 });
      const err = await admission.acquire({ candidates }).catch((e: unknown) => e);
      await Promise.all([released, cooled]);
      expect(err).toBeInstanceOf(CapacityError);
      expect(admission.stats().handoffs).toBe(0);
      expect(await slotMembers('ch0')).toEqual([]);
    });

    it('no handoff past a lowered max concurrency: the slot is released and the pass asks Redis', async () => {
      await setup({ load_cache_ttl_ms: 5000 });
      const first = await admission.acquire({ candidates: [{ id: 'ch0', maxConcurrency: 2 }] });
      const second = await sentThroughRedis(first, () =>
        admission.acquire({ candidates: [{ id: 'ch0', maxConcurrency: 1 }] }),
      );
      expect(await slotMembers('ch0')).toEqual([second.token]);
      await second.release();
    });

    it('a handoff never skips a higher-priority tier with room', async () => {
      await setup({ load_cache_ttl_ms: 5000 });
      const low: Candidate = { id: 'low', maxConcurrency: 1, priority: 0 };
      const high: Candidate = { id: 'high', maxConcurrency: 1, priority: 10 };
      const first = await admission.acquire({ candidates: [low] });
      const released = first.release();
      const second = await admission.acquire({ candidates: [low, high] });
      await released;
      expect(second.channel.id).toBe('high');
      expect(admission.stats().handoffs).toBe(0);
      expect(await slotMembers('low')).toEqual([]);
      await second.release();
    });

    it('a waiting request of this instance is served by the grant its release makes, never by a handoff', async () => {
      await setup({ load_cache_ttl_ms: 5000, safety_poll_ms: 10_000, wait_timeout_ms: 4000 });
      const candidates = bounded(1, 1);
      const holder = await admission.acquire({ candidates });
      const waiting = admission.acquire({ candidates });
      await expect.poll(() => admission.stats().channels.ch0?.waiting).toBe(1);
      counter.reset();
      const started = Date.now();
      await holder.release();
      const ticket = await waiting;
      // served at once (its safety poll is seconds away) by the slot the release granted it, under its own token
      expect(Date.now() - started).toBeLessThan(1000);
      expect(ticket.token).not.toBe(holder.token);
      expect(ticket.waitedMs).toBeGreaterThan(0);
      expect(admission.stats().handoffs).toBe(0);
      expect(admission.stats().grants).toBe(1);
      // the release alone (releaseSlot): it granted the slot to this instance's own waiter as a full lease, named in
      // its reply, so no message and no claim
      expect(counter.sent).toEqual(['evalsha']);
      await ticket.release();
      await expect.poll(() => slotMembers('ch0')).toEqual([]);
    });

    it("a second release of a ticket whose slot was handed off leaves the new holder's slot in Redis", async () => {
      await setup({ load_cache_ttl_ms: 5000 });
      const candidates = bounded(1, 1);
      const a = await admission.acquire({ candidates });
      const released = a.release();
      const b = await admission.acquire({ candidates });
      await released;
      expect(admission.stats().handoffs).toBe(1);
      expect(b.token).toBe(a.token); // the same lease, now B's
      // A's holder gives its ticket back again (a second close handler, say): a no-op, not B's slot
      await a.release();
      // This read goes out on the store's connection behind anything that release queued in this turn.
      expect((await admission.readLoads(candidates)).get('ch0')!.active).toBe(1);
      expect(await slotMembers('ch0')).toEqual([b.token]);
      expect(admission.stats().liveLeases).toBe(1);
      // another instance still finds the channel full
      const other = otherInstance({ wait_enabled: false });
      await expect(other.acquire({ candidates })).rejects.toMatchObject({ reason: 'full' });
      expect(await slotMembers('ch0')).toEqual([b.token]);
      await b.release();
      await expect.poll(() => slotMembers('ch0')).toEqual([]);
      expect(admission.stats().liveLeases).toBe(0);
    });

    it('no handoff onto a channel another instance put in cooldown, seen only through a fresh load read', async () => {
      await setup({ load_cache_ttl_ms: 5000, wait_enabled: false });
      const c: Candidate = { id: 'c', maxConcurrency: 1, priority: 1 };
      const d: Candidate = { id: 'd', maxConcurrency: 1 };
      const candidates = [c, d];
      const held = await admission.acquire({ candidates });
      expect(held.channel.id).toBe('c');
      await otherInstance().cooldown(c, { ms: 30_000 });
      // this instance has no cooldown of its own; its cached snapshot shows c usable, a fresh read shows it cooling
      expect(admission.loadView.peek(['c', 'd'], false)?.get('c')?.coolingDown).toBe(false);
      expect((await admission.loadView.readFresh(['c', 'd']))?.get('c')?.coolingDown).toBe(true);
      // c's slot is given back while a pass of this instance wants c first: it must not take the slot over
      const released = held.release();
      const next = await admission.acquire({ candidates });
      await released;
      expect(admission.stats().handoffs).toBe(0);
      expect(next.channel.id).toBe('d');
      await expect.poll(() => slotMembers('c')).toEqual([]);
      expect(await slotMembers('d')).toEqual([next.token]);
      await next.release();
    });

    it("an abort while the pass's acquire call is in flight gives back the slot that call got", async () => {
      await setup({ load_cache_ttl_ms: 5000 });
      const candidates = bounded(1, 1);
      await admission.loadView.read(['ch0']); // a warm view: the pass queues its acquire with no await before it
      counter.reset();
      const ac = new AbortController();
      const pass = admission.acquire({ candidates, signal: ac.signal });
      // The store sends the turn's acquires from a setImmediate queued by the pass; this one runs right after that
      // send, before the reply can be read (no I/O in between).
      setImmediate(() => ac.abort());
      await expect(pass).rejects.toBeInstanceOf(CapacityError);
      await expect(pass).rejects.toMatchObject({ reason: 'aborted' });
      // the acquire did go out and admit the token: that slot is given back, and nothing renews it
      expect(counter.count('evalsha')).toBe(1);
      expect(admission.stats().acquireAttempts).toBe(1);
      await expect.poll(() => slotMembers('ch0')).toEqual([]);
      expect(counter.count('evalsha')).toBe(2); // and one release
      expect(admission.stats().liveLeases).toBe(0);
      expect(admission.stats().outcomes.capacity_aborted).toBe(1);
    });

    it('release({ handoff: false }) sends the slot back through Redis (a call aborted mid-flight)', async () => {
      await setup({ load_cache_ttl_ms: 5000 });
      const candidates = bounded(1, 1);
      const first = await admission.acquire({ candidates });
      const second = await sentThroughRedis(first, () => admission.acquire({ candidates }), {
        handoff: false,
      });
      expect(await slotMembers('ch0')).toEqual([second.token]);
      await second.release();
    });

    it('slot_handoff_enabled = false sends every release and every acquire', async () => {
      await setup({ load_cache_ttl_ms: 5000, slot_handoff_enabled: false });
      const candidates = bounded(1, 1);
      const first = await admission.acquire({ candidates });
      counter.reset();
      const second = await sentThroughRedis(first, () => admission.acquire({ candidates }));
      expect(counter.count('evalsha')).toBe(2); // one release, one acquire
      await second.release();
    });
  });
});

describe('load view fetch bound', () => {
  it('with both fetch slots busy and a 50 ms fetch time-out, a read returns the in-memory fallback (item 10)', async () => {
    const real = new RedisStore({ url: redisUrl(), prefix: uniquePrefix('slots') });
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    let calls = 0;
    const store: SlotStore = Object.create(real, {
      exchangeLoads: {
        value: async (exchange: LoadExchange): Promise<Map<string, ChannelLoad>> => {
          calls++;
          await gate;
          return real.exchangeLoads(exchange);
        },
      },
    });
    const view = new LoadView({
      store,
      clock: systemClock,
      settings: () => admissionSettings.defaults,
      local: { active: (id) => (id === 'x' ? 3 : 0), waiting: () => 1, coolingMs: () => 0 },
      instanceId: () => 'me',
      fetchTimeoutMs: 50,
    });
    const busy = [view.read(['a']), view.read(['b'])];
    const loads = await view.read(['x', 'y']);
    expect(calls).toBe(2); // the third read never reached the store
    expect(loads.get('x')).toEqual({ active: 3, waiting: 1, coolingDown: false, cooldownRemainingMs: 0 });
    expect(loads.get('y')).toEqual({ active: 0, waiting: 1, coolingDown: false, cooldownRemainingMs: 0 });
    expect(view.counters.fallbacks).toBeGreaterThanOrEqual(1);
    open();
    await Promise.all(busy);
    await real.close();
  });
});

describe('admission with Redis down', () => {
  let server: RedisServer;
  beforeEach(async () => {
    server = await RedisServer.start();
  });
  afterEach(async () => {
    await server.stop();
  });

  it('fails closed for bounded channels, keeps serving unlimited ones, and recovers without a restart (I4)', async () => {
    const store = new RedisStore({ url: server.url, timeoutMs: 300 });
    const ttl = 1;
    const admission = createAdmission({
      store,
      settings: { load_cache_ttl_ms: ttl },
      loadFetchTimeoutMs: 300,
    });
    const candidates = bounded(2, 2);
    await (await admission.acquire({ candidates })).release();
    await server.stop();
    // past 5 TTLs: the pass waits for its load read (a more recent snapshot would order it with none: peekRecent).
    // The last snapshot was read before the stop, by the clock the view reads (Date.now)
    const stoppedAt = Date.now();
    await until(() => Date.now() - stoppedAt >= 5 * ttl, 'the last load snapshot 5 TTLs old', {
      intervalMs: 1,
    });
    const err = await admission.acquire({ candidates }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect(admission.stats().outcomes.store_unavailable).toBe(1);
    // the load read degraded to the fallback; only the acquire failed
    expect(admission.stats().loadView.fallbacks).toBeGreaterThanOrEqual(1);
    const unlimited = await admission.acquire({ candidates: [{ id: 'free' }] });
    expect(unlimited.channel.id).toBe('free');
    await unlimited.release();
    await server.start();
    const ticket = await answered(() => admission.acquire({ candidates }), 'an acquire once Redis is back');
    expect(ticket.channel.id).toMatch(/^ch[01]$/);
    await ticket.release();
    await admission.close();
    await store.close();
    const check = new Redis(server.url);
    // nothing else is left behind: the channels' high-water marks go by themselves within two minutes
    const left = await check.keys('*');
    const marks = left.filter((k) => k.endsWith(':peak'));
    expect(left.filter((k) => !marks.includes(k))).toEqual(['slotgate:v1:epoch']);
    for (const k of marks) expect(await check.pttl(k)).toBeLessThanOrEqual(120_000);
    check.disconnect();
  });
});
