/**
 * The wait queues of MemoryStore: the same FIFO, grant and claim semantics as the Redis scripts
 * (../redis/lua/includes/queue.lua), in one process. Grants and queue news reach the listening instance on a later
 * microtask, as a pub/sub message would.
 */
import { preciseNow, type Clock } from '../../core/clock.js';
import { FAIR_WINDOW, fairPick, heldByClient, mixedClients } from '../../core/fair-share.js';
import { instanceOfToken } from '../../core/ids.js';
import {
  clampArrivalLead,
  type EnqueueOptions,
  type EnqueueReply,
  type Listening,
  type QueueListener,
  type WaiterRef,
  type WaiterState,
} from '../store.js';
import type { ExpiringSet } from './expiring-set.js';

interface Waiter {
  ref: WaiterRef;
  /** Registration expiry. */
  expiresAt: number;
  /** Where it stands: when its request arrived (EnqueueOptions.arrivedMsAgo, at most MAX_ARRIVAL_LEAD_MS back). */
  arrival: number;
}

export class MemoryQueues {
  /** Per channel, the waiters in arrival order. */
  private readonly queues = new Map<string, Waiter[]>();
  private readonly listeners = new Map<string, QueueListener>();

  constructor(
    private readonly clock: Clock,
    /** The slots of a channel (created on demand). */
    private readonly slotsOf: (channelId: string) => ExpiringSet,
    private readonly claimMs: number,
  ) {}

  /** The channel's live waiters, oldest first (expired ones dropped): the stored array, for the caller to change. */
  private live(channelId: string): Waiter[] {
    const queue = this.queues.get(channelId);
    if (!queue) return [];
    const now = this.clock.now();
    const kept = queue.filter((w) => w.expiresAt > now);
    // The stored array itself when nothing expired: grantFree shifts the waiters it grants off what this returns.
    if (kept.length === queue.length) return queue;
    if (kept.length === 0) this.queues.delete(channelId);
    else this.queues.set(channelId, kept);
    return kept;
  }

  /** Live waiters of the channel (the `waiting` of a load read). */
  count(channelId: string): number {
    return this.live(channelId).length;
  }

  hasQueue(channelId: string): boolean {
    return this.live(channelId).length > 0;
  }

  private tell(token: string, message: (l: QueueListener) => void): void {
    const listener = this.listeners.get(instanceOfToken(token));
    if (listener) queueMicrotask(() => message(listener));
  }

  /**
   * Grants free slots to the live waiters, oldest first within the fair share between clients; `quiet` is granted
   * without a message. Returns the tokens granted.
   */
  grantFree(channelId: string, quiet?: string): string[] {
    const granted: string[] = [];
    const queue = this.live(channelId);
    if (queue.length === 0) return granted;
    const now = this.clock.now();
    const slots = this.slotsOf(channelId);
    while (queue.length > 0) {
      // the fair share between clients (core/fair-share.ts): plain FIFO when the oldest waiters are one client's
      const window = queue.slice(0, FAIR_WINDOW).map((w) => w.ref.token);
      let pick = 0;
      if (mixedClients(window)) {
        const live = [...slots.members].filter(([, expiry]) => expiry > now).map(([token]) => token);
        pick = fairPick(window, heldByClient(live));
      }
      // a pick that cannot be served under its own max (a max changed by a reload) leaves the choice to the oldest
      if (pick > 0 && slots.members.size >= queue[pick]!.ref.max) slots.prune(now);
      if (pick > 0 && slots.members.size >= queue[pick]!.ref.max) pick = 0;
      const head = queue[pick]!;
      if (slots.members.size >= head.ref.max) slots.prune(now);
      if (slots.members.size >= head.ref.max) break;
      queue.splice(pick, 1);
      slots.members.set(head.ref.token, now + this.claimMs);
      granted.push(head.ref.token);
      if (head.ref.token !== quiet)
        this.tell(head.ref.token, (l) => l.grant({ kind: 'claim', channelId, token: head.ref.token }));
    }
    if (queue.length === 0) this.queues.delete(channelId);
    return granted;
  }

