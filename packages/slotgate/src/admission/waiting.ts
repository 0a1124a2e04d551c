/**
 * Waiting: when every candidate is full, a pass registers in the bounded wait queue of one full channel and polls
 * with jittered exponential back-off until a slot comes free, the deadline passes or the caller aborts. A release on
 * this instance wakes one of its waiters at once; a slot this instance released in the same turn is taken over with
 * no store command. The registration is always removed on the way out, detached from cancellation.
 */
import { isBounded, type Candidate } from '../core/channel.js';
import { jitter, nextInterval } from '../core/backoff.js';
import { SlotgateError, CapacityError } from '../core/errors.js';
import type { Settings } from '../core/settings.js';
import type { Prepared } from './candidates.js';
import { maxWaitingOf, pollAlternative } from './decide.js';
import { tryAcquire, type Engine } from './engine.js';
import type { Ticket } from './types.js';
import type { Waker } from './waiters.js';

/** How long a registration outlives the wait deadline, so a live waiter never loses its place to expiry. */
const WAITER_TTL_MARGIN_MS = 2000;
/** The abort reason of a waiter's nap cut short by a local release (a constant: no DOMException per wake-up). */
const WOKEN = Object.freeze({ woken: true });

export async function waitForSlot<C extends Candidate>(
  engine: Engine,
  queues: readonly C[],
  prepared: Prepared<C>,
  saturated: readonly C[],
  settings: Settings,
  signal?: AbortSignal,
): Promise<Ticket<C>> {
  const { candidates } = prepared;
  const { clock, view, store } = engine;
  const fail = (reason: 'aborted' | 'wait_timeout' | 'queue_full', on?: C) =>
    engine.capacityError(reason, candidates, saturated, on);

  let channel: C | undefined;
  let token = '';
  for (const option of queues) {
    if (signal?.aborted) throw fail('aborted', option);
    token = engine.leases.nextToken();
    // Counted before the call, so concurrent passes of this instance already see this place as taken.
    view.noteWaiter(option.id, 1);
    let registered = false;
    try {
      registered = await store.registerWaiter(
        option.id,
        token,
        maxWaitingOf(option, settings),
        settings.wait_timeout_ms + WAITER_TTL_MARGIN_MS,
      );
    } finally {
      if (!registered) view.noteWaiter(option.id, -1);
    }
    if (registered) {
      channel = option;
      break;
    }
  }
  if (!channel) throw fail('queue_full', queues[0]);

  const waitStart = clock.now();
  const deadline = waitStart + settings.wait_timeout_ms;
  let napping: AbortController | undefined;
  const waker: Waker = {
    wake: () => {
      if (!napping) return false;
      napping.abort(WOKEN);
      return true;
    },
  };
  const listensTo = candidates.filter(isBounded).map((c) => c.id);
  engine.waiters.add(channel.id, listensTo, waker);
  try {
    let interval = settings.wait_interval_ms;
    for (;;) {
      const remaining = deadline - clock.now();
      // An abort that came while the last attempt was in flight has already fired: no listener would see it.
      if (signal?.aborted) throw fail('aborted', channel);
      if (remaining > 0) {
        napping = new AbortController();
        const nap = napping;
        const onAbort = () => nap.abort(signal?.reason);
        signal?.addEventListener('abort', onAbort, { once: true });
        try {
          await clock.sleep(Math.min(jitter(interval, engine.random), remaining), nap.signal);
        } catch {
          // woken by a local release or by the caller's abort
        } finally {
          signal?.removeEventListener('abort', onAbort);
          napping = undefined;
        }
      }
      if (signal?.aborted) throw fail('aborted', channel);
      const unlimited = candidates.find((c) => !isBounded(c) && !engine.cooldowns.isCooling(c));
      if (unlimited) return engine.tickets.unlimited(unlimited);
      if (settings.slot_handoff_enabled && engine.handoff.available) {
        const loads = view.peek(prepared.ids);
        const handed = engine.handoff.take(
          prepared,
          () => true,
          (c) => engine.cooldowns.allowsHandoff(c, loads),
        );
        if (handed) {
          const waited = clock.now() - waitStart;
          engine.recorder.waitTime.observe(waited);
          return engine.tickets.bounded(handed.channel, handed.lease, waited, signal);
        }
      }
      const targets = await pollTargets(engine, prepared, channel);
      const outcome = await tryAcquire(engine, targets, settings);
      outcome.replies.forEach((reply, k) => {
        const target = targets[k]!;
        if (reply === 'full') view.noteFull(target.id, target.maxConcurrency!);
        else if (reply === 'cooling') view.noteCooling(target.id, settings.load_cache_ttl_ms);
      });
      if (outcome.lease) {
        const waited = clock.now() - waitStart;
        engine.recorder.waitTime.observe(waited);
        return engine.tickets.bounded(targets[outcome.replies.length - 1]!, outcome.lease, waited, signal);
      }
      if (clock.now() >= deadline) throw fail('wait_timeout', channel);
      interval = nextInterval(interval, settings.wait_interval_ms);
    }
  } catch (err) {
    if (!(err instanceof SlotgateError)) throw err;
    if (err instanceof CapacityError) engine.recorder.waitTime.observe(clock.now() - waitStart);
    throw err;
  } finally {
    engine.waiters.remove(channel.id, listensTo, waker);
    view.noteWaiter(channel.id, -1);
    void store.unregisterWaiter(channel.id, token).catch(() => {
      // the registration expires by its score; nothing drifts
    });
  }
}

/**
 * What one poll tries, in one store call: the channel the waiter is registered with (its place in that queue), then
 * the channel the load view ranks best if it shows room there (a slot may have come free on another candidate).
 * Reading the view is free while its snapshot is cached, so a poll stays one script call.
 */
async function pollTargets<C extends Candidate>(
  engine: Engine,
  prepared: Prepared<C>,
  registeredOn: C,
): Promise<C[]> {
  const { bounded, ids } = prepared;
  // With the cache off (rollback mode) a view read is a full store read: polls try their own channel only.
  if (
    bounded.length === 1 ||
    engine.store.maxChannelsPerAcquire < 2 ||
    !engine.settings().load_cache_enabled
  ) {
    return [registeredOn];
  }
  let loads = engine.view.peek(ids);
  if (!loads) {
    const read = await engine.view.read(ids);
    loads = engine.view.peek(ids, false) ?? read; // as in the pass: see what waiters resumed before this one reserved
  }
  const best = pollAlternative(bounded, registeredOn, loads, (c) => engine.cooldowns.isCooling(c, loads));
  return best ? [registeredOn, best] : [registeredOn];
}
