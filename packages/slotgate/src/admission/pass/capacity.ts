/** The capacity error of an acquire: what was saturated, in words an operator tells from an upstream's 429. */
import type { Candidate } from '../../core/channel.js';
import { CapacityError, type CapacityReason } from '../../core/errors.js';
import type { Random } from '../../core/order.js';
import { jitteredHint, RETRY_HINT, slotLikelyInMs, type HoldTimes } from '../../core/retry-hint.js';
import type { Settings } from '../../core/settings.js';
import type { LoadView } from '../loads/load-view.js';
import { maxWaitingOf } from './decide.js';

const DEFAULT_RETRY_AFTER_MS = 1000;

/** When a slot on the saturated channels is likely, jittered (ms); see core/retry-hint.ts. */
export type RetryHint = (
  reason: CapacityReason,
  saturated: readonly Candidate[],
  waitedOn: Candidate | undefined,
) => number;

export interface CapacityContext {
  candidates: readonly Candidate[];
  /** The bounded channels found full in this pass. */
  saturated: readonly Candidate[];
  /** The channel whose queue was full or whose wait ran out. */
  waitedOn?: Candidate;
  waitTimeoutMs: number;
  /** Remaining cooldown this instance knows of: with nothing full, Retry-After is the longest. */
  coolingMs: (id: string) => number;
  /** With something full, Retry-After is this; without it, 1 s. */
  retryHint?: RetryHint;
}

/**
 * The engine's retry hint, from what it holds already (no store command): the waiters the load view shows on the
 * saturated channels (a queue that turned the caller away counts as full), their max concurrency in total, and the
 * median of this instance's recent holds on them.
 */
export function retryHintOf(deps: {
  view: LoadView;
  holds: HoldTimes;
  random: Random;
  settings: () => Settings;
}): RetryHint {
  return (reason, saturated, waitedOn) => {
    let waiting = 0;
    let maxConcurrency = 0;
    for (const c of saturated) {
      const shown = deps.view.shownWaiting(c.id);
      const full = reason === 'queue_full' && c === waitedOn;
      waiting += full ? Math.max(shown, maxWaitingOf(c, deps.settings())) : shown;
      maxConcurrency += c.maxConcurrency ?? 1;
    }
    const holdMs = deps.holds.median(saturated.map((c) => c.id)) ?? RETRY_HINT.defaultHoldMs;
    return jitteredHint(slotLikelyInMs({ waiting, maxConcurrency, holdMs }), deps.random);
  };
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
    ? (ctx.retryHint?.(reason, saturated, waitedOn) ?? DEFAULT_RETRY_AFTER_MS)
    : Math.max(DEFAULT_RETRY_AFTER_MS, ...candidates.map((c) => ctx.coolingMs(c.id)).filter((ms) => ms > 0));
  return new CapacityError(reason, detail ? `${message} (${detail})` : message, {
    retryAfterMs,
    channels: ids,
  });
}
