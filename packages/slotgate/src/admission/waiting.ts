/**
 * Waiting: when every candidate is full, a pass queues in the FIFO queue of up to QUEUES_PER_WAITER full channels
 * (one token in each) and sleeps until the store grants it a slot: the release that frees a slot gives it to the
 * oldest live waiter of that channel, whichever instance it is on, and tells that waiter's instance. The waiter
 * claims the first grant (one renewal makes it a full lease), and leaves its other queues, where a grant it got too
 * passes on. A slow safety poll covers a lost message or a Redis that lost the queue. Time-out and abort end the
 * wait; the registrations are always removed on the way out, detached from cancellation.
 */
import { isBounded, type Candidate } from '../core/channel.js';
import { jitter } from '../core/backoff.js';
import { CapacityError, SlotgateError, StoreUnavailableError } from '../core/errors.js';
import type { Settings } from '../core/settings.js';
import type { Lease } from '../store/leases.js';
import type { ChannelLoad, EnqueueOptions, WaiterRef } from '../store/store.js';
import type { Prepared } from './candidates.js';
import { maxWaitingOf } from './decide.js';
import type { Engine } from './engine.js';
import type { Ticket } from './types.js';

/** How long a registration outlives the wait deadline, so a live waiter never loses its place to expiry. */
const WAITER_TTL_MARGIN_MS = 2000;
/** Queues one waiter joins at most: more spreads its chances, and costs a grant that passes on per extra queue. */
export const QUEUES_PER_WAITER = 2;
/** The abort reason of a waiter's nap cut short by a grant (a constant: no DOMException per wake-up). */
const WOKEN = Object.freeze({ woken: true });

/**
 * The safety poll's period: a grant arrives as a message, and a subscription that comes back after a loss makes every
 * waiter check at once (Inbox.resync), so the poll only makes good what neither covers — a lease that expired with
 * nobody looking, a grant to an instance that died.
 */
export function safetyPollMs(settings: Settings): number {
  return Math.min(10_000, Math.max(2000, settings.wait_interval_ms * 50));
}

