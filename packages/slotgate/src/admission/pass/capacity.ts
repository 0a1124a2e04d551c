/** The capacity error of an acquire: what was saturated, in words an operator tells from an upstream's 429. */
import type { Candidate } from '../../core/channel.js';
import { CapacityError, type CapacityReason } from '../../core/errors.js';

const DEFAULT_RETRY_AFTER_MS = 1000;

export interface CapacityContext {
  candidates: readonly Candidate[];
  /** The bounded channels found full in this pass. */
  saturated: readonly Candidate[];
  /** The channel whose queue was full or whose wait ran out. */
  waitedOn?: Candidate;
  waitTimeoutMs: number;
  /** Remaining cooldown this instance knows of: with nothing full, Retry-After is the longest. */
  coolingMs: (id: string) => number;
}

export function capacityError(reason: CapacityReason, ctx: CapacityContext): CapacityError {
  const { candidates, saturated, waitedOn } = ctx;
  const ids = saturated.map((c) => c.id);
  const rest = candidates.filter((c) => !saturated.includes(c)).map((c) => c.id);
  const detail = [
    ids.length ? `channels at max concurrency: ${ids.join(', ')}` : '',
    rest.length ? `cooling down or skipped: ${rest.join(', ')}` : '',
  ]
    .filter(Boolean)
    .join('; ');
  const on = waitedOn?.id ?? '?';
  const message = {
    full: 'every candidate channel is at capacity',
    queue_full: `wait queue of channel ${on} is full`,
    wait_timeout: `no slot came free on channel ${on} within ${ctx.waitTimeoutMs} ms`,
    aborted: 'the request was aborted while waiting for a channel slot',
  }[reason];
  const retryAfterMs = saturated.length
    ? DEFAULT_RETRY_AFTER_MS
    : Math.max(DEFAULT_RETRY_AFTER_MS, ...candidates.map((c) => ctx.coolingMs(c.id)).filter((ms) => ms > 0));
  return new CapacityError(reason, detail ? `${message} (${detail})` : message, {
    retryAfterMs,
    channels: ids,
  });
}
