/** The admit and release steps: a ticket for one attempt, held as a slot that goes back exactly once. */
import { CapacityError, NoChannelError, type Ticket, type UpstreamSignal } from 'slotgate';
import type { GatewayChannel } from '../channels.js';
import { shuttingDown } from '../drain.js';
import { logsAt } from '../logging.js';
import type { ProxiedRequest } from './request.js';

export interface Slot {
  ticket: Ticket<GatewayChannel>;
  channel: GatewayChannel;
  /** Whether the ticket holds a lease (a bounded channel's, or a limited client's): only such a ticket can be lost. */
  fenced: boolean;
  /** What the upstream said, reported with the release to the channel's adaptive limit (set by the attempt). */
  upstream: UpstreamSignal | undefined;
  release: () => void;
}

/**
 * A slot for the chain's next attempt; 'give up' when a retry finds no capacity or no channel left: the client then
 * learns more from the last upstream error than from that.
 */
export async function admit(req: ProxiedRequest): Promise<Slot | 'give up'> {
  const { ctx, chain, request, access } = req;
  const first = chain.attempts === 0;
  let ticket: Ticket<GatewayChannel>;
  const wait = ctx.drain.wait(req.stop.signal);
  try {
    ticket = await ctx.admission.acquire({
      candidates: first ? req.candidates : req.inForce(),
      resolve: req.inForce,
      signal: wait.signal,
      exclude: chain.tried,
      client: req.caller.client,
      // a reload may change the client's limit while the request waits for one of its slots
      resolveClient: () => ctx.registry().authenticate(req.key)?.client,
      // a first attempt stands in the queues as of when the request reached this gateway; a retry, as of now
      ...(first ? { arrivedMsAgo: req.reply.elapsedTime } : {}),
    });
  } catch (err) {
    if (wait.refused()) throw shuttingDown();
    request.log.debug({ err: (err as Error).message, attempt: chain.attempts + 1 }, 'admission refused');
    if (chain.last && (err instanceof CapacityError || err instanceof NoChannelError)) return 'give up';
    throw err;
  } finally {
    wait.done();
  }
  const channel = ticket.channel;
  chain.admitted(channel.id, ticket.waitedMs);
  Object.assign(access, { waitMs: chain.waitedMs, channel: channel.id, attempts: chain.attempts });
  // it waited while the channel's adaptive limit held it below its max
  const limit = ticket.waitedMs > 0 ? ctx.admission.limits([channel]).get(channel.id) : undefined;
  if (limit?.enforced && limit.limit < limit.max) access.adaptiveLimit = limit.limit;
  if (logsAt(request, 'debug')) {
    request.log.debug(
      { channel: channel.id, wait_ms: Math.round(ticket.waitedMs), attempt: chain.attempts },
      ticket.waitedMs > 0 ? 'admitted after waiting' : 'admitted',
    );
  }
  return hold(req, ticket);
}

/** A lost fenced ticket stops the request. Its listener goes at the release: `lost` can outlive a request (handoff). */
function hold(req: ProxiedRequest, ticket: Ticket<GatewayChannel>): Slot {
  const fenced = ticket.token !== undefined || (req.caller.client.maxConcurrency ?? 0) > 0;
  if (fenced) ticket.lost.addEventListener('abort', req.onLost, { once: true });
  let released = false;
  const slot: Slot = {
    ticket,
    channel: ticket.channel,
    fenced,
    upstream: undefined,
    release: () => {
      if (released) return;
      released = true;
      if (fenced) ticket.lost.removeEventListener('abort', req.onLost);
      // an upstream call aborted mid-flight may still run at the upstream for a moment: its slot goes back through
      // Redis, not straight to this gateway's next request
      void ticket.release({ handoff: !req.stop.signal.aborted, upstream: slot.upstream });
    },
  };
  return slot;
}
