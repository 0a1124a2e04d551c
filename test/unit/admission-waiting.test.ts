/**
 * Waiting (packages/slotgate/src/admission/waiting.ts) on MemoryStore: one FIFO queue per channel in the store; a slot
 * that comes free is granted to the oldest live waiter, whichever instance it is on, and its instance is told; no
 * acquire takes a slot ahead of a queue; a waiter joins up to two queues and takes the first grant; a slow safety poll
 * finds a lost grant. Two engines on one store play two instances, on one ManualClock, so every admission is asserted
 * at the exact instant it happens. A `random` of 0 puts every safety poll at half its period: with safety_poll_ms
 * 2000 (POLL_2S) a waiter polls at +1000, +2000, …
 */
import { afterEach, describe, expect, it } from 'vitest';
import { defaultMaxWaiting } from '../../packages/slotgate/src/admission/pass/decide.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import type { Client } from '../../packages/slotgate/src/core/client.js';
import type { Clock } from '../../packages/slotgate/src/core/clock.js';
import type { ManualClock } from './manual-clock.js';
import { StoreUnavailableError } from '../../packages/slotgate/src/core/errors.js';
import type { SettingsUpdate } from '../../packages/slotgate/src/core/settings.js';
import type { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import type { AcquireReply, EnqueueReply, QueueListener } from '../../packages/slotgate/src/store/store.js';
import {
  capacityError,
  closeEngines,
  engine,
  failedWith,
  hold,
  holdReleases,
  load,
  memory,
  setup,
} from './admission-fixture.js';
import { elapse, flush, track } from './manual-time.js';

afterEach(closeEngines);

const zero = { random: () => 0 };
/** A safety poll period of 2000 ms. */
const POLL_2S = { safety_poll_ms: 2000 };

/** Puts a waiter of an instance with no engine (nobody is told of its grants) in the channel's queue. */
function foreignWaiter(store: MemoryStore, channel: Candidate, n: number) {
  const waiter = { channelId: channel.id, token: `foreign:${n}`, max: channel.maxConcurrency! };
  return store.enqueue(waiter, { maxWaiting: 10_000, ttlMs: 60_000, leaseTtlMs: 60_000 });
}

/** A slot taken straight in the store by a token of no engine, expiring after `ttlMs`. */
function orphanSlot(store: MemoryStore, channel: Candidate, token: string, ttlMs = 60_000) {
  return store.acquireFirst([{ channelId: channel.id, max: channel.maxConcurrency! }], {
    token,
    leaseTtlMs: ttlMs,
    checkCooldown: true,
  });
}

/** Records the replies of every acquire call the store answers. */
function recordReplies(store: MemoryStore): AcquireReply[][] {
  const acquireFirst = store.acquireFirst.bind(store);
  const replies: AcquireReply[][] = [];
  store.acquireFirst = async (targets, opts) => {
    const reply = await acquireFirst(targets, opts);
    replies.push(reply);
    return reply;
  };
  return replies;
}

/** Records the instant of every safety poll. */
function recordPolls(clock: { now(): number }, store: MemoryStore): number[] {
  const pollWaiter = store.pollWaiter.bind(store);
  const at: number[] = [];
  store.pollWaiter = (waiter) => {
    at.push(clock.now());
    return pollWaiter(waiter);
  };
  return at;
}

/**
 * A store whose grant messages never arrive (a lost pub/sub message): only a safety poll finds a grant. Returns what
 * plays the subscription coming back after a loss: it tells every listener to resync.
 */
function loseGrants(store: MemoryStore): () => void {
  const listen = store.listen.bind(store);
  const listeners: QueueListener[] = [];
  store.listen = (id, listener) => {
    listeners.push(listener);
    return listen(id, {
      grant: () => {},
      queued: (c) => listener.queued(c),
      resync: () => listener.resync(),
    });
  };
  return () => listeners.forEach((l) => l.resync());
}

describe('grants', () => {
  it.each(['this', 'another'] as const)(
    'a slot %s instance releases is granted to the waiter at that instant, as a full lease',
    async (holderIs) => {
      const { clock, store, admission, other } = setup({}, zero);
      const channel = { id: 'grant', maxConcurrency: 1 };
      const [holder] = await hold(holderIs === 'this' ? admission : other, channel);
      const t0 = clock.now();
      const pending = track(clock, admission.acquire({ candidates: [channel] }));
      await elapse(clock, 40);
      expect(await load(store, 'grant')).toMatchObject({ active: 1, waiting: 1 });
      expect(admission.stats().channels.grant?.waiting).toBe(1);
      expect(store.commands.wait).toBe(1); // its enqueue; the first safety poll is at +1000
      await holder!.release();
      await flush();
      expect(pending.at).toBe(t0 + 40); // at the release, with no time passing
      const ticket = pending.value!;
      expect([ticket.channel.id, ticket.waitedMs]).toEqual(['grant', 40]);
      expect(ticket.token).toMatch(new RegExp(`^${admission.instanceId}:\\d+$`));
      expect(await load(store, 'grant')).toMatchObject({ active: 1, waiting: 0 });
      expect(store.commands.wait).toBe(1); // it claimed the one queue it was in: nothing to leave
      expect(admission.stats()).toMatchObject({
        liveLeases: 1,
        handoffs: 0,
        waitTimeMs: { count: 1, sum: 40 },
        channels: { grant: { active: 1, waiting: 0 } },
      });
      // A full lease: long past the claim deadline (5 s) the slot is still its own.
      await clock.advance(10_000);
      expect(await orphanSlot(store, channel, 'late:1')).toEqual(['full']);
      await ticket.release();
      expect((await load(store, 'grant')).active).toBe(0);
    },
  );

  it('FIFO across instances: the waiter queued first is served first, even when the other instance releases', async () => {
    const { clock, store, admission, other } = setup({}, zero);
    const channel = { id: 'fifo', maxConcurrency: 1, maxWaiting: 4 };
    const [holder] = await hold(admission, channel);
    const t0 = clock.now();
    const first = track(clock, other.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    const second = track(clock, admission.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    expect((await load(store, 'fifo')).waiting).toBe(2);
    await holder!.release(); // this instance's slot, while this instance's waiter is second in line
    await flush();
    expect([first.at, first.value?.waitedMs, second.at]).toEqual([t0 + 20, 20, undefined]);
    await elapse(clock, 15);
    await first.value!.release();
    await flush();
    expect([second.at, second.value?.waitedMs]).toEqual([t0 + 35, 25]);
    expect(await load(store, 'fifo')).toMatchObject({ active: 1, waiting: 0 });
    expect(store.commands.wait).toBe(2); // two enqueues; each grant went to its waiter once, none was given back
    await second.value!.release();
  });

  it('no barging: an acquire while others wait queues behind them and is served after them, in arrival order', async () => {
    const { clock, store, admission, other } = setup({}, zero);
    const replies = recordReplies(store);
    const channel = { id: 'nb', maxConcurrency: 2, maxWaiting: 4 };
    const held = await hold(other, channel, 2);
    const t0 = clock.now();
    const w1 = track(clock, admission.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    const w2 = track(clock, other.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    await held[0]!.release(); // +20: to w1
    await flush();
    expect(w1.at).toBe(t0 + 20);
    replies.length = 0;
    const late = track(clock, admission.acquire({ candidates: [channel] })); // w2 still waits
    await flush();
    // the engine knows the channel has waiters: no acquire call (the script would answer `queued`), it queues
    expect(replies).toEqual([]);
    expect(late.at).toBeUndefined();
    expect(await load(store, 'nb')).toMatchObject({ active: 2, waiting: 2 });
    await elapse(clock, 10);
    await held[1]!.release(); // +30: to w2, not to the one that came later
    await flush();
    expect([w2.at, late.at]).toEqual([t0 + 30, undefined]);
    // w1's lease stands: a waiter granted a slot is out of the queue, never granted (or given back) twice
    expect(await load(store, 'nb')).toMatchObject({ active: 2, waiting: 1 });
    expect([admission.stats().liveLeases, other.stats().liveLeases]).toEqual([1, 1]);
    await elapse(clock, 10);
    await w1.value!.release(); // +40
    await flush();
    expect([late.at, late.value?.waitedMs]).toEqual([t0 + 40, 20]);
    for (const t of [w2.value!, late.value!]) await t.release();
    expect(await load(store, 'nb')).toMatchObject({ active: 0, waiting: 0 });
  });

  it('a slot freed by expiry goes to the waiter, never to a newcomer, at the next look: here the safety poll', async () => {
    const { clock, store, admission, other } = setup(POLL_2S, zero);
    const replies = recordReplies(store);
    const channel = { id: 'exp', maxConcurrency: 1, maxWaiting: 2 };
    expect(await orphanSlot(store, channel, 'crashed:1', 100)).toEqual(['acquired']);
    const t0 = clock.now();
    const waiter = track(clock, admission.acquire({ candidates: [channel] }));
    await elapse(clock, 200); // the slot expired at +100; nothing tells anyone
    expect(waiter.at).toBeUndefined();
    replies.length = 0;
    const newcomer = track(clock, other.acquire({ candidates: [channel] }));
    await flush();
    // the newcomer knows of the queue: it queues behind the waiter without an acquire, and takes nothing
    expect(replies).toEqual([]);
    expect(newcomer.error).toBeUndefined();
    expect(newcomer.at).toBeUndefined();
    // the waiter's safety poll (50 × 40 ms, jittered to its lower half with random 0) grants it the freed slot
    await elapse(clock, 1000 - 200);
    expect([waiter.at, waiter.value?.waitedMs]).toEqual([t0 + 1000, 1000]);
    expect(newcomer.at).toBeUndefined();
    expect(await load(store, 'exp')).toMatchObject({ active: 1, waiting: 1 });
    await elapse(clock, 10);
    await waiter.value!.release();
    await flush();
    expect([newcomer.at, newcomer.value?.waitedMs]).toEqual([t0 + 1010, 810]);
    await newcomer.value!.release();
  });

  it('a slot freed between the pass and its enqueue is granted at once, with no message and no wait', async () => {
    const { clock, store, admission, other } = setup({}, zero);
    const channel = { id: 'now', maxConcurrency: 1 };
    const [holder] = await hold(other, channel);
    const enqueue = store.enqueue.bind(store);
    const replies: string[] = [];
    store.enqueue = async (waiter, options) => {
      await holder!.release();
      const reply = await enqueue(waiter, options);
      replies.push(reply);
      return reply;
    };
    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: [channel] }));
    await flush();
    expect(replies).toEqual(['granted']);
    expect([pending.at, pending.value?.waitedMs]).toEqual([t0, 0]);
    expect(await load(store, 'now')).toMatchObject({ active: 1, waiting: 0 });
    expect(admission.stats()).toMatchObject({ liveLeases: 1, channels: { now: { active: 1, waiting: 0 } } });
    expect(store.commands.wait).toBe(1);
    await pending.value!.release();
  });

  it('a waiter queues on two full channels at most, the emptiest queues first', async () => {
    const { clock, store, admission, other } = setup({}, zero);
    const [a, b, c] = ['a', 'b', 'c'].map((id) => ({ id, maxConcurrency: 1, maxWaiting: 1 }));
    const held = [...(await hold(other, a!)), ...(await hold(other, b!)), ...(await hold(other, c!))];
    expect(await foreignWaiter(store, c!, 1)).toBe('queued'); // c's queue is full
    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: [c!, b!, a!] }));
    await elapse(clock, 10);
    const waiting = async () => [...(await store.readLoads(['a', 'b', 'c'])).values()].map((l) => l.waiting);
    expect(await waiting()).toEqual([1, 1, 1]);
    expect(store.commands.wait).toBe(1 + 2);
    await held[2]!.release(); // c: its own waiter's
    await flush();
    expect(pending.at).toBeUndefined();
    await held[1]!.release(); // b
    await flush();
    expect([pending.at, pending.value?.channel.id]).toEqual([t0 + 10, 'b']);
    expect(await waiting()).toEqual([0, 0, 0]);
    await pending.value!.release();
    await held[0]!.release();
  });

  it('a waiter sends the enqueues of its two queues in one flight, so it stands as early in both', async () => {
    const { clock, store, admission, other } = setup({}, zero);
    const x = { id: 'x', maxConcurrency: 1 };
    const y = { id: 'y', maxConcurrency: 1 };
    const held = [...(await hold(other, x)), ...(await hold(other, y))];
    const enqueue = store.enqueue.bind(store);
    let inFlight = 0;
    let most = 0;
    store.enqueue = async (waiter, options) => {
      most = Math.max(most, ++inFlight);
      try {
        return await enqueue(waiter, options);
      } finally {
        inFlight--;
      }
    };
    const pending = track(clock, admission.acquire({ candidates: [x, y] }));
    await elapse(clock, 10);
    expect(most).toBe(2);
    expect(admission.stats().channels).toMatchObject({ x: { waiting: 1 }, y: { waiting: 1 } });
    await held[0]!.release();
    await flush();
    expect(pending.value?.channel.id).toBe('x');
    await pending.value!.release();
    await held[1]!.release();
  });

  it('concurrent waiters spread over the queues, each seeing the places the ones before it took: none is turned away', async () => {
    const { clock, store, admission, other } = setup();
    // 5 channels × 2 places = 10 places; 5 waiters take 2 each
    const channels = ['a', 'b', 'c', 'd', 'e'].map((id) => ({ id, maxConcurrency: 1, maxWaiting: 2 }));
    const held: Awaited<ReturnType<typeof hold>> = [];
    for (const c of channels) held.push(...(await hold(other, c)));
    const pending = channels.map(() => track(clock, admission.acquire({ candidates: channels })));
    await elapse(clock, 10);
    expect(pending.map((p) => p.error && failedWith(p).reason)).toEqual([
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    const waiting = [...(await store.readLoads(channels.map((c) => c.id))).values()].map((l) => l.waiting);
    expect(waiting).toEqual([2, 2, 2, 2, 2]);
    for (const t of held) await t.release();
    await flush();
    for (const p of pending) await p.value?.release();
  });

  it('a waiter granted on both its queues takes the first grant; the other passes on to the next waiter there', async () => {
    const { clock, store, admission, other } = setup({}, zero);
    const x = { id: 'x', maxConcurrency: 1 };
    const y = { id: 'y', maxConcurrency: 1, maxWaiting: 4 };
    const [hx] = await hold(other, x);
    const [hy] = await hold(other, y);
    const t0 = clock.now();
    const both = track(clock, admission.acquire({ candidates: [x, y] }));
    await elapse(clock, 10);
    const onlyY = track(clock, other.acquire({ candidates: [y] })); // behind it in y's queue
    await elapse(clock, 10);
    expect([(await load(store, 'x')).waiting, (await load(store, 'y')).waiting]).toEqual([1, 2]);
    expect(admission.stats().channels).toEqual({
      x: { active: 0, waiting: 1 },
      y: { active: 0, waiting: 1 },
    });
    // Both slots come free in one turn: the first waiter is granted both, in that order.
    void hx!.release();
    void hy!.release();
    await flush();
    expect([both.at, both.value?.channel.id, both.value?.waitedMs]).toEqual([t0 + 20, 'x', 20]);
    expect([onlyY.at, onlyY.value?.channel.id, onlyY.value?.waitedMs]).toEqual([t0 + 20, 'y', 10]);
    const loads = await store.readLoads(['x', 'y']);
    expect([...loads.values()].map((l) => [l.active, l.waiting])).toEqual([
      [1, 0],
      [1, 0],
    ]);
    expect(admission.stats().channels).toEqual({ x: { active: 1, waiting: 0 } });
    expect(store.commands.wait).toBe(2 + 1 + 1); // its two enqueues, the other's, its leave of y
    for (const t of [both.value!, onlyY.value!]) await t.release();
  });

  it('a grant to a waiter that aborts before it claims passes on at once to the next waiter', async () => {
    const { clock, store, admission, other } = setup({}, zero);
    const channel = { id: 'ga', maxConcurrency: 1, maxWaiting: 4 };
    const [holder] = await hold(other, channel);
    const controller = new AbortController();
    const t0 = clock.now();
    const aborted = track(clock, admission.acquire({ candidates: [channel], signal: controller.signal }));
    await elapse(clock, 10);
    const next = track(clock, other.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    void holder!.release(); // granted to the first waiter, whose caller gives up in the same turn
    controller.abort();
    await flush();
    expect([aborted.at, failedWith(aborted).reason]).toEqual([t0 + 20, 'aborted']);
    expect([next.at, next.value?.waitedMs]).toEqual([t0 + 20, 10]);
    expect(next.value!.token).toMatch(new RegExp(`^${other.instanceId}:`));
    expect(await load(store, 'ga')).toMatchObject({ active: 1, waiting: 0 });
    expect(admission.stats()).toMatchObject({ liveLeases: 0, channels: {} });
    await next.value!.release();
  });

  it('a grant to a waiter that timed out (its leave was lost) is given back by its instance and passes on at once', async () => {
    const m = memory();
    const { clock, store } = m;
    const leaveQueue = store.leaveQueue.bind(store);
    const leaves: [string, number][] = [];
    store.leaveQueue = async (waiter) => {
      leaves.push([waiter.token, clock.now()]);
      if (leaves.length === 1) throw new StoreUnavailableError('wait', 'connection reset'); // the first one is lost
      return leaveQueue(waiter);
    };
    const admission = engine(m, { wait_timeout_ms: 100 }, zero);
    const other = engine(m, { wait_timeout_ms: 5000 }, zero);
    const channel = { id: 'late', maxConcurrency: 1, maxWaiting: 4 };
    const [holder] = await hold(other, channel);
    const t0 = clock.now();
    const timedOut = track(clock, admission.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    const next = track(clock, other.acquire({ candidates: [channel] }));
    await elapse(clock, 90);
    expect([timedOut.at, failedWith(timedOut).reason]).toEqual([t0 + 100, 'wait_timeout']);
    expect((await load(store, 'late')).waiting).toBe(2); // its registration outlives it: the leave was lost
    await elapse(clock, 50);
    await holder!.release(); // +150: granted to the head of the queue, the waiter that is gone
    await flush();
    expect([next.at, next.value?.waitedMs]).toEqual([t0 + 150, 140]);
    const token = leaves[0]![0];
    expect(token).toMatch(new RegExp(`^${admission.instanceId}:`));
    expect(leaves).toEqual([
      [token, t0 + 100],
      [token, t0 + 150],
    ]);
    expect(await load(store, 'late')).toMatchObject({ active: 1, waiting: 0 });
    await next.value!.release();
  });
});

describe('queue bounds', () => {
  /**
   * Holds every slot of `channel` on another instance, fills its queue with `foreign` waiters of other instances,
   * then lets this engine try: it either waits (and times out after wait_timeout_ms, 40 ms here) or finds the queue
   * full at once. Returns the reason and how long after the call it failed.
   */
  async function probeQueue(channel: Candidate, settings: SettingsUpdate, foreign: number) {
    const { clock, store, admission, other } = setup(
      { wait_timeout_ms: 40, safety_poll_ms: 2000, ...settings },
      zero,
    );
    const held = await hold(other, channel, channel.maxConcurrency);
    for (let i = 0; i < foreign; i++) expect(await foreignWaiter(store, channel, i)).toBe('queued');
    const t0 = clock.now();
    const outcome = track(clock, admission.acquire({ candidates: [channel] }));
    await elapse(clock, 40);
    const { reason } = failedWith(outcome);
    await flush();
    // Nothing leaked: only the foreign waiters and the held slots remain.
    expect((await load(store, channel.id)).waiting).toBe(foreign);
    expect((await load(store, channel.id)).active).toBe(channel.maxConcurrency);
    for (const t of held) await t.release();
    return { reason, afterMs: outcome.at! - t0 };
  }

  const timedOut = { reason: 'wait_timeout', afterMs: 40 };
  const queueFull = { reason: 'queue_full', afterMs: 0 };

  it('queue_full at the channel max_waiting, which wins over the setting and max_concurrency', async () => {
    const channel = { id: 'q', maxConcurrency: 1, maxWaiting: 2 };
    const settings = { max_waiting_per_channel: 5 };
    expect(await probeQueue(channel, settings, 1)).toEqual(timedOut);
    expect(await probeQueue(channel, settings, 2)).toEqual(queueFull);
  });

  it('queue_full at max_waiting_per_channel when the channel sets none (and the setting is > 0)', async () => {
    const channel = { id: 'q', maxConcurrency: 1 };
    const settings = { max_waiting_per_channel: 3 };
    expect(await probeQueue(channel, settings, 2)).toEqual(timedOut);
    expect(await probeQueue(channel, settings, 3)).toEqual(queueFull);
  });

  // The default bound was the channel's max until Stage 10: a burst of a few times the max bounced with queue_full
  // at once although slots came free well within wait_timeout_ms.
  it('queue_full at max(32, 8 × max_concurrency) when neither the channel nor the setting bounds the queue', async () => {
    const small = { id: 'q', maxConcurrency: 2 };
    const settings = { max_waiting_per_channel: 0 };
    expect(await probeQueue(small, settings, 31)).toEqual(timedOut);
    expect(await probeQueue(small, settings, 32)).toEqual(queueFull);
    const large = { id: 'q', maxConcurrency: 5 };
    expect(await probeQueue(large, settings, 39)).toEqual(timedOut);
    expect(await probeQueue(large, settings, 40)).toEqual(queueFull);
  });

  it('the default bound: max(32, 8 × max), at most 10000 (what max_waiting_per_channel accepts)', () => {
    expect([1, 4, 5, 100, 1250, 5000].map(defaultMaxWaiting)).toEqual([32, 32, 40, 800, 10_000, 10_000]);
  });

  it('queue_full is counted and names the channel', async () => {
    const { store, admission, other } = setup();
    const channel = { id: 'qq', maxConcurrency: 1, maxWaiting: 1 };
    const held = await hold(other, channel);
    expect(await foreignWaiter(store, channel, 1)).toBe('queued');
    const err = await capacityError(admission.acquire({ candidates: [channel] }));
    expect(err.reason).toBe('queue_full');
    expect(err.code).toBe('channel_capacity_exhausted');
    expect(err.message).toContain('qq');
    expect(admission.stats().outcomes.capacity_queue_full).toBe(1);
    // the foreign enqueue only: the pass's load read showed the queue full, so it was not asked (nothing to leave)
    expect(store.commands.wait).toBe(1);
    for (const t of held) await t.release();
  });
});

describe('two queues or none', () => {
  it('a waiter one of whose two queues is full waits in neither: queue_full, the other queue left', async () => {
    const { store, admission, other } = setup();
    const a = { id: 'na', maxConcurrency: 1, maxWaiting: 1 };
    const b = { id: 'nb', maxConcurrency: 1, maxWaiting: 1 };
    const held = [...(await hold(other, a)), ...(await hold(other, b))];
    expect(await foreignWaiter(store, a, 1)).toBe('queued');
    const err = await capacityError(admission.acquire({ candidates: [a, b] }));
    expect([err.reason, err.message.includes('na')]).toEqual(['queue_full', true]);
    await flush();
    expect([(await load(store, a.id)).waiting, (await load(store, b.id)).waiting]).toEqual([1, 0]);
    for (const t of held) await t.release();
  });

  it('one granted meanwhile on the queue it joined is admitted there, though its other queue turned it away', async () => {
    const { clock, store, admission, other } = setup({}, zero);
    const a = { id: 'ga', maxConcurrency: 1, maxWaiting: 1 };
    const b = { id: 'gb', maxConcurrency: 1, maxWaiting: 1 };
    const [ha] = await hold(other, a);
    const [hb] = await hold(other, b);
    // a's registration answers late (a node of its own on Cluster), and full
    const enqueue = store.enqueue.bind(store);
    let answerA!: (reply: EnqueueReply) => void;
    store.enqueue = (w, o) =>
      w.channelId === a.id ? new Promise<EnqueueReply>((r) => (answerA = r)) : enqueue(w, o);
    const pending = track(clock, admission.acquire({ candidates: [a, b] }));
    await flush();
    expect((await load(store, b.id)).waiting).toBe(1);
    await hb!.release(); // b's slot is granted to the waiter
    await flush();
    answerA('queue_full');
    await flush();
    expect(pending.value?.channel.id).toBe(b.id);
    await pending.value!.release();
    await ha!.release();
  });

  it('in a wider set one full queue does not turn a waiter away while two others take it', async () => {
    const { clock, store, admission, other } = setup({ wait_timeout_ms: 40 }, zero);
    const channels = ['wa', 'wb', 'wc'].map((id) => ({ id, maxConcurrency: 1, maxWaiting: 1 }));
    const held: Awaited<ReturnType<typeof hold>> = [];
    for (const c of channels) held.push(...(await hold(other, c)));
    expect(await foreignWaiter(store, channels[0]!, 1)).toBe('queued');
    const pending = track(clock, admission.acquire({ candidates: channels }));
    await flush();
    const waiting = async () => Promise.all(channels.map(async (c) => (await load(store, c.id)).waiting));
    expect(await waiting()).toEqual([1, 1, 1]); // the foreign waiter in wa; this one in wb and wc
    await elapse(clock, 40);
    expect(failedWith(pending).reason).toBe('wait_timeout');
    for (const t of held) await t.release();
  });
});

describe('a queue seen full', () => {
  it('is not asked again until the view shows room: the turned-away requests stay off the store', async () => {
    const { store, admission, other } = setup({ load_cache_ttl_ms: 5000 });
    const channel = { id: 'qf', maxConcurrency: 1, maxWaiting: 1 };
    const held = await hold(other, channel);
    await admission.viewLoads([channel]); // a snapshot with nobody waiting
    expect(await foreignWaiter(store, channel, 1)).toBe('queued'); // the queue fills behind this instance's back
    const before = store.commands.wait;
    expect((await capacityError(admission.acquire({ candidates: [channel] }))).reason).toBe('queue_full');
    expect(store.commands.wait - before).toBe(1); // asked once, turned away
    expect((await capacityError(admission.acquire({ candidates: [channel] }))).reason).toBe('queue_full');
    expect(store.commands.wait - before).toBe(1); // not asked again: the view shows the queue full
    for (const t of held) await t.release();
  });

  it('is asked again when another of the waiter’s queues shows room: a lagging view leaves it in no fewer queues', async () => {
    const { clock, store, admission, other } = setup({ load_cache_ttl_ms: 5000, wait_timeout_ms: 40 }, zero);
    const a = { id: 'sa', maxConcurrency: 1, maxWaiting: 1 };
    const b = { id: 'sb', maxConcurrency: 1, maxWaiting: 1 };
    const held = [...(await hold(other, a)), ...(await hold(other, b))];
    await admission.viewLoads([a, b]); // a snapshot with nobody waiting
    expect(await foreignWaiter(store, a, 1)).toBe('queued'); // a's queue fills behind this instance's back
    // turned away by a (the view now shows it full), it does not wait in b alone: queue_full, and b is left
    expect((await capacityError(admission.acquire({ candidates: [a, b] }))).reason).toBe('queue_full');
    await flush();
    expect((await load(store, b.id)).waiting).toBe(0);
    // the foreign waiter leaves: a has room again, which the view (its snapshot 5 s long) does not show
    await store.leaveQueue({ channelId: a.id, token: 'foreign:1', max: 1 });
    const second = track(clock, admission.acquire({ candidates: [a, b] }));
    await flush();
    expect([(await load(store, a.id)).waiting, (await load(store, b.id)).waiting]).toEqual([1, 1]);
    await elapse(clock, 40);
    expect(failedWith(second).reason).toBe('wait_timeout');
    for (const t of held) await t.release();
  });
});

describe('time-out and abort', () => {
  it('wait_timeout at exactly wait_timeout_ms, after safety polls at their period, the registration removed', async () => {
    const { clock, store, admission, other } = setup({ wait_timeout_ms: 2500, safety_poll_ms: 2000 }, zero);
    const polls = recordPolls(clock, store);
    const channel = { id: 'slow', maxConcurrency: 1 };
    const held = await hold(other, channel);
    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: [channel] }));
    await elapse(clock, 30);
    expect((await load(store, 'slow')).waiting).toBe(1); // it really queued
    expect(admission.stats().channels.slow?.waiting).toBe(1);
    await clock.advance(2469); // +2499
    expect(pending.at).toBeUndefined();
    // The period is 2000 ms (wait_interval_ms × 50, at least 2000), random 0 halves it; none at the deadline.
    expect(polls).toEqual([1000, 2000].map((ms) => t0 + ms));
    await elapse(clock, 1);
    expect(pending.at).toBe(t0 + 2500);
    const err = failedWith(pending);
    expect(err.reason).toBe('wait_timeout');
    expect(err.channels).toEqual(['slow']);
    await flush();
    expect(await load(store, 'slow')).toMatchObject({ active: 1, waiting: 0 });
    expect(store.commands.wait).toBe(1 + 2 + 1); // enqueue, two polls, leave
    expect(admission.stats()).toMatchObject({
      outcomes: { capacity_wait_timeout: 1 },
      waitTimeMs: { count: 1, sum: 2500 },
      liveLeases: 0,
      channels: {},
    });
    for (const t of held) await t.release();
  });

  it('aborted when the caller aborts during the wait, at once, with nothing leaked', async () => {
    const { clock, store, admission, other } = setup(
      { wait_timeout_ms: 10_000, safety_poll_ms: 10_000 },
      zero,
    );
    const channel = { id: 'ab', maxConcurrency: 1 };
    const held = await hold(other, channel);
    const controller = new AbortController();
    const pending = track(clock, admission.acquire({ candidates: [channel], signal: controller.signal }));
    await elapse(clock, 30);
    expect((await load(store, 'ab')).waiting).toBe(1);
    const timers = clock.pending;
    const abortedAt = clock.now();
    controller.abort();
    await flush();
    // Not at the safety poll (+2500), nor the 10 s deadline: with no time passing, and its sleep timer cancelled.
    expect(pending.at).toBe(abortedAt);
    expect(clock.pending).toBe(timers - 1);
    const err = failedWith(pending);
    expect(err.reason).toBe('aborted');
    expect(await load(store, 'ab')).toMatchObject({ active: 1, waiting: 0 });
    expect(store.commands.wait).toBe(2); // enqueue, leave
    expect(admission.stats()).toMatchObject({
      outcomes: { capacity_aborted: 1 },
      liveLeases: 0,
      channels: {},
    });
    for (const t of held) await t.release();
  });

  it('aborted when the signal is already aborted, without queueing', async () => {
    const { store, admission, other } = setup();
    const channel = { id: 'pre', maxConcurrency: 1 };
    const held = await hold(other, channel);
    const err = await capacityError(
      admission.acquire({ candidates: [channel], signal: AbortSignal.abort() }),
    );
    expect(err.reason).toBe('aborted');
    expect(store.commands.wait).toBe(0);
    expect((await load(store, 'pre')).active).toBe(1);
    for (const t of held) await t.release();
  });

  it('an abort while its enqueues are in flight (both queues joined in one flight) leaves both queues', async () => {
    const { clock, store, admission, other } = setup({}, zero);
    const x = { id: 'x', maxConcurrency: 1 };
    const y = { id: 'y', maxConcurrency: 1 };
    const held = [...(await hold(other, x)), ...(await hold(other, y))];
    const controller = new AbortController();
    const enqueue = store.enqueue.bind(store);
    let enqueues = 0;
    store.enqueue = (waiter, options) => {
      enqueues++;
      controller.abort();
      return enqueue(waiter, options);
    };
    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: [x, y], signal: controller.signal }));
    await flush();
    expect([pending.at, failedWith(pending).reason, enqueues]).toEqual([t0, 'aborted', 2]);
    const loads = await store.readLoads(['x', 'y']);
    expect([...loads.values()].map((l) => l.waiting)).toEqual([0, 0]);
    expect(store.commands.wait).toBe(4); // two enqueues, their leaves
    expect(admission.stats().channels).toEqual({});
    for (const t of held) await t.release();
  });

  it('an abort during a safety poll ends the wait when the poll returns, not after the next sleep', async () => {
    const m = memory();
    const { clock, store } = m;
    // wait_interval_ms 100: the period is 5000 ms, halved by random 0, so polls come every 2500 ms
    const admission = engine(m, { safety_poll_ms: 5000, wait_timeout_ms: 10_000 }, zero);
    const channel = { id: 'slow', maxConcurrency: 1 };
    const holder = await admission.acquire({ candidates: [channel] });
    const controller = new AbortController();
    const polls = recordPolls(clock, store);
    const pollWaiter = store.pollWaiter.bind(store);
    store.pollWaiter = (waiter) => {
      controller.abort(); // lands while the poll is under way: the signal has fired before the next sleep
      return pollWaiter(waiter);
    };
    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: [channel], signal: controller.signal }));
    await flush(); // queued at t0
    await clock.advance(2499);
    expect([polls.length, pending.at]).toEqual([0, undefined]);
    await elapse(clock, 1);
    expect(polls).toEqual([t0 + 2500]);
    expect([pending.at, failedWith(pending).reason]).toEqual([t0 + 2500, 'aborted']);
    await clock.advance(10_000);
    expect(polls).toHaveLength(1); // no poll after the abort
    expect(await load(store, 'slow')).toMatchObject({ active: 1, waiting: 0 });
    await holder.release();
  });
});

