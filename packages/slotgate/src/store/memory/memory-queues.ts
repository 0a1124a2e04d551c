/**
 * MemoryStore's wait queues: the semantics of ../redis/lua/includes/queue.lua in one process. Messages arrive on a
 * later microtask, as pub/sub messages would.
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
  expiresAt: number;
  /** When its request arrived (EnqueueOptions.arrivedMsAgo): the queue's order. */
  arrival: number;
}

export class MemoryQueues {
  private readonly queues = new Map<string, Waiter[]>();
  private readonly listeners = new Map<string, QueueListener>();

  constructor(
    private readonly clock: Clock,
    private readonly slotsOf: (channelId: string) => ExpiringSet,
    /** The channel's adaptive limit under `max`, never below `floor`. */
    private readonly limitOf: (channelId: string, floor: number, max: number) => number,
    private readonly claimMs: number,
  ) {}

  /** The channel's live waiters, oldest first: the stored array (grantFree takes the waiters it grants off it). */
  private live(channelId: string): Waiter[] {
    const queue = this.queues.get(channelId);
    if (!queue) return [];
    const now = this.clock.now();
    const kept = queue.filter((w) => w.expiresAt > now);
    if (kept.length === queue.length) return queue;
    if (kept.length === 0) this.queues.delete(channelId);
    else this.queues.set(channelId, kept);
    return kept;
  }

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
   * Grants free slots to the oldest waiters within the clients' fair share; `quiet` is told nothing. With `floor`
   * (the caller enforces the channel's adaptive limit), each waiter's max is capped by that limit.
   */
  grantFree(channelId: string, quiet?: string, floor?: number): string[] {
    const granted: string[] = [];
    const queue = this.live(channelId);
    if (queue.length === 0) return granted;
    const now = this.clock.now();
    const slots = this.slotsOf(channelId);
    const maxOf = (w: Waiter) =>
      floor === undefined ? w.ref.max : this.limitOf(channelId, floor, w.ref.max);
    while (queue.length > 0) {
      const window = queue.slice(0, FAIR_WINDOW).map((w) => w.ref.token);
      let pick = 0;
      if (mixedClients(window)) {
        const live = [...slots.members].filter(([, expiry]) => expiry > now).map(([token]) => token);
        pick = fairPick(window, heldByClient(live));
      }
      // a pick that its own max (changed by a reload) cannot serve leaves the choice to the oldest
      if (pick > 0 && slots.full(maxOf(queue[pick]!), now)) pick = 0;
      const head = queue[pick]!;
      if (slots.full(maxOf(head), now)) break;
      queue.splice(pick, 1);
      slots.members.set(head.ref.token, now + this.claimMs);
      granted.push(head.ref.token);
      if (head.ref.token !== quiet)
        this.tell(head.ref.token, (l) =>
          l.grant({ kind: 'claim', channelId, token: head.ref.token, heldMs: this.claimMs }),
        );
    }
    if (queue.length === 0) this.queues.delete(channelId);
    return granted;
  }

  enqueue(ref: WaiterRef, options: EnqueueOptions): EnqueueReply {
    const queue = this.live(ref.channelId);
    if (queue.length >= options.maxWaiting) return 'queue_full';
    const ahead = queue.length;
    const now = this.clock.now();
    // precise: registrations within one millisecond keep their order
    const arrival = preciseNow(this.clock) - clampArrivalLead(options.arrivedMsAgo ?? 0);
    let at = queue.length;
    while (at > 0 && queue[at - 1]!.arrival > arrival) at--;
    queue.splice(at, 0, { ref: { ...ref }, expiresAt: now + options.ttlMs, arrival });
    this.queues.set(ref.channelId, queue);
    // behind others: slots are granted on release, acquire or poll, as in Redis
    if (ahead > 0) return 'queued';
    return this.grantOrLead(ref);
  }

  requeue(from: WaiterRef, to: WaiterRef, options: EnqueueOptions): EnqueueReply {
    const channelId = from.channelId;
    const queue = this.live(channelId);
    const at = queue.findIndex((w) => w.ref.token === from.token);
    const waiter = {
      ref: { ...to },
      expiresAt: this.clock.now() + options.ttlMs,
      arrival: at >= 0 ? queue[at]!.arrival : Math.min(preciseNow(this.clock), queue[0]?.arrival ?? Infinity),
    };
    if (at >= 0) queue[at] = waiter;
    // a grant it had not claimed is given back: at the head again, where it was when granted
    else if (this.slotsOf(channelId).remove(from.token)) queue.unshift(waiter);
    else if (queue.length >= options.maxWaiting) return 'queue_full';
    else queue.push(waiter);
    this.queues.set(channelId, queue);
    return this.grantOrLead(to);
  }

  /** `granted` when free slots reach `ref`; else, if it leads the queue, the channel's holders are told it formed. */
  private grantOrLead(ref: WaiterRef): EnqueueReply {
    if (this.grantFree(ref.channelId, ref.token, ref.floor).includes(ref.token)) return 'granted';
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
    this.grantFree(ref.channelId, ref.token, ref.floor);
    if (this.slotsOf(ref.channelId).members.has(ref.token)) return 'granted';
    return this.live(ref.channelId).some((w) => w.ref.token === ref.token) ? 'queued' : 'gone';
  }

  leave(ref: WaiterRef): boolean {
    const queue = this.live(ref.channelId).filter((w) => w.ref.token !== ref.token);
    if (queue.length) this.queues.set(ref.channelId, queue);
    else this.queues.delete(ref.channelId);
    const returned = this.slotsOf(ref.channelId).remove(ref.token);
    if (returned) this.grantFree(ref.channelId, undefined, ref.floor);
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
