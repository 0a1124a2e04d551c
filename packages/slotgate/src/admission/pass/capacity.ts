/**
 * The capacity error an acquire fails with: which dimension was saturated (the channels found full, the queue, the
 * wait) in words an operator can tell apart from an upstream's own 429, and a Retry-After estimate.
 */
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
  /** Remaining cooldown this instance knows of (0 when none): with nothing full, Retry-After is the longest. */
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
  let message: string;
  switch (reason) {
    case 'queue_full':
      message = `wait queue of channel ${waitedOn?.id ?? '?'} is full`;
      break;
    case 'wait_timeout':
      message = `no slot came free on channel ${waitedOn?.id ?? '?'} within ${ctx.waitTimeoutMs} ms`;
      break;
    case 'aborted':
      message = 'the request was aborted while waiting for a channel slot';
      break;
    default:
      message = 'every candidate channel is at capacity';
  }
  const retryAfterMs = saturated.length
    ? DEFAULT_RETRY_AFTER_MS
    : Math.max(DEFAULT_RETRY_AFTER_MS, ...candidates.map((c) => ctx.coolingMs(c.id)).filter((ms) => ms > 0));
  return new CapacityError(reason, detail ? `${message} (${detail})` : message, {
    retryAfterMs,
    channels: ids,
  });
}
