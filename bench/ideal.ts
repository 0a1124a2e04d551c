/**
 * The ideal FIFO scheduler beside the open-loop runs: the trace through a multi-server FIFO queue with abandonment.
 * With one patience for all, service starts never decrease in arrival order: each request takes the slot free first,
 * or leaves at its deadline if that slot is not free before it.
 */
import type { TraceRequest } from './openloop.js';
import type { RequestRecord } from './fairness.js';
import type { BenchChannel } from './types.js';

export function idealFifo(
  trace: readonly TraceRequest[],
  channels: readonly BenchChannel[],
  waitTimeoutMs: number,
): RequestRecord[] {
  const slotChannel = channels.flatMap((c) => Array.from({ length: c.max }, () => c.id));
  const freeAt = slotChannel.map(() => -Infinity);
  const ordered = [...trace].sort((a, b) => a.at - b.at);
  return ordered.map((req) => {
    // the slot free first; among equals the lowest, so the outcome does not depend on anything but the trace
    let slot = 0;
    for (let k = 1; k < freeAt.length; k++) if (freeAt[k]! < freeAt[slot]!) slot = k;
    const start = Math.max(req.at, freeAt[slot]!);
    // a grant exactly at the deadline loses to the time-out; with no wait allowed only a free slot admits
    if (start === req.at || start - req.at < waitTimeoutMs) {
      freeAt[slot] = start + req.hold;
      return {
        instance: req.instance,
        arrival: req.at,
        outcome: start,
        channel: slotChannel[slot]!,
        release: start + req.hold,
      };
    }
    return {
      instance: req.instance,
      arrival: req.at,
      outcome: req.at + waitTimeoutMs,
      reason: 'wait_timeout',
    };
  });
}
