/**
 * Tickets: what an admitted request holds. A bounded channel's ticket holds a lease; giving it back stops the renewal
 * and sends the removal (retried until confirmed): on a channel with waiters the store grants the slot to the oldest
 * of them. With handoff on and nobody waiting, the slot is offered to a pass of this instance for the rest of the
 * turn. An unlimited channel's ticket only counts in this process.
 */
import type { Candidate } from '../../core/channel.js';
import type { CapacityError } from '../../core/errors.js';
import type { Settings } from '../../core/settings.js';
import type { Lease, LeaseManager } from './lease-manager.js';
import type { Handoff } from './handoff.js';
import type { LoadView } from '../loads/load-view.js';
import type { Ticket } from '../types.js';

/** The `lost` signal of a ticket that holds no lease (an unlimited channel, a client counted in process): never fires. */
export const NEVER_LOST: AbortSignal = new AbortController().signal;

export class Tickets {
  /** In-flight tickets of unlimited channels, by channel (they never reach the store). */
  readonly unlimitedActive = new Map<string, number>();

  constructor(
    private readonly deps: {
      leases: LeaseManager;
      view: LoadView;
      handoff: Handoff;
      settings: () => Settings;
      /** Whether the channel has waiters (then a slot given back goes to the oldest, never to this instance). */
      queued: (channelId: string) => boolean;
      aborted: (channel: Candidate) => CapacityError;
    },
  ) {}

  /** A ticket for a lease the store (or a handoff) just gave; handed straight back when the caller has given up. */
  bounded<C extends Candidate>(channel: C, lease: Lease, waitedMs: number, signal?: AbortSignal): Ticket<C> {
    const { leases, view, handoff, settings, queued } = this.deps;
    view.noteActive(channel.id, 1);
    let released: Promise<void> | undefined;
    const ticket: Ticket<C> = {
      channel,
      token: lease.token,
      waitedMs,
      lost: lease.lost,
      release: (options) => {
        if (released) return released;
        const removal = leases.release(lease);
        // Counted as given back now: the removal goes out with this turn's commands, ahead of any later load read.
        // A lease lost for good was counted out when it was lost.
        if (removal) view.noteActive(channel.id, -1);
        // Never past a queue: with waiters on the channel, anywhere, the slot goes to the oldest through the store.
        const handOff = options?.handoff !== false && settings().slot_handoff_enabled && !queued(channel.id);
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
      lost: NEVER_LOST,
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
