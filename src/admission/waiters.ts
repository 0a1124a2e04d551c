/**
 * This instance's waiters, so a local release can wake one at once (spec §5.3). A waiter listens on every bounded
 * channel of its candidate set (a slot freed on any of them can serve it) and is counted on the channel it is
 * registered with.
 */

export interface Waker {
  /** Cuts the waiter's current sleep short; false when it was not sleeping (busy with an attempt). */
  wake: () => boolean;
}

export class LocalWaiters {
  private readonly listeners = new Map<string, Waker[]>();
  private readonly registered = new Map<string, number>();

  add(registeredOn: string, listensTo: readonly string[], waker: Waker): void {
    this.registered.set(registeredOn, (this.registered.get(registeredOn) ?? 0) + 1);
    for (const id of listensTo) {
      const list = this.listeners.get(id);
      if (list) list.push(waker);
      else this.listeners.set(id, [waker]);
    }
  }

  remove(registeredOn: string, listensTo: readonly string[], waker: Waker): void {
    const n = (this.registered.get(registeredOn) ?? 1) - 1;
    if (n > 0) this.registered.set(registeredOn, n);
    else this.registered.delete(registeredOn);
    for (const id of listensTo) {
      const list = this.listeners.get(id);
      if (!list) continue;
      const i = list.indexOf(waker);
      if (i >= 0) list.splice(i, 1);
      if (list.length === 0) this.listeners.delete(id);
    }
  }

  /**
   * Wakes the longest-waiting sleeping waiter that can use the channel: one slot came free, so one waiter retries at
   * once; waking all would spend one acquire call per waiter for a single slot.
   */
  wakeOne(channelId: string): void {
    for (const waker of this.listeners.get(channelId) ?? []) if (waker.wake()) return;
  }

  /** Waiters of this instance registered on the channel. */
  count(channelId: string): number {
    return this.registered.get(channelId) ?? 0;
  }

  channels(): IterableIterator<string> {
    return this.registered.keys();
  }
}
