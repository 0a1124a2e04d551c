/**
 * Passes of an acquire. One pass walks the tiers from the highest priority down, tries bounded channels under one
 * budget, admits an unlimited one at once and waits when all are full; a store failure fails bounded channels closed
 * and the walk goes on. Passes run until one admits: a ticket admitted while the configuration changed stands only if
 * the set in force allows it (its channel there, its max not below its lease's); else its slot goes back and the
 * request passes again.
 */
import { abortable } from '../../core/abort.js';
import { isBounded, type Candidate } from '../../core/channel.js';
import { NoChannelError, StoreUnavailableError } from '../../core/errors.js';
import { shareSuffix } from '../../core/ids.js';
import { weightedPick } from '../../core/order.js';
import type { Lease } from '../leases/lease-manager.js';
import type { AcquireReply, ChannelLoad } from '../../store/store.js';
import type { Prepared } from './candidates.js';
import { nextBatch, orderTier, waitQueues } from './decide.js';
import { tryAcquire, type Attempt, type Engine, type Moved, type WaitSpan } from '../engine.js';
import type { AcquireRequest, Ticket } from '../types.js';
import { NO_CHANNEL_LEFT } from '../waiting/reconfigure.js';
import { waitForSlot } from '../waiting/waiter.js';

export async function admitInForce<C extends Candidate>(
  engine: Engine,
  request: AcquireRequest<C>,
  prepared: Prepared<C>,
  arrivedAt: number,
  /** A wait already under way (for a limited client's own slot): its deadline holds for the whole acquire. */
  waited?: WaitSpan,
): Promise<Ticket<C>> {
  const { clock } = engine;
  let configVersion = engine.configVersion();
  let span: WaitSpan | undefined = waited;
  for (;;) {
    if (prepared.candidates.length === 0) {
      throw span ? new NoChannelError(NO_CHANNEL_LEFT) : new NoChannelError();
    }
    const result = await runPass(engine, prepared, { request, configVersion, arrivedAt, span });
    if ('next' in result) {
      ({ next: prepared, configVersion, span } = result);
      continue;
    }
    const waited = span && result.waitedMs === 0 ? { ...result, waitedMs: clock.now() - span.start } : result;
    if (engine.configVersion() === configVersion) return waited;
    configVersion = engine.configVersion();
    prepared = engine.resolve(request);
    const kept = stillAdmitted(engine, waited, prepared);
    if (kept) return kept;
    void waited.release({ handoff: false });
    const start = span?.start ?? clock.now() - waited.waitedMs;
    span ??= { start, deadline: start + engine.settings().wait_timeout_ms };
  }
}

/** The ticket under the set in force (with that set's channel object), or undefined if the set does not allow it. */
function stillAdmitted<C extends Candidate>(
  engine: Engine,
  ticket: Ticket<C>,
  now: Prepared<C>,
): Ticket<C> | undefined {
  const channel = now.candidates.find((c) => c.id === ticket.channel.id);
  if (!channel) return undefined;
  if (ticket.token === undefined) {
    if (isBounded(channel)) return undefined;
  } else if (isBounded(channel)) {
    // the max it was admitted under is its lease's (a rare path: the scan is fine)
    let admittedUnder = 0;
    for (const lease of engine.leases.leases()) if (lease.token === ticket.token) admittedUnder = lease.max;
    if (channel.maxConcurrency! < admittedUnder) return undefined;
  }
  return channel === ticket.channel ? ticket : { ...ticket, channel };
}

