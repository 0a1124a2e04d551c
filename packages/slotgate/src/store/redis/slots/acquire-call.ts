import type { AcquireOptions, AcquireReply, AcquireTarget } from '../../store.js';
import type { KeyBuilder } from '../keys.js';
import { SCRIPTS, splitAcquireReply } from '../scripts.js';

export interface AcquireRequest {
  targets: readonly AcquireTarget[];
  opts: AcquireOptions;
}

export interface ScriptCall<R> {
  keys: string[];
  args: (string | number)[];
  read(raw: unknown): R;
}

/** Bounds the time one coalesced call holds Redis. */
export const MAX_CHANNELS_PER_CALL = 200;

/** One call for requests that share a lease TTL and a cooldown setting. */
export function acquireCall(
  keys: KeyBuilder,
  claimMs: number,
  requests: readonly AcquireRequest[],
): ScriptCall<AcquireReply[][]> {
  const { leaseTtlMs, checkCooldown } = requests[0]!.opts;
  const index = new Map<string, number>();
  const callKeys: string[] = [];
  const channelArgs: (number | string)[] = [];
  const requestArgs: (string | number)[] = [];
  for (const { targets, opts } of requests) {
    requestArgs.push(opts.token);
    targets.forEach((t, i) => {
      let c = index.get(t.channelId);
      if (c === undefined) {
        index.set(t.channelId, (c = index.size + 1));
        const id = t.channelId;
        callKeys.push(keys.slots(id), keys.cooldown(id), keys.queue(id), keys.peak(id), keys.limit(id));
        channelArgs.push(t.max, t.channelId, t.floor ?? '');
      }
      requestArgs.push(i === targets.length - 1 ? -c : c);
    });
  }
  return {
    keys: callKeys,
    args: [
      leaseTtlMs,
      checkCooldown ? 1 : 0,
      index.size,
      claimMs,
      keys.grants(),
      ...channelArgs,
      ...requestArgs,
    ],
    read: (raw) => splitAcquireReply(SCRIPTS.acquireSlots.reply(raw), requests),
  };
}

/** Groups requests of the same lease TTL and cooldown setting, at most `max` channels per group (or one request). */
export function groupAcquires<Q extends { request: AcquireRequest }>(
  queue: readonly Q[],
  max: number,
): Q[][] {
  const open = new Map<string, { group: Q[]; weight: number }>();
  const groups: Q[][] = [];
  for (const q of queue) {
    const key = `${q.request.opts.leaseTtlMs}:${q.request.opts.checkCooldown}`;
    let current = open.get(key);
    const w = q.request.targets.length;
    if (current && current.weight + w > max) current = undefined;
    if (!current) {
      current = { group: [], weight: 0 };
      open.set(key, current);
      groups.push(current.group);
    }
    current.group.push(q);
    current.weight += w;
  }
  return groups;
}
