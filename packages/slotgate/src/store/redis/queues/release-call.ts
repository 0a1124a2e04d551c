/**
 * Every release is one releaseSlot call, which grants the slot to the oldest live waiter in the same script. A waiter
 * of the releasing instance gets a full lease, named in the reply, with no claim.
 */
import type { Clock } from '../../../core/clock.js';
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
}

/** Its reply: whether the token held a slot. */
export function releaseCall(deps: ReleaseDeps, lease: ReleaseRequest): ScriptCall<boolean> {
  const { keys, clock, hints, members, messages } = deps;
  const { channelId, token, ttlMs } = lease;
  const instance = instanceOfToken(token);
  const local = messages.listenerOf(instance) ? instance : '';
  const stamp = hints.stamp();
  const sentAt = clock.now();
  return {
    keys: [keys.slots(channelId), keys.queue(channelId), keys.peak(channelId)],
    args: [token, deps.claimMs, ttlMs, keys.grants(), channelId, local],
    read(raw) {
      const reply = SCRIPTS.releaseSlot.reply(raw);
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
