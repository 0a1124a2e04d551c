/**
 * A bounded channel's ticket holds a lease: released, its slot goes to the oldest waiter through the store, or with
 * nobody waiting may be handed off within this turn. An unlimited channel's ticket counts in this process only.
 */
import type { Candidate } from '../../core/channel.js';
import type { Clock } from '../../core/clock.js';
import type { CapacityError } from '../../core/errors.js';
import type { HoldTimes } from '../../core/retry-hint.js';
import type { Settings } from '../../core/settings.js';
import type { Lease, LeaseManager } from './lease-manager.js';
import type { Handoff } from './handoff.js';
import type { LoadView } from '../loads/load-view.js';
import type { Ticket } from '../types.js';
import { limitRelease } from '../limits/adaptive.js';

/** The `lost` signal of a ticket that holds no lease: never fires. */
export const NEVER_LOST: AbortSignal = new AbortController().signal;

/** A ticket counted in process only: `counts` holds one more for `key` until it is released. */
export function countedTicket<C extends Candidate>(
  channel: C,
  counts: Map<string, number>,
  key: string,
): Ticket<C> {
  counts.set(key, (counts.get(key) ?? 0) + 1);
  let released = false;
  return {
    channel,
    token: undefined,
    waitedMs: 0,
    lost: NEVER_LOST,
    release: async () => {
      if (released) return;
      released = true;
      const n = (counts.get(key) ?? 1) - 1;
      if (n > 0) counts.set(key, n);
      else counts.delete(key);
    },
  };
}

export class Tickets {
  /** In-flight tickets of unlimited channels, by channel. */
  readonly unlimitedActive = new Map<string, number>();

  constructor(
    private readonly deps: {
      leases: LeaseManager;
      view: LoadView;
      handoff: Handoff;
      settings: () => Settings;
      /** Whether the channel has waiters (a slot given back then goes to the oldest, never to a handoff). */
      queued: (channelId: string) => boolean;
      aborted: (channel: Candidate) => CapacityError;
      clock: Clock;
      /** Each release records how long the slot was held: the Retry-After hint of a capacity error uses them. */
      holds: HoldTimes;
    },
  ) {}

  /** A ticket for a lease the store (or a handoff) just gave; handed straight back when the caller has given up. */
  bounded<C extends Candidate>(channel: C, lease: Lease, waitedMs: number, signal?: AbortSignal): Ticket<C> {
    const { leases, view, handoff, settings, queued, clock, holds } = this.deps;
    view.noteActive(channel.id, 1);
    const since = clock.now();
    let released: Promise<void> | undefined;
    const ticket: Ticket<C> = {
      channel,
      token: lease.token,
      waitedMs,
      lost: lease.lost,
      release: (options) => {
        if (released) return released;
        const heldMs = clock.now() - since;
        holds.record(channel.id, heldMs);
        const limit = limitRelease(channel, settings(), options?.upstream, heldMs);
        const removal = leases.release(lease, limit);
        // counted out now: the removal goes out with this turn's commands, ahead of any later load read (a lost
        // lease was counted out when it was lost)
        if (removal) view.noteActive(channel.id, -1);
        // never past a queue: with waiters anywhere, the slot goes to the oldest through the store; and never with an
        // overload to report, which must reach the channel's adaptive limit
        const handOff =
          options?.handoff !== false &&
          settings().slot_handoff_enabled &&
          !queued(channel.id) &&
          options?.upstream?.kind !== 'overloaded';
        // a parked slot resolves at once, so the caller's next request in this turn can take it over; otherwise
        // once the store confirmed the removal
        if (removal && handOff && handoff.park(lease, removal)) released = Promise.resolve();
        else released = removal ? removal.done : Promise.resolve();
        return released;
      },
    };
    if (signal?.aborted) {
      void ticket.release();
      throw this.deps.aborted(channel);
    }
    return ticket;
  }

  unlimited<C extends Candidate>(channel: C): Ticket<C> {
    return countedTicket(channel, this.unlimitedActive, channel.id);
  }
}
