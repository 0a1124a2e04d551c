/**
 * Passes run until one admits. A ticket admitted while the configuration changed stands only if the set in force
 * allows it (its channel there, its max not below its lease's); else its slot goes back and the request passes again.
 */
import { isBounded, type Candidate } from '../../core/channel.js';
import { NoChannelError } from '../../core/errors.js';
import type { Prepared } from './candidates.js';
import type { Engine, WaitSpan } from '../engine.js';
import { runPass } from './pass.js';
import type { AcquireRequest, Ticket } from '../types.js';
import { NO_CHANNEL_LEFT } from '../waiting/reconfigure.js';

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
