/**
 * Waiting: when every candidate is full, a pass queues in the FIFO queue of up to QUEUES_PER_WAITER full channels
 * (one token in each) and sleeps until the store grants it a slot: the release that frees a slot gives it to the
 * oldest live waiter of that channel, whichever instance it is on, and tells that waiter's instance. The waiter
 * claims the first grant (one renewal makes it a full lease), and leaves its other queues, where a grant it got too
 * passes on. A slow safety poll covers a lost message or a Redis that lost the queue. Time-out and abort end the
 * wait; the registrations are always removed on the way out, detached from cancellation.
 *
 * The candidate set is resolved again when the configuration changes (Admission.configChanged) and at every safety
 * poll, before any grant is claimed: the waiter leaves the queues of channels no longer in its set, moves to a
 * channel's new max in its place in the queue (under a new token, so no grant made under the old max is claimed),
 * tries the channels the change opened to it, joins another queue for one it left, and when none of its queues is
 * left, the acquire goes on with a new pass over the new set, under the same deadline.
 */
import { isBounded, type Candidate } from '../core/channel.js';
import { jitter } from '../core/backoff.js';
import { preciseNow } from '../core/clock.js';
import { CapacityError, NoChannelError, SlotgateError, StoreUnavailableError } from '../core/errors.js';
import { shareSuffix } from '../core/ids.js';
import type { Settings } from '../core/settings.js';
import type { Lease } from '../store/leases.js';
import type { ChannelLoad, EnqueueOptions, EnqueueReply, WaiterRef } from '../store/store.js';
import type { Prepared } from './candidates.js';
import { maxWaitingOf, waitQueues } from './decide.js';
import { tryAcquire, type Attempt, type Engine, type Moved } from './engine.js';
import type { Ticket } from './types.js';

/** How long a registration outlives the wait deadline, so a live waiter never loses its place to expiry. */
const WAITER_TTL_MARGIN_MS = 2000;
/** Queues one waiter joins at most: more spreads its chances, and costs a grant that passes on per extra queue. */
export const QUEUES_PER_WAITER = 2;
/** The abort reason of a waiter's nap cut short by a grant (a constant: no DOMException per wake-up). */
const WOKEN = Object.freeze({ woken: true });
/** What a request whose candidate set became empty while it waited is told. */
export const NO_CHANNEL_LEFT =
  'no enabled channel is left in the candidate set: the configuration changed while the request waited';

/** A queue this waiter stands in: the channel, the token it stands there under, and the max it waits under. */
interface Place<C extends Candidate> {
  channel: C;
  token: string;
  max: number;
}