/** One pass over a prepared candidate set: a ticket, or the set to go on with when the waiter's set changed. */
export async function runPass<C extends Candidate>(
  engine: Engine,
  prepared: Prepared<C>,
  attempt: Attempt<C>,
): Promise<Ticket<C> | Moved<C>> {
  const { candidates, byTier, bounded, ids } = prepared;
  const { signal } = attempt.request;
  const { view, cooldowns, tickets, handoff } = engine;
  const settings = engine.settings();

  // no bounded channel: weighted random in the highest tier with a channel not cooling, no store command
  if (bounded.length === 0) {
    for (const tier of byTier) {
      const pick = weightedPick(
        tier.filter((c) => !cooldowns.isCooling(c)),
        engine.random,
      );
      if (pick) return tickets.unlimited(pick);
    }
    throw engine.capacityError('full', candidates, []);
  }

  const handoffOn = settings.slot_handoff_enabled;
  const canWait = settings.wait_enabled && settings.wait_timeout_ms > 0;
  const share = shareSuffix(attempt.request.client);
  /** A slot released in this turn on a channel of tier `t`, taken over with no store command. */
  const takeHandoff = (t: number, loads: ReadonlyMap<string, ChannelLoad> | undefined) => {
    if (signal?.aborted) return undefined;
    const handed = handoff.take(
      prepared,
      (tier) => tier === t,
      // never onto a channel with waiters: its slots go to them, in their order
      (c) => cooldowns.allowsHandoff(c, loads) && !engine.store.queued(c.id),
      share,
    );
    return handed && tickets.bounded(handed.channel, handed.lease, 0, signal);
  };

  // the first tier's parked slots come before any load read: nothing ranks above that tier, and a handoff needs no
  // fresh load (cooling comes from the last snapshot and local cooldowns); with the cache off the store is read first
  let firstTierChecked = false;
  if (handoffOn && settings.load_cache_enabled && handoff.available) {
    const handed = takeHandoff(0, view.peek(ids, false, true));
    if (handed) return handed;
    firstTierChecked = true;
  }
  let loads = prepared.viewless ? new Map<string, ChannelLoad>() : view.peek(ids);
  if (!loads) {
    firstTierChecked = false; // slots may have been released while the read was under way
    const read = await withAbort(engine, view.read(ids), signal);
    // peeked again: the passes that waited for this round resume one by one, each seeing the earlier reservations
    loads = view.peek(ids, false) ?? read;
  }

  let budget = settings.max_acquire_attempts;
  const spread = !prepared.viewless && view.sharedLoads;
  /** Whether this pass has asked the store yet (its first reply is counted in firstTries). */
  let asked = false;
  /** Channels a waiter could queue on: found full, or skipped for lack of budget (never cooling ones). */
  const waitPool = new Set<C>();
  const saturated: C[] = [];
  let storeDown: StoreUnavailableError | undefined;
  const cooling = (c: C) => cooldowns.isCooling(c, loads);

  for (let t = 0; t < byTier.length; t++) {
    const tier = byTier[t]!;
    if (handoffOn && handoff.available && !storeDown && !(t === 0 && firstTierChecked)) {
      const handed = takeHandoff(t, loads);
      if (handed) return handed;
    }
    // A channel known to have waiters is full for a newcomer (the script would answer `queued`): it joins the wait
    // pool without a store call. Not when the request cannot wait: then nothing would ask the store about it again,
    // and a mark whose queue drained meanwhile would turn every request away; the acquire's reply corrects the mark.
    const open = tier.filter((c) => {
      if (!isBounded(c) || storeDown || !canWait || !engine.store.queued(c.id) || cooling(c)) return true;
      saturated.push(c);
      waitPool.add(c);
      return false;
    });
    let order = orderTier(open, loads, cooling, engine.random, spread, engine.maxOf);
    // every channel of the tier cooling by a cached snapshot: read it fresh once (a cooldown may have ended)
    if (order.size === 0 && settings.load_cache_enabled && !storeDown) {
      const tierBounded = open.filter(isBounded);
      if (tierBounded.some(cooling)) {
        const fresh = await withAbort(engine, view.readFresh(tierBounded.map((c) => c.id)), signal);
        if (fresh) {
          for (const [id, load] of fresh) loads.set(id, load);
          order = orderTier(open, loads, cooling, engine.random, spread, engine.maxOf);
        }
      }
    }

    let c = order.next();
    while (c) {
      if (!isBounded(c)) return tickets.unlimited(c);
      if (storeDown || budget <= 0) {
        if (!storeDown) waitPool.add(c);
        c = order.next();
        continue;
      }
      const batch = nextBatch(
        c,
        order,
        Math.min(budget, engine.store.maxChannelsPerAcquire),
        loads,
        engine.maxOf,
      );
      c = batch.after;
      if (batch.expected) view.reserve(batch.expected.id, 1);
      let outcome: { replies: AcquireReply[]; lease?: Lease };
      try {
        outcome = await tryAcquire(engine, batch.channels, settings, share);
      } catch (err) {
        if (!(err instanceof StoreUnavailableError)) throw err;
        storeDown = err;
        c ??= order.next();
        continue;
      } finally {
        if (batch.expected) view.reserve(batch.expected.id, -1);
      }
      if (signal?.aborted) {
        if (outcome.lease) void engine.leases.release(outcome.lease);
        throw engine.capacityError('aborted', candidates, saturated);
      }
      budget -= outcome.replies.length;
      if (!asked) {
        asked = true;
        engine.recorder.firstTries++;
        const first = outcome.replies[0];
        if (first === 'full' || first === 'queued') engine.recorder.firstTriesFull++;
      }
      outcome.replies.forEach((reply, k) => {
        const channel = batch.channels[k]!;
        if (reply === 'full' || reply === 'queued') {
          saturated.push(channel);
          waitPool.add(channel);
          const max = engine.maxOf(channel);
          view.noteFull(channel.id, max);
          loads.set(channel.id, { ...loads.get(channel.id)!, active: max });
        } else if (reply === 'cooling') {
          view.noteCooling(channel.id, settings.load_cache_ttl_ms);
        }
      });
      if (outcome.lease) {
        return tickets.bounded(batch.channels[outcome.replies.length - 1]!, outcome.lease, 0, signal);
      }
      c ??= order.next();
    }
  }

  if (storeDown) throw storeDown;
  if (waitPool.size > 0 && canWait) {
    // the view as it is now, with the passes that queued since this one's loads were taken
    const shown = prepared.viewless ? undefined : view.peek(ids, false, true);
    return waitForSlot(
      engine,
      waitQueues([...waitPool], shown ?? loads, engine.random),
      shown,
      prepared,
      saturated,
      settings,
      attempt,
    );
  }
  throw engine.capacityError('full', candidates, saturated);
}

/** Shared work seen through the caller's signal: an abort surfaces as CapacityError 'aborted'. */
async function withAbort<T>(engine: Engine, work: Promise<T>, signal?: AbortSignal): Promise<T> {
  try {
    return await abortable(work, signal);
  } catch (err) {
    if (signal?.aborted) throw engine.capacityError('aborted', [], []);
    throw err;
  }
}
