/**
 * This instance's waiters, so a local release can wake one at once. A waiter listens on every bounded
 * channel of its candidate set (a slot freed on any of them can serve it) and is counted on the channel it is
 * registered with.
 */

import { pushTo, removeFrom } from '../core/collections.js';

export interface Waker {
  /** Cuts the waiter's current sleep short; false when it was not sleeping (busy with an attempt). */
  wake: () => boolean;
}

export class LocalWaiters {
  private readonly listeners = new Map<string, Waker[]>();
  private readonly registered = new Map<string, Waker[]>();

  add(registeredOn: string, listensTo: readonly string[], waker: Waker): void {
    pushTo(this.registered, registeredOn, waker);
    for (const id of listensTo) pushTo(this.listeners, id, waker);
  }

  remove(registeredOn: string, listensTo: readonly string[], waker: Waker): void {
    removeFrom(this.registered, registeredOn, waker);
    for (const id of listensTo) removeFrom(this.listeners, id, waker);
  }

  /**
   * Wakes one sleeping waiter that can use the channel, the longest-waiting of those registered on it first: one slot
   * came free, so one waiter retries at once; waking all would spend one acquire call per waiter for a single slot.
   */
  wakeOne(channelId: string): void {
    for (const waker of this.registered.get(channelId) ?? []) if (waker.wake()) return;
    for (const waker of this.listeners.get(channelId) ?? []) if (waker.wake()) return;
  }

  /** Waiters of this instance registered on the channel. */
  count(channelId: string): number {
    return this.registered.get(channelId)?.length ?? 0;
  }

  channels(): IterableIterator<string> {
    return this.registered.keys();
  }
}