export async function waitForSlot<C extends Candidate>(
  engine: Engine,
  queues: readonly C[],
  /** The load view as the pass last saw it (undefined when it holds nothing current): queues it shows full are skipped. */
  shown: ReadonlyMap<string, ChannelLoad> | undefined,
  prepared: Prepared<C>,
  saturated: readonly C[],
  settings: Settings,
  signal?: AbortSignal,
): Promise<Ticket<C>> {
  const { candidates } = prepared;
  const { clock, view, store, inbox, leases } = engine;
  const fail = (reason: 'aborted' | 'wait_timeout' | 'queue_full', on?: C) =>
    engine.capacityError(reason, candidates, saturated, on);
  const token = leases.nextToken();
  const refOf = (c: C): WaiterRef => ({ channelId: c.id, token, max: c.maxConcurrency! });
  const optionsOf = (c: C): EnqueueOptions => ({
    maxWaiting: maxWaitingOf(c, settings),
    ttlMs: settings.wait_timeout_ms + WAITER_TTL_MARGIN_MS,
    leaseTtlMs: settings.lease_ttl_ms,
  });
  const box = inbox.open(token);
  const joined: C[] = [];
  let claimed: C | undefined;
  const waitStart = clock.now();
  const deadline = waitStart + settings.wait_timeout_ms;
  const byId = new Map(queues.map((c) => [c.id, c]));

  /** Joins the channel's queue: `granted` when a slot was free and nobody ahead (the caller claims it). */
  const join = async (c: C): Promise<'granted' | 'queued' | 'queue_full'> => {
    inbox.joined(c.id, token);
    view.noteWaiter(c.id, 1);
    let reply;
    try {
      reply = await store.enqueue(refOf(c), optionsOf(c));
    } catch (err) {
      unjoin(c);
      throw err;
    }
    if (reply === 'queue_full') {
      unjoin(c);
      view.noteQueueFull(c.id, maxWaitingOf(c, settings));
    } else {
      joined.push(c);
    }
    return reply;
  };
  /**
   * Joins the queues of `batch` at once (their enqueues leave in one flight, so this waiter stands at nearly the same
   * place in each, ahead of whoever arrives after it); claims the first slot granted at once. Another grant at once
   * is given back by the leave on the way out.
   */
  const joinAll = async (batch: readonly C[]): Promise<Ticket<C> | undefined> => {
    const replies = await Promise.allSettled(batch.map(join));
    const failed = replies.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    for (let i = 0; i < batch.length; i++) {
      const reply = replies[i] as PromiseFulfilledResult<'granted' | 'queued' | 'queue_full'>;
      if (reply.value !== 'granted') continue;
      const lease = await claim(batch[i]!);
      if (lease) return admitted(batch[i]!, lease);
      drop(batch[i]!);
    }
    return undefined;
  };
  /** Forgets a queue this waiter is no longer in (its grant was claimed too late, or the queue lost it). */
  const drop = (c: C) => {
    joined.splice(joined.indexOf(c), 1);
    unjoin(c);
  };
  const unjoin = (c: C) => {
    inbox.left(c.id, token);
    view.noteWaiter(c.id, -1);
  };
  /**
   * Makes a grant on the channel this waiter's lease; undefined when it was gone before the claim. A grant that is a
   * full lease already (this instance's own release made it) is taken over with no store call.
   */
  const claim = async (c: C): Promise<Lease | undefined> => {
    const leased = box.leased.get(c.id);
    box.leased.delete(c.id);
    const lease =
      leased !== undefined
        ? leases.adopt(c.id, token, c.maxConcurrency!, leased)
        : await leases.claim(c.id, token, c.maxConcurrency!);
    if (lease) claimed = c;
    return lease;
  };
  const admitted = (c: C, lease: Lease): Ticket<C> => {
    const waited = clock.now() - waitStart;
    engine.recorder.waitTime.observe(waited);
    engine.recorder.grants++;
    return engine.tickets.bounded(c, lease, waited, signal);
  };

  try {
    // A queue this instance saw full since its last load read is not asked again (its view shows it full); under
    // overload that keeps the turned-away requests off Redis.
    let next = 0;
    while (joined.length < QUEUES_PER_WAITER && next < queues.length) {
      if (signal?.aborted) throw fail('aborted', joined[0] ?? queues[next]);
      const batch: C[] = [];
      while (joined.length + batch.length < QUEUES_PER_WAITER && next < queues.length) {
        const c = queues[next++]!;
        if ((shown?.get(c.id)?.waiting ?? 0) < maxWaitingOf(c, settings)) batch.push(c);
      }
      if (batch.length === 0) break;
      const ticket = await joinAll(batch);
      if (ticket) return ticket;
    }
    if (joined.length === 0) throw fail('queue_full', queues[0]);

    let napping: AbortController | undefined;
    box.onGrant = () => napping?.abort(WOKEN);
    const safety = safetyPollMs(settings);
    let nextPoll = clock.now() + jitter(safety, engine.random);
    for (;;) {
      if (signal?.aborted) throw fail('aborted', joined[0]);
      // Grants first: each is claimed in arrival order; one gone before its claim just leaves that queue.
      while (box.granted.length > 0) {
        const c = byId.get(box.granted.shift()!);
        if (!c || !joined.includes(c)) continue;
        const lease = await claim(c);
        if (lease) return admitted(c, lease);
        drop(c);
      }
      const now = clock.now();
      if (now >= deadline) throw fail('wait_timeout', joined[0]);
      if (joined.length === 0) throw fail('wait_timeout', queues[0]);
      if (box.recheck || now >= nextPoll) {
        box.recheck = false;
        const lease = await safetyPoll();
        if (lease) return lease;
        nextPoll = clock.now() + jitter(safety, engine.random);
        continue;
      }
      napping = new AbortController();
      const nap = napping;
      const onAbort = () => nap.abort(signal?.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        await clock.sleep(Math.min(nextPoll, deadline) - now, nap.signal);
      } catch {
        // woken by a grant or by the caller's abort
      } finally {
        signal?.removeEventListener('abort', onAbort);
        napping = undefined;
      }
    }
  } catch (err) {
    if (!(err instanceof SlotgateError)) throw err;
    if (err instanceof CapacityError) engine.recorder.waitTime.observe(clock.now() - waitStart);
    throw err;
  } finally {
    inbox.close(token);
    for (const c of joined) {
      unjoin(c);
      if (c === claimed) continue;
      // Out of the queue, and a grant it got there passes on; the registration's expiry is the backstop.
      void store.leaveQueue(refOf(c), settings.lease_ttl_ms).catch(() => {});
    }
  }

  /**
   * The slow check of every queue joined: a grant the message of which was lost is claimed; a queue that lost this
   * waiter (Redis restarted) is joined again; an unlimited candidate that stopped cooling takes the request.
   */
  async function safetyPoll(): Promise<Ticket<C> | undefined> {
    const unlimited = candidates.find((c) => !isBounded(c) && !engine.cooldowns.isCooling(c));
    if (unlimited) return engine.tickets.unlimited(unlimited);
    for (const c of [...joined]) {
      let state;
      try {
        state = await store.pollWaiter(refOf(c), settings.lease_ttl_ms);
      } catch (err) {
        if (err instanceof StoreUnavailableError) continue; // the next poll, or the deadline, decides
        throw err;
      }
      if (state === 'granted') {
        const lease = await claim(c);
        if (lease) return admitted(c, lease);
        drop(c);
      } else if (state === 'gone') {
        drop(c);
        const ticket = await joinAll([c]);
        if (ticket) return ticket;
      }
    }
    return undefined;
  }
}
