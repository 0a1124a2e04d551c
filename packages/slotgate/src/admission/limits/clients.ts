/** A limited client's own slot: the set it is acquired through, its limit's error, the ticket holding both slots. */
import type { Candidate } from '../../core/channel.js';
import { clientResource, type Client } from '../../core/client.js';
import { ClientLimitError, type CapacityError } from '../../core/errors.js';
import { countedTicket, NEVER_LOST } from '../leases/tickets.js';
import type { Ticket } from '../types.js';

/** The most client sets kept; past it the cache starts over (a set is rebuilt in microseconds). */
const CACHE_LIMIT = 10_000;

/** One candidate array per client, limit and queue bound, so the candidate-set cache (keyed by array) hits. */
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
 * While the store is unavailable, a client's limit holds per instance, counted in process: a client limit is no
 * promise to an upstream (channels still fail closed), so an outage never blocks a client outright.
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
    return countedTicket(clientResource(client), this.inFlight, client.id);
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
  const message = {
    full: limit,
    queue_full: `${limit} and its wait queue is full`,
    wait_timeout: `${limit}: none of its slots came free within the wait time-out`,
    aborted: `the request was aborted while waiting for a slot of client ${JSON.stringify(client.id)}`,
  }[err.reason];
  return new ClientLimitError(err.reason, message, { retryAfterMs: err.retryAfterMs, clientId: client.id });
}

/** The channel's ticket holding the client's slot too: `lost` fires when either is lost, `release` frees both. */
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
