/**
 * Tickets: what an admitted request holds. A bounded channel's ticket holds a lease; giving it back stops the renewal,
 * sends the removal (retried until confirmed), wakes one local waiter and, with handoff on, offers the slot to a pass
 * of this instance for the rest of the turn. An unlimited channel's ticket only counts in this process.
 */
import type { Candidate } from '../core/channel.js';
import type { CapacityError } from '../core/errors.js';
import type { Settings } from '../core/settings.js';
import type { Lease, LeaseManager } from '../store/leases.js';
import type { Handoff } from './handoff.js';
import type { LoadView } from './load-view.js';
import type { Ticket } from './types.js';
import type { LocalWaiters } from './waiters.js';

export class Tickets {
  /** In-flight tickets of unlimited channels, by channel (they never reach the store). */
  readonly unlimitedActive = new Map<string, number>();

  constructor(
    private readonly deps: {
      leases: LeaseManager;
      view: LoadView;
      waiters: LocalWaiters;
      handoff: Handoff;
      settings: () => Settings;
      aborted: (channel: Candidate) => CapacityError;
    },
  ) {}

  /** A ticket for a lease the store (or a handoff) just gave; handed straight back when the caller has given up. */
  bounded<C extends Candidate>(channel: C, lease: Lease, waitedMs: number, signal?: AbortSignal): Ticket<C> {
    const { leases, view, waiters, handoff, settings } = this.deps;
    view.noteActive(channel.id, 1);
    let released: Promise<void> | undefined;
    const ticket: Ticket<C> = {
      channel,
      token: lease.token,
      waitedMs,
      release: (options) => {
        if (released) return released;
        const removal = leases.release(lease);
        // Counted as given back now: the removal goes out with this turn's commands, ahead of any later load read.
        view.noteActive(channel.id, -1);
        // Woken now, a local waiter can take the slot over in this turn, or poll right behind the removal.
        waiters.wakeOne(channel.id);
        const handOff = options?.handoff !== false && settings().slot_handoff_enabled;
        // A parked slot is given back once its removal is queued: it goes out at the end of this turn or to a pass
        // that takes it over, and a failure is retried in the background. Resolving now lets the caller's next
        // request, in this same turn, take it over. Otherwise: resolved once the store confirmed the removal.
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
    const active = this.unlimitedActive;
    active.set(channel.id, (active.get(channel.id) ?? 0) + 1);
    let released = false;
    return {
      channel,
      token: undefined,
      waitedMs: 0,
      release: async () => {
        if (released) return;
        released = true;
        const n = (active.get(channel.id) ?? 1) - 1;
        if (n > 0) active.set(channel.id, n);
        else active.delete(channel.id);
      },
    };
  }
}
