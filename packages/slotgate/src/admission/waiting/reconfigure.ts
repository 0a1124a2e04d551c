/**
 * A waiter following a configuration change: it leaves the queues of channels gone from its set, moves to a new max
 * or adaptive limit in its place (under a new token: no grant made under the old one is claimed), and tries what the
 * change opened.
 */
import { isBounded, type Candidate } from '../../core/channel.js';
import { NoChannelError } from '../../core/errors.js';
import { tryAcquire, type Moved } from '../engine.js';
import type { Prepared } from '../pass/candidates.js';
import { QUEUES_PER_WAITER, waitQueues } from '../pass/decide.js';
import type { Ticket } from '../types.js';
import { enforcedFloor } from '../limits/adaptive.js';
import type { Place, Registration, Waiter } from './waiter.js';

/** What a request whose candidate set became empty while it waited is told. */
export const NO_CHANNEL_LEFT =
  'no enabled channel is left in the candidate set: the configuration changed while the request waited';

export async function followConfig<C extends Candidate>(
  w: Waiter<C>,
): Promise<Ticket<C> | Moved<C> | undefined> {
  const { engine, settings } = w;
  w.seen = engine.configVersion();
  const previous = w.current;
  const next = (w.current = engine.resolve(w.attempt.request));
  if (next.candidates.length === 0) throw new NoChannelError(NO_CHANNEL_LEFT);
  const unlimited = next.candidates.find((c) => !isBounded(c) && !engine.cooldowns.isCooling(c));
  if (unlimited) return engine.tickets.unlimited(unlimited);
  if (next === previous) return undefined;
  const moves: Registration<C>[] = [];
  let left = false;
  // a channel whose adaptive limit was switched on or off (or its floor changed) counts as a new max
  const floor = (c: C) => enforcedFloor(c, settings);
  for (const p of [...w.places]) {
    const now = next.tierOf.get(p.channel.id)?.channel;
    if (now && now.maxConcurrency === p.max && floor(now) === floor(p.channel)) p.channel = now;
    else if (now) moves.push(move(w, p, now));
    else {
      left = true;
      w.drop(p);
      void engine.store.leaveQueue(w.refOf(p), settings.lease_ttl_ms).catch(() => {});
    }
  }
  const ticket = moves.length > 0 ? await w.settle(moves) : undefined;
  if (ticket) return ticket;
  if (w.places.length === 0) {
    return { next, configVersion: w.seen, span: { start: w.waitStart, deadline: w.deadline } };
  }
  return takeUp(w, previous, left);
}

/** The registration replacing `p` under `to`'s max: a new token, so a grant made to `p`'s is never claimed. */
function move<C extends Candidate>(w: Waiter<C>, p: Place<C>, to: C): Registration<C> {
  w.drop(p);
  w.box.held.delete(p.channel.id);
  for (let i = w.box.granted.length - 1; i >= 0; i--)
    if (w.box.granted[i] === p.channel.id) w.box.granted.splice(i, 1);
  const moved: Place<C> = { channel: to, token: w.newToken(), max: to.maxConcurrency! };
  return [moved, () => w.engine.store.requeue(w.refOf(p), w.refOf(moved), w.optionsOf(to))];
}

/**
 * The channels of the new set this waiter is not queued on: those it could not use before (added, enabled, or a
 * raised max) are tried with one acquire call (never ahead of a queue); a waiter that left a queue joins others.
 */
async function takeUp<C extends Candidate>(
  w: Waiter<C>,
  previous: Prepared<C>,
  left: boolean,
): Promise<Ticket<C> | undefined> {
  const { engine, settings } = w;
  const before = new Map(previous.shape.filter((s) => s.enabled).map((s) => [s.id, s.max]));
  const loads = engine.view.peek(w.current.ids, false, true);
  const others = w.current.bounded.filter(
    (c) => !w.places.some((p) => p.channel.id === c.id) && !engine.cooldowns.isCooling(c, loads),
  );
  const opened = others.filter((c) => (before.get(c.id) ?? 0) < c.maxConcurrency!);
  if (opened.length > 0) {
    const outcome = await tryAcquire(
      engine,
      opened.slice(0, engine.store.maxChannelsPerAcquire),
      settings,
      w.share,
    );
    if (outcome.lease) {
      const waited = engine.clock.now() - w.waitStart;
      engine.recorder.waitTime.observe(waited);
      return engine.tickets.bounded(opened[outcome.replies.length - 1]!, outcome.lease, waited, w.signal);
    }
  }
  if (!left || w.places.length >= QUEUES_PER_WAITER) return undefined;
  const joining = waitQueues(others, loads ?? new Map(), engine.random).slice(
    0,
    QUEUES_PER_WAITER - w.places.length,
  );
  return w.settle(
    joining.map((c) => w.enqueueing({ channel: c, token: w.newToken(), max: c.maxConcurrency! })),
  );
}
