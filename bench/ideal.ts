/**
 * The ideal FIFO scheduler set beside the open-loop runs: the same trace through a multi-server FIFO queue with
 * abandonment, in memory. With one patience for everyone, service starts never decrease in arrival order, so each
 * request in turn takes the slot that comes free first, unless that is not before its deadline: then it leaves at
 * the deadline and the next request looks at the same slots.
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
        hold: req.hold,
        release: start + req.hold,
      };
    }
    return {
      instance: req.instance,
      arrival: req.at,
      outcome: req.at + waitTimeoutMs,
      reason: 'wait_timeout',
      hold: req.hold,
    };
  });
}