  enqueue(ref: WaiterRef, options: EnqueueOptions): EnqueueReply {
    const queue = this.live(ref.channelId);
    if (queue.length >= options.maxWaiting) return 'queue_full';
    const ahead = queue.length;
    const now = this.clock.now();
    // on the precise clock (Clock.precise): registrations within a millisecond keep their arrivals' order
    const arrival = preciseNow(this.clock) - clampArrivalLead(options.arrivedMsAgo ?? 0);
    // after every waiter that arrived at or before it (a later registration that arrived earlier stands ahead)
    let at = queue.length;
    while (at > 0 && queue[at - 1]!.arrival > arrival) at--;
    queue.splice(at, 0, { ref: { ...ref }, expiresAt: now + options.ttlMs, arrival });
    this.queues.set(ref.channelId, queue);
    // Behind others: a slot that came free went to them when it did (one that ran out unseen goes at the next
    // release, acquire or safety poll), as in Redis.
    if (ahead > 0) return 'queued';
    return this.grantOrLead(ref);
  }

  /** The registration of `from` moves to `to` in its place (see SlotStore.requeue). */
  requeue(from: WaiterRef, to: WaiterRef, options: EnqueueOptions): EnqueueReply {
    const channelId = from.channelId;
    const queue = this.live(channelId);
    const at = queue.findIndex((w) => w.ref.token === from.token);
    const waiter = {
      ref: { ...to },
      expiresAt: this.clock.now() + options.ttlMs,
      // its place, or the head again (a grant given back), or the tail
      arrival: at >= 0 ? queue[at]!.arrival : Math.min(preciseNow(this.clock), queue[0]?.arrival ?? Infinity),
    };
    if (at >= 0) queue[at] = waiter;
    // a grant it had not claimed is given back: it stands at the head again, where it was when granted
    else if (this.slotsOf(channelId).members.delete(from.token)) queue.unshift(waiter);
    else if (queue.length >= options.maxWaiting) return 'queue_full';
    else queue.push(waiter);
    this.queues.set(channelId, queue);
    return this.grantOrLead(to);
  }

  /**
   * After `ref` joined: `granted` when the free slots reached it; otherwise, when it leads the queue, every instance
   * holding a slot of the channel is told a queue formed.
   */
  private grantOrLead(ref: WaiterRef): EnqueueReply {
    if (this.grantFree(ref.channelId, ref.token).includes(ref.token)) return 'granted';
    if (this.live(ref.channelId)[0]?.ref.token === ref.token) {
      const told = new Set<string>();
      for (const holder of this.slotsOf(ref.channelId).members.keys()) {
        const instance = instanceOfToken(holder);
        if (told.has(instance)) continue;
        told.add(instance);
        this.tell(holder, (l) => l.queued(ref.channelId));
      }
    }
    return 'queued';
  }

  poll(ref: WaiterRef): WaiterState {
    this.grantFree(ref.channelId, ref.token);
    if (this.slotsOf(ref.channelId).members.has(ref.token)) return 'granted';
    return this.live(ref.channelId).some((w) => w.ref.token === ref.token) ? 'queued' : 'gone';
  }

  /** Takes the waiter out; a grant it holds passes on. True when it held one. */
  leave(ref: WaiterRef): boolean {
    const queue = this.live(ref.channelId).filter((w) => w.ref.token !== ref.token);
    if (queue.length) this.queues.set(ref.channelId, queue);
    else this.queues.delete(ref.channelId);
    const returned = this.slotsOf(ref.channelId).members.delete(ref.token);
    if (returned) this.grantFree(ref.channelId);
    return returned;
  }

  listen(instanceId: string, listener: QueueListener): Listening {
    this.listeners.set(instanceId, listener);
    return {
      ready: Promise.resolve(),
      stop: async () => {
        if (this.listeners.get(instanceId) === listener) this.listeners.delete(instanceId);
      },
    };
  }

  clear(): void {
    this.queues.clear();
  }
}
