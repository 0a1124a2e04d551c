/**
 * The arguments of one acquireSlots call for a group of acquire requests, and the reading of its reply. The call
 * also carries a hint per channel: whether its slots key's expiry is due for an extension — once this store has not
 * had it extended for TTL/4 — so the script pays one PTTL + PEXPIRE per key per TTL/4 instead of a PTTL per admission
 * (see lua/acquireSlots-n.lua).
 */
import type { Clock } from '../../core/clock.js';
import { ceilOrEmpty } from './redis-time.js';
import type { AcquireOptions, AcquireReply, AcquireTarget } from '../store.js';
import type { KeyBuilder } from './keys.js';
import { splitAcquireReply } from './scripts.js';

export interface AcquireRequest {
  targets: readonly AcquireTarget[];
  opts: AcquireOptions;
}

export interface AcquireCall {
  keys: string[];
  args: (string | number)[];
  /** One reply list per request, from the script's flat codes; records the key extensions the call made. */
  read(codes: readonly AcquireReply[]): AcquireReply[][];
}

/** Channels a coalesced call may try in total: bounds the time one script holds Redis. */
export const MAX_CHANNELS_PER_CALL = 200;
/** Channels whose last key extension is remembered (cleared past this, like the key cache). */
const EXTENDED_LIMIT = 10_000;

export class AcquireCalls {
  /** When this store last had each channel's slots key extended. */
  private readonly extendedAt = new Map<string, number>();

  constructor(
    private readonly keys: KeyBuilder,
    private readonly clock: Clock,
    /** The claim deadline of a grant the call makes to a waiter. */
    private readonly claimMs: number,
    /** Whether Redis extends a key's expiry with `PEXPIRE … GT` (Epoch.expiryGt). */
    private readonly expiryGt: () => boolean = () => false,
    /**
     * Now on the Redis clock, never earlier than Redis's own (RedisClock.upperNow), to score leases without a TIME
     * in the script; undefined: the script reads TIME.
     */
    private readonly scoreNow: () => number | undefined = () => undefined,
  ) {}

  /** The call for requests that share a lease TTL and a cooldown setting. */
  build(requests: readonly AcquireRequest[]): AcquireCall {
    const sentAt = this.clock.now();
    const { leaseTtlMs, checkCooldown } = requests[0]!.opts;
    const index = new Map<string, number>();
    const keys: string[] = [];
    const channelArgs: (number | string)[] = [];
    const requestArgs: (string | number)[] = [];
    for (const { targets, opts } of requests) {
      opts.onSent?.();
      requestArgs.push(opts.token);
      for (let i = 0; i < targets.length; i++) {
        const t = targets[i]!;
        let c = index.get(t.channelId);
        if (c === undefined) {
          index.set(t.channelId, (c = index.size + 1));
          const id = t.channelId;
          keys.push(this.keys.slots(id), this.keys.cooldown(id), this.keys.queue(id));
          const extendedAt = this.extendedAt.get(id);
          const extend = extendedAt === undefined || sentAt - extendedAt >= leaseTtlMs / 4;
          channelArgs.push(t.max, extend ? (this.expiryGt() ? 2 : 1) : 0, id);
        }
        requestArgs.push(i === targets.length - 1 ? -c : c);
      }
    }
    const args = [
      leaseTtlMs,
      checkCooldown ? 1 : 0,
      index.size,
      this.claimMs,
      this.keys.grants(),
      ceilOrEmpty(this.scoreNow()),
      ...channelArgs,
      ...requestArgs,
    ];
    const read = (codes: readonly AcquireReply[]): AcquireReply[][] => {
      const replies = splitAcquireReply(codes, requests);
      replies.forEach((reply, q) => {
        const last = reply.length - 1;
        if (reply[last] !== 'acquired') return;
        const channelId = requests[q]!.targets[last]!.channelId;
        if (channelArgs[3 * index.get(channelId)! - 2] === 0) return;
        if (this.extendedAt.size >= EXTENDED_LIMIT) this.extendedAt.clear();
        this.extendedAt.set(channelId, sentAt);
      });
      return replies;
    };
    return { keys, args, read };
  }
}

/**
 * Splits a turn's acquires into calls: requests with the same lease TTL and cooldown setting (normally all of them)
 * trying at most `max` channels in total per call (a lone request may exceed it).
 */
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