describe('the safety poll', () => {
  it('finds a grant whose message was lost at its first poll, and claims it', async () => {
    const m = memory();
    const { clock, store } = m;
    loseGrants(store);
    const polls = recordPolls(clock, store);
    // random 0.5: the poll sleeps 1000 + 0.5 × 1000 ms of the 2000 ms period
    const admission = engine(m, POLL_2S, { random: () => 0.5 });
    const other = engine(m, POLL_2S, zero);
    const channel = { id: 'lost', maxConcurrency: 1 };
    const [holder] = await hold(other, channel);
    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    await holder!.release(); // granted, but the message never arrives
    await clock.advance(1489); // +1499
    expect([pending.at, polls]).toEqual([undefined, []]);
    expect(await load(store, 'lost')).toMatchObject({ active: 1, waiting: 0 }); // the grant holds the slot
    await elapse(clock, 1);
    expect(polls).toEqual([t0 + 1500]);
    expect([pending.at, pending.value?.waitedMs]).toEqual([t0 + 1500, 1500]);
    // claimed: a full lease, past the claim deadline
    await clock.advance(10_000);
    expect(await orphanSlot(store, channel, 'late:1')).toEqual(['full']);
    await pending.value!.release();
  });

  it('checks at once when the subscription comes back after a loss: a grant lost meanwhile is claimed then', async () => {
    const m = memory();
    const { clock, store } = m;
    const resync = loseGrants(store);
    const polls = recordPolls(clock, store);
    const admission = engine(m, {}, zero); // defaults: the first safety poll is 2500 ms away
    const other = engine(m, {}, zero);
    const channel = { id: 'resync', maxConcurrency: 1 };
    const [holder] = await hold(other, channel);
    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    await holder!.release(); // granted, but the message never arrives
    await elapse(clock, 290);
    expect([pending.at, polls]).toEqual([undefined, []]);
    resync(); // the subscription is back: every waiter checks its queues now
    await flush();
    expect(polls).toEqual([t0 + 300]);
    expect([pending.at, pending.value?.waitedMs]).toEqual([t0 + 300, 300]);
    await pending.value!.release();
  });

  it('a grant message arriving after its waiter claimed the grant by a poll leaves the lease alone', async () => {
    const m = memory();
    const { clock, store } = m;
    const resync = loseGrants(store);
    const listeners: QueueListener[] = [];
    const listen = store.listen.bind(store);
    store.listen = (id, listener) => {
      listeners.push(listener);
      return listen(id, listener);
    };
    const admission = engine(m, {}, zero);
    const other = engine(m, {}, zero);
    const channel = { id: 'late', maxConcurrency: 1 };
    const [holder] = await hold(other, channel);
    const pending = track(clock, admission.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    await holder!.release(); // granted; the message is lost
    resync(); // the waiter polls and claims the grant
    await flush();
    const ticket = pending.value!;
    expect(ticket.channel.id).toBe('late');
    // the lost message turns up after all, late: the waiter is gone, but the slot is its lease
    listeners[0]!.grant({ kind: 'claim', channelId: 'late', token: ticket.token! });
    await flush();
    expect(await load(store, 'late')).toMatchObject({ active: 1 });
    expect(await orphanSlot(store, channel, 'newcomer:1')).toEqual(['full']);
    await ticket.release();
  });

  it('a waiter the store lost (a restarted store) joins the queue again at its next poll', async () => {
    const { clock, store, admission, other } = setup(POLL_2S, zero);
    const channel = { id: 'restart', maxConcurrency: 1 };
    await hold(other, channel);
    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    await store.close(); // every slot and queue gone
    await clock.advance(989); // +999
    expect(pending.at).toBeUndefined();
    await elapse(clock, 1);
    // its poll finds it gone; it enqueues again and, the channel being free, is granted at once
    expect([pending.at, pending.value?.waitedMs]).toEqual([t0 + 1000, 1000]);
    expect(store.commands.wait).toBe(3); // enqueue, poll, enqueue
    expect(await load(store, 'restart')).toMatchObject({ active: 1, waiting: 0 });
    await pending.value!.release();
  });

  it('an unlimited candidate that stopped cooling takes the request at the next poll, and the queue is left', async () => {
    const { clock, store, admission, other } = setup(POLL_2S, zero);
    const bounded = { id: 'b', maxConcurrency: 1, priority: 1 };
    const unlimited = { id: 'u', priority: 0 };
    const held = await hold(other, bounded);
    await admission.cooldown(unlimited, { ms: 1500 });
    const t0 = clock.now();
    const pending = track(clock, admission.acquire({ candidates: [bounded, unlimited] }));
    await flush(); // queued at t0
    await clock.advance(1999);
    expect(pending.at).toBeUndefined(); // the poll at +1000 still saw it cooling
    await elapse(clock, 1);
    expect([pending.at, pending.value?.channel.id, pending.value?.token]).toEqual([
      t0 + 2000,
      'u',
      undefined,
    ]);
    expect(await load(store, 'b')).toMatchObject({ active: 1, waiting: 0 });
    expect(store.commands.wait).toBe(1 + 1 + 1); // enqueue, the poll at +1000, leave
    await pending.value!.release();
    for (const t of held) await t.release();
  });
});

describe('slot handoff and the queue', () => {
  /** Engines on a store that holds releases until the end of the turn, as RedisStore does. */
  function holding() {
    const m = memory();
    holdReleases(m.store);
    return { ...m, admission: engine(m, {}, zero), other: engine(m, {}, zero) };
  }

  it('with nobody waiting, a slot released in this turn passes to the next acquire of this instance', async () => {
    const { store, admission } = holding();
    const channel = { id: 'h', maxConcurrency: 1 };
    const [first] = await hold(admission, channel);
    const acquires = store.commands.acquire;
    void first!.release();
    const next = await admission.acquire({ candidates: [channel] });
    await flush();
    expect(next.token).toBe(first!.token);
    expect(admission.stats().handoffs).toBe(1);
    expect([store.commands.acquire - acquires, store.commands.release]).toEqual([0, 0]);
    expect((await load(store, 'h')).active).toBe(1);
    await next.release();
    await flush();
    expect((await load(store, 'h')).active).toBe(0);
  });

  it('never while a waiter is queued: the slot goes to the waiter, the acquire queues behind it', async () => {
    const { clock, store, admission, other } = holding();
    const channel = { id: 'h', maxConcurrency: 1, maxWaiting: 4 };
    const [holder] = await hold(admission, channel);
    const t0 = clock.now();
    const waiter = track(clock, other.acquire({ candidates: [channel] }));
    await elapse(clock, 10);
    void holder!.release();
    const late = track(clock, admission.acquire({ candidates: [channel] })); // in the same turn
    await flush();
    expect([waiter.at, waiter.value?.waitedMs, late.at]).toEqual([t0 + 10, 10, undefined]);
    expect(await load(store, 'h')).toMatchObject({ active: 1, waiting: 1 });
    await elapse(clock, 10);
    void waiter.value!.release(); // the other instance's: it has a waiter queued too, so no handoff there either
    await flush();
    expect([late.at, late.value?.waitedMs]).toEqual([t0 + 20, 10]);
    expect([admission.stats().handoffs, other.stats().handoffs]).toEqual([0, 0]);
    await late.value!.release();
  });

  it('a slot parked before a queue formed is not taken over once there is one: it goes to the waiter', async () => {
    const { clock, store, admission } = holding();
    const channel = { id: 'h', maxConcurrency: 1, maxWaiting: 4 };
    const [holder] = await hold(admission, channel);
    void holder!.release(); // parked: nobody waits yet
    expect(await foreignWaiter(store, channel, 1)).toBe('queued'); // in the same turn, a waiter queues
    const controller = new AbortController();
    const late = track(clock, admission.acquire({ candidates: [channel], signal: controller.signal }));
    await flush();
    expect([admission.stats().handoffs, late.at]).toEqual([0, undefined]);
    // The removal went out at the end of the turn: the slot is the foreign waiter's, and the acquire queued behind.
    expect(await store.pollWaiter({ channelId: 'h', token: 'foreign:1', max: 1 })).toBe('granted');
    expect(await load(store, 'h')).toMatchObject({ active: 1, waiting: 1 });
    controller.abort();
    await flush();
    expect(failedWith(late).reason).toBe('aborted');
    expect(await load(store, 'h')).toMatchObject({ active: 1, waiting: 0 });
  });
});

describe('arrival', () => {
  /**
   * One acquire on a channel another engine holds, the pass before its registration slowed by `slow` (a store call
   * of this instance taking time): how long before its registration its request arrived, and how much time passed.
   */
  async function arrivalOf(
    id: string,
    slow: (store: MemoryStore, clock: ManualClock) => void,
    caller: { arrivedMsAgo?: number; client?: Client } = {},
  ): Promise<{ arrivedMsAgo: number | undefined; took: number }> {
    const { clock, store, admission, other } = setup({}, zero);
    const channel = { id, maxConcurrency: 1 };
    await hold(other, channel);
    slow(store, clock);
    const seen: { arrivedMsAgo: number | undefined; at: number }[] = [];
    const enqueue = store.enqueue.bind(store);
    store.enqueue = (waiter, options) => {
      seen.push({ arrivedMsAgo: options.arrivedMsAgo, at: clock.now() });
      return enqueue(waiter, options);
    };
    const t0 = clock.now();
    track(clock, admission.acquire({ candidates: [channel], ...caller }));
    await elapse(clock, 100);
    expect(seen).toHaveLength(1);
    return { arrivedMsAgo: seen[0]!.arrivedMsAgo, took: seen[0]!.at - t0 };
  }

  /** Each acquire call of this instance takes 10 ms (then `after`, if given). */
  function slowAcquires(store: MemoryStore, clock: ManualClock, after?: () => void): void {
    const acquire = store.acquireFirst.bind(store);
    store.acquireFirst = async (...args) => {
      await clock.advance(10);
      after?.();
      return acquire(...args);
    };
  }

  it("a waiter's registration says how long before it its request arrived (the queue orders it as of then)", async () => {
    // the pass before the registration takes time: each store call of this instance 10 ms
    const { arrivedMsAgo, took } = await arrivalOf('arrival', (store, clock) => {
      for (const name of ['readLoads', 'acquireFirst'] as const) {
        const call = store[name].bind(store) as (...args: unknown[]) => Promise<unknown>;
        (store as unknown as Record<string, unknown>)[name] = async (...args: unknown[]) => {
          await clock.advance(10);
          return call(...args);
        };
      }
    });
    expect(took).toBeGreaterThan(0);
    expect(arrivedMsAgo).toBe(took);
  });

  it("on the clock's precise reading where it has one: arrivals within a millisecond keep their order", async () => {
    // the precise clock runs 0.25 ms past now() when the request arrives, 0.75 ms past it when it registers
    const { arrivedMsAgo, took } = await arrivalOf('arrival-precise', (store, clock) => {
      let fraction = 0.25;
      (clock as Clock).precise = () => clock.now() + fraction;
      slowAcquires(store, clock, () => (fraction = 0.75));
    });
    expect(took).toBeGreaterThanOrEqual(10);
    // by now() alone it would be a whole number of ms
    expect(arrivedMsAgo).toBe(took + 0.5);
  });

  it("the caller's arrivedMsAgo (the request reached it that long before the acquire) counts on top", async () => {
    const { arrivedMsAgo, took } = await arrivalOf('arrival-caller', slowAcquires, { arrivedMsAgo: 7.5 });
    expect(took).toBeGreaterThanOrEqual(10);
    expect(arrivedMsAgo).toBe(took + 7.5);
  });

  it("a limited client's request stands as of its arrival, before it took its client's own slot", async () => {
    // each acquire call 10 ms: the client's slot, then the channel's
    const { arrivedMsAgo, took } = await arrivalOf('arrival-client', slowAcquires, {
      client: { id: 'limited', maxConcurrency: 5 },
    });
    expect(took).toBeGreaterThanOrEqual(20);
    expect(arrivedMsAgo).toBe(took);
  });

  it('an arrivedMsAgo that is not a finite number ≥ 0 is a TypeError, and nothing is asked of the store', async () => {
    const { store, admission } = setup({}, zero);
    const channel = { id: 'arrival-bad', maxConcurrency: 1 };
    for (const bad of [-1, Number.NaN, Infinity, '3' as unknown as number]) {
      await expect(admission.acquire({ candidates: [channel], arrivedMsAgo: bad })).rejects.toThrow(
        /Expected `arrivedMsAgo` to be a finite number ≥ 0/,
      );
    }
    expect((await store.readLoads([channel.id])).get(channel.id)).toMatchObject({ active: 0, waiting: 0 });
  });
});
