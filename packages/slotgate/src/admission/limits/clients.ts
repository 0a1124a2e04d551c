/**
 * A limited client's own slot, as the admission facade takes it: the one-candidate set it is acquired through, the
 * error that says the client's limit (not a channel's) refused the request, and the ticket that holds both slots.
 */
import type { Candidate } from '../../core/channel.js';
import { clientResource, type Client } from '../../core/client.js';
import { ClientLimitError, type CapacityError } from '../../core/errors.js';
import { NEVER_LOST } from '../leases/tickets.js';
import type { Ticket } from '../types.js';

/** The most client sets kept; past it the cache starts over (a set is rebuilt in microseconds). */
const CACHE_LIMIT = 10_000;

/**
 * One candidate array per client and limit, kept so the candidate-set cache (keyed by array) prepares it once; a
 * changed limit or queue bound makes a new one.
 */
export class ClientSets {
  private readonly sets = new Map<string, readonly Candidate[]>();

  of(client: Client & { maxConcurrency: number }): readonly Candidate[] {
    const key = `${client.maxConcurrency}|${client.maxWaiting ?? ''}|${client.id}`;
    let set = this.sets.get(key);
    if (!set) {
      if (this.sets.size >= CACHE_LIMIT) this.sets.clear();
      set = [clientResource(client)];
      this.sets.set(key, set);
    }
    return set;
  }
}

/**
 * While the store cannot hold a client's slots (Redis down: StoreUnavailableError), the client's limit holds on each
 * instance alone: up to its max in flight here, counted in process. A client limit is no promise to an upstream (the
 * channel slots keep theirs, failing closed), so an outage never blocks a client outright; the fleet may then have up
 * to max per instance of the client's requests in flight.
 */
export class ClientFallback {
  private readonly inFlight = new Map<string, number>();

  take(client: Client & { maxConcurrency: number }): Ticket<Candidate> {
    const n = this.inFlight.get(client.id) ?? 0;
    if (n >= client.maxConcurrency) {
      throw new ClientLimitError(
        'full',
        `client ${JSON.stringify(client.id)} has its max concurrency (${client.maxConcurrency}) in flight on this instance (the store is unavailable: the limit holds per instance)`,
        { retryAfterMs: 1000, clientId: client.id },
      );
    }
    this.inFlight.set(client.id, n + 1);
    let released = false;
    return {
      channel: clientResource(client),
      token: undefined,
      waitedMs: 0,
      lost: NEVER_LOST,
      release: async () => {
        if (released) return;
        released = true;
        const left = (this.inFlight.get(client.id) ?? 1) - 1;
        if (left > 0) this.inFlight.set(client.id, left);
        else this.inFlight.delete(client.id);
      },
    };
  }
}

/** A client whose limit was removed while its request waited: the request goes on holding no client slot. */
export function noClientSlot(client: Client & { maxConcurrency: number }): Ticket<Candidate> {
  return {
    channel: clientResource(client),
    token: undefined,
    waitedMs: 0,
    lost: NEVER_LOST,
    release: async () => {},
  };
}

/** The client's own limit refused the request: the capacity error of its slot, in the client's words. */
export function clientLimitError(
  client: Client & { maxConcurrency: number },
  err: CapacityError,
): ClientLimitError {
  const limit = `client ${JSON.stringify(client.id)} has its max concurrency (${client.maxConcurrency}) in flight`;
  let message: string;
  switch (err.reason) {
    case 'queue_full':
      message = `${limit} and its wait queue is full`;
      break;
    case 'wait_timeout':
      message = `${limit}: none of its slots came free within the wait time-out`;
      break;
    case 'aborted':
      message = `the request was aborted while waiting for a slot of client ${JSON.stringify(client.id)}`;
      break;
    default:
      message = limit;
  }
  return new ClientLimitError(err.reason, message, { retryAfterMs: err.retryAfterMs, clientId: client.id });
}

/**
 * The channel's ticket holding the client's slot too: `lost` fires when either slot is lost (the work must end, or
 * the client's max could be passed), `release` gives both back, and the wait is the whole acquire's.
 */
export function withClientSlot<C extends Candidate>(ticket: Ticket<C>, held: Ticket<Candidate>): Ticket<C> {
  let released: Promise<void> | undefined;
  return {
    channel: ticket.channel,
    token: ticket.token,
    waitedMs: ticket.waitedMs,
    lost: AbortSignal.any([ticket.lost, held.lost]),
    release(options) {
      released ??= Promise.all([ticket.release(options), held.release(options)]).then(() => {});
      return released;
    },
  };
}