/** A registration to make: the place, and the store call that makes it (an enqueue, or a requeue of an older one). */
type Registration<C extends Candidate> = [Place<C>, () => Promise<EnqueueReply>];

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
  attempt: Attempt<C>,
): Promise<Ticket<C> | Moved<C>> {
  const { clock, view, store, inbox, leases } = engine;
  const { request } = attempt;
  const { signal } = request;
  /** The candidate set in force for this waiter, and the configuration generation it was resolved at. */
  let current = prepared;
  let seen = attempt.generation;
  const fail = (reason: 'aborted' | 'wait_timeout' | 'queue_full', on?: C) =>
    engine.capacityError(reason, current.candidates, saturated, on);
  const share = shareSuffix(request.client);
  const token = leases.nextToken(share);
  const box = inbox.open(token);
  /** Every token this waiter's grants arrive under (a moved registration has a new one). */
  const tokens = [token];
  const places: Place<C>[] = [];
  /** The first of its queues that turned this waiter away (full), if any. */
  let turnedAway: C | undefined;
  let claimed: Place<C> | undefined;
  const waitStart = attempt.span?.start ?? clock.now();
  const deadline = attempt.span?.deadline ?? waitStart + settings.wait_timeout_ms;
  const refOf = (p: Place<C>): WaiterRef => ({ channelId: p.channel.id, token: p.token, max: p.max });
  const optionsOf = (c: C): EnqueueOptions => ({
    maxWaiting: maxWaitingOf(c, settings),
    ttlMs: Math.max(0, deadline - clock.now()) + WAITER_TTL_MARGIN_MS,
    keyTtlMs: settings.wait_timeout_ms + WAITER_TTL_MARGIN_MS,
    leaseTtlMs: settings.lease_ttl_ms,
    // (the store clamps it to [0, MAX_ARRIVAL_LEAD_MS])
    arrivedMsAgo: preciseNow(clock) - attempt.arrivedAt,
  });
  const enqueueing = (p: Place<C>): Registration<C> => [
    p,
    () => store.enqueue(refOf(p), optionsOf(p.channel)),
  ];

  /** The waiter counts on the channel in this instance's loads, and grants to the place's token reach it. */
  const enter = (p: Place<C>) => {
    inbox.joined(p.channel.id, p.token);
    view.noteWaiter(p.channel.id, 1);
  };
  const exit = (p: Place<C>) => {
    inbox.left(p.channel.id, p.token);
    view.noteWaiter(p.channel.id, -1);
  };
  /** Makes one registration: `granted` when a slot was free and nobody ahead (the caller claims it). */
  const register = async ([p, call]: Registration<C>): Promise<EnqueueReply> => {
    enter(p);
    let reply;
    try {
      reply = await call();
    } catch (err) {
      exit(p);
      throw err;
    }
    if (reply === 'queue_full') {
      turnedAway ??= p.channel;
      exit(p);
      view.noteQueueFull(p.channel.id, maxWaitingOf(p.channel, settings));
    } else {
      places.push(p);
    }
    return reply;
  };
  /**
   * Makes the registrations of `batch` at once (their calls leave in one flight, so this waiter stands at nearly the
   * same place in each, ahead of whoever arrives after it); claims the first slot granted at once. Another grant at
   * once is given back by the leave on the way out.
   */
  const settle = async (batch: readonly Registration<C>[]): Promise<Ticket<C> | undefined> => {
    const replies = await Promise.allSettled(batch.map(register));
    const failed = replies.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    for (let i = 0; i < batch.length; i++) {
      const reply = replies[i] as PromiseFulfilledResult<EnqueueReply>;
      if (reply.value !== 'granted') continue;
      const p = batch[i]![0];
      const lease = await claim(p);
      if (lease) return admitted(p, lease);
      drop(p);
    }
    return undefined;
  };
  /** Forgets a queue this waiter is no longer in (its grant was claimed too late, or the queue lost it). */
  const drop = (p: Place<C>) => {
    places.splice(places.indexOf(p), 1);
    exit(p);
  };
  /**
   * Makes a grant on the channel this waiter's lease; undefined when it was gone before the claim. A grant that is a
   * full lease already (this instance's own release made it) is taken over with no store call; one known to hold its
   * slot for a while yet (its message named its claim deadline) is held at once and claimed after, so a grant made by
   * another instance does not wait a round trip more than one made here.
   */
  const claim = async (p: Place<C>): Promise<Lease | undefined> => {
    const id = p.channel.id;
    const leased = box.leased.get(id);
    const heldUntil = box.heldUntil.get(id);
    box.leased.delete(id);
    box.heldUntil.delete(id);
    // (claimAhead declines a hold too short to outlast its fence margin and a claim's round trip: claimed first)
    const lease =
      leased !== undefined
        ? leases.adopt(id, p.token, p.max, leased.ttlMs, leased.from)
        : ((heldUntil !== undefined
            ? leases.claimAhead(id, p.token, p.max, heldUntil - clock.now())
            : undefined) ?? (await leases.claim(id, p.token, p.max)));
    if (lease) claimed = p;
    return lease;
  };
  const admitted = (p: Place<C>, lease: Lease): Ticket<C> => {
    const waited = clock.now() - waitStart;
    engine.recorder.waitTime.observe(waited);
    engine.recorder.grants++;
    return engine.tickets.bounded(p.channel, lease, waited, signal);
  };

  try {
    // A wait carried over from an earlier pass may have no time left.
    if (attempt.span && clock.now() >= deadline) throw fail('wait_timeout', queues[0]);
    // A waiter whose queues this instance's view shows full, every one (saw full since its last load read), is turned
    // away without asking Redis: under overload that keeps the turned-away requests off Redis. One that shows room in
    // any asks each queue it would join, full-looking or not: a view that lags must not leave a waiter in fewer
    // queues than one arriving after it, which would then be served ahead of it there.
    const shownFull = (c: C) => (shown?.get(c.id)?.waiting ?? 0) >= maxWaitingOf(c, settings);
    const asks = queues.some((c) => !shownFull(c));
    let next = 0;
    while (places.length < QUEUES_PER_WAITER && next < queues.length) {
      if (signal?.aborted) throw fail('aborted', places[0]?.channel ?? queues[next]);
      const batch: Registration<C>[] = [];
      while (places.length + batch.length < QUEUES_PER_WAITER && next < queues.length) {
        const c = queues[next++]!;
        if (asks) batch.push(enqueueing({ channel: c, token, max: c.maxConcurrency! }));
      }
      if (batch.length === 0) break;
      const ticket = await settle(batch);
      if (ticket) return ticket;
    }
    if (places.length === 0) throw fail('queue_full', queues[0]);
    // A waiter stands in as many queues as it asks for (two, or each of a smaller set) or in none: one left in fewer
    // than a later waiter would be served after it wherever the later one's other queue frees first, and the queues
    // of a set would drift apart (docs/admission.md, "Two queues or none"). Only when a full queue turned it away, and
    // not once a grant reached it meanwhile (the wait below claims that).
    const granted = places.some((p) => box.granted.includes(p.channel.id));
    if (turnedAway && !granted && places.length < Math.min(QUEUES_PER_WAITER, queues.length)) {
      if (signal?.aborted) throw fail('aborted', turnedAway);
      throw fail('queue_full', turnedAway);
    }

    let napping: AbortController | undefined;
    box.onGrant = () => napping?.abort(WOKEN);
    const safety = safetyPollMs(settings);
    let nextPoll = clock.now() + jitter(safety, engine.random);
    for (;;) {
      if (signal?.aborted) throw fail('aborted', places[0]?.channel);
      // The candidate sets changed: this waiter follows its own before it claims any grant.
      if (engine.generation() !== seen) {
        const outcome = await reconfigure();
        if (outcome) return outcome;
        continue;
      }
      // Grants first: each is claimed in arrival order; one gone before its claim just leaves that queue.
      while (box.granted.length > 0) {
        const id = box.granted.shift()!;
        const p = places.find((q) => q.channel.id === id);
        if (!p) continue;
        const lease = await claim(p);
        if (lease) return admitted(p, lease);
        drop(p);
      }
      const now = clock.now();
      if (now >= deadline) throw fail('wait_timeout', places[0]?.channel);
      if (places.length === 0) throw fail('wait_timeout', queues[0]);
      if (box.recheck || now >= nextPoll) {
        box.recheck = false;
        const outcome = await safetyPoll();
        if (outcome) return outcome;
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
    for (const t of tokens) inbox.close(t);
    for (const p of places) {
      exit(p);
      if (p === claimed) continue;
      // Out of the queue, and a grant it got there passes on; the registration's expiry is the backstop. A waiter
      // that gives up also sweeps leases that ran out; one granted elsewhere need not.
      void store.leaveQueue(refOf(p), settings.lease_ttl_ms, claimed === undefined).catch(() => {});
    }
  }

  /**
   * Resolves the request's candidate set again and follows it: an unlimited candidate not cooling takes the request;
   * a queue whose channel left the set (disabled, removed, excluded, unlimited now) is left; a queue whose channel's
   * max changed is moved to the new max in its place (a new registration, any grant of the old one given back). With
   * no queue left, the acquire goes on with a new pass over the new set; with an empty set it fails as a new request
   * would (NoChannelError).
   */
  async function reconfigure(): Promise<Ticket<C> | Moved<C> | undefined> {
    seen = engine.generation();
    const previous = current;
    const next = engine.resolve(request);
    current = next;
    if (next.candidates.length === 0) throw new NoChannelError(NO_CHANNEL_LEFT);
    const unlimited = next.candidates.find((c) => !isBounded(c) && !engine.cooldowns.isCooling(c));
    if (unlimited) return engine.tickets.unlimited(unlimited);
    if (next === previous) return undefined;
    const moves: Registration<C>[] = [];
    let left = false;
    for (const p of [...places]) {
      const now = next.tierOf.get(p.channel.id)?.channel;
      if (now && now.maxConcurrency === p.max) {
        p.channel = now;
      } else if (now) {
        moves.push(move(p, now));
      } else {
        left = true;
        drop(p);
        void store.leaveQueue(refOf(p), settings.lease_ttl_ms).catch(() => {});
      }
    }
    const ticket = moves.length > 0 ? await settle(moves) : undefined;
    if (ticket) return ticket;
    if (places.length === 0) return { next, generation: seen, span: { start: waitStart, deadline } };
    return takeUp(previous, left);
  }

  /**
   * The channels of the new set this waiter does not stand in: those it could not use before (added, enabled, or
   * under a raised max) are tried with one acquire call, which never takes a slot ahead of a queue; a waiter that left
   * a queue joins others in its place, emptiest first, as it joined its first ones.
   */
  async function takeUp(previous: Prepared<C>, left: boolean): Promise<Ticket<C> | undefined> {
    const before = new Map(previous.shape.filter((s) => s.enabled).map((s) => [s.id, s.max]));
    const loads = view.peek(current.ids, false, true);
    const others = current.bounded.filter(
      (c) => !places.some((p) => p.channel.id === c.id) && !engine.cooldowns.isCooling(c, loads),
    );
    const opened = others.filter((c) => (before.get(c.id) ?? 0) < c.maxConcurrency!);
    if (opened.length > 0) {
      const outcome = await tryAcquire(engine, opened.slice(0, store.maxChannelsPerAcquire), settings, share);
      if (outcome.lease) {
        const waited = clock.now() - waitStart;
        engine.recorder.waitTime.observe(waited);
        return engine.tickets.bounded(opened[outcome.replies.length - 1]!, outcome.lease, waited, signal);
      }
    }
    if (!left || places.length >= QUEUES_PER_WAITER) return undefined;
    const joining = waitQueues(others, loads ?? new Map(), engine.random).slice(
      0,
      QUEUES_PER_WAITER - places.length,
    );
    return settle(joining.map((c) => enqueueing({ channel: c, token: newToken(), max: c.maxConcurrency! })));
  }

  /** A token of this waiter's for a new registration: grants made to it reach this waiter's mailbox. */
  function newToken(): string {
    const fresh = leases.nextToken(share);
    tokens.push(fresh);
    inbox.attach(fresh, box);
    return fresh;
  }

  /**
   * The registration that replaces `p` under `to`'s max: a new token, so a grant made to `p`'s, delivered or still on
   * its way, is never claimed (the store gives it back, and so does the inbox when it arrives).
   */
  function move(p: Place<C>, to: C): Registration<C> {
    drop(p);
    box.leased.delete(p.channel.id);
    for (let i = box.granted.length - 1; i >= 0; i--)
      if (box.granted[i] === p.channel.id) box.granted.splice(i, 1);
    const moved: Place<C> = { channel: to, token: newToken(), max: to.maxConcurrency! };
    return [moved, () => store.requeue(refOf(p), refOf(moved), optionsOf(to))];
  }

  /**
   * The slow check of every queue joined, after the candidate set is resolved again: a grant the message of which was
   * lost is claimed; a queue that lost this waiter (Redis restarted) is joined again.
   */
  async function safetyPoll(): Promise<Ticket<C> | Moved<C> | undefined> {
    const outcome = await reconfigure();
    if (outcome) return outcome;
    for (const p of [...places]) {
      let state;
      try {
        state = await store.pollWaiter(refOf(p), settings.lease_ttl_ms);
      } catch (err) {
        if (err instanceof StoreUnavailableError) continue; // the next poll, or the deadline, decides
        throw err;
      }
      if (state === 'granted') {
        const lease = await claim(p);
        if (lease) return admitted(p, lease);
        drop(p);
      } else if (state === 'gone') {
        drop(p);
        const ticket = await settle([enqueueing({ ...p })]);
        if (ticket) return ticket;
      }
    }
    return undefined;
  }
}
