/**
 * Every release is one releaseSlot call, which grants the slot to the oldest live waiter in the same script. A waiter
 * of the releasing instance gets a full lease, named in the reply, with no claim.
 */
import type { Clock } from '../../../core/clock.js';
import type { LimitRelease } from '../../store.js';
import { instanceOfToken } from '../../../core/ids.js';
import type { KeyBuilder } from '../keys.js';
import { SCRIPTS } from '../scripts.js';
import type { ScriptCall } from '../slots/acquire-call.js';
import type { ReleaseRequest } from '../slots/turn.js';
import type { GrantMessages } from './messages.js';
import type { Members } from './members.js';
import type { QueueHints } from './queue-hints.js';

export interface ReleaseDeps {
  keys: KeyBuilder;
  clock: Clock;
  claimMs: number;
  hints: QueueHints;
  members: Members;
  messages: GrantMessages;
  /** For a grant no listener of this store takes over (its instance stopped listening meanwhile). */
  giveBack: (channelId: string, token: string, leaseTtlMs: number) => void;
  /** The adaptive limit a reported release came back with. */
  learned: (channelId: string, limit: number) => void;
}

/** A report as releaseSlot-4.lua reads it (reportLimit in lua/includes/limit.lua). */
export function reportArg(limit: LimitRelease | undefined): string {
  const report = limit?.report;
  if (!report) return '';
  const { signal, law, heldMs } = report;
  const firstByte =
    signal.kind === 'ok' && signal.firstByteMs !== undefined
      ? Math.max(0, Math.round(signal.firstByteMs))
      : '';
  const kind = signal.kind === 'overloaded' ? 'over' : 'ok';
  return `${kind}|${law.ceiling}|${law.floor}|${law.probeAfter}|${law.tolerance}|${firstByte}|${Math.max(0, Math.round(heldMs))}`;
}

/** Its reply: whether the token held a slot. */
export function releaseCall(deps: ReleaseDeps, lease: ReleaseRequest): ScriptCall<boolean> {
  const { keys, clock, hints, members, messages } = deps;
  const { channelId, token, ttlMs, limit } = lease;
  const instance = instanceOfToken(token);
  const local = messages.listenerOf(instance) ? instance : '';
  const stamp = hints.stamp();
  const sentAt = clock.now();
  return {
    keys: [keys.slots(channelId), keys.queue(channelId), keys.peak(channelId), keys.limit(channelId)],
    args: [token, deps.claimMs, ttlMs, keys.grants(), channelId, limit?.floor ?? '', local, reportArg(limit)],
    read(raw) {
      const reply = SCRIPTS.releaseSlot.reply(raw);
      if (reply.limit !== undefined) deps.learned(channelId, reply.limit);
      if (reply.waiting) hints.mark(channelId);
      else hints.clear(channelId, stamp);
      for (const granted of reply.local) {
        members.forget(channelId, granted);
        const listener = messages.listenerOf(instance);
        if (listener) listener.grant({ kind: 'lease', channelId, token: granted, ttlMs, since: sentAt });
        else deps.giveBack(channelId, granted, ttlMs);
      }
      return reply.removed;
    },
  };
}
