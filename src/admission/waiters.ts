/** This instance's waiters per channel, so a local release can wake one at once (spec §5.3). */

export interface Waker {
  /** Cuts the waiter's current sleep short; false when it was not sleeping (busy with an attempt). */
  wake: () => boolean;
}

export class LocalWaiters {
  private readonly byChannel = new Map<string, Waker[]>();

  add(channelId: string, waker: Waker): void {
    const list = this.byChannel.get(channelId);
    if (list) list.push(waker);
    else this.byChannel.set(channelId, [waker]);
  }

  remove(channelId: string, waker: Waker): void {
    const list = this.byChannel.get(channelId);
    if (!list) return;
    const i = list.indexOf(waker);
    if (i >= 0) list.splice(i, 1);
    if (list.length === 0) this.byChannel.delete(channelId);
  }

  /**
   * Wakes the longest-waiting sleeping waiter of the channel: one slot came free, so one waiter retries at once;
   * waking all would spend one acquire call per waiter for a single slot.
   */
  wakeOne(channelId: string): void {
    for (const waker of this.byChannel.get(channelId) ?? []) if (waker.wake()) return;
  }

  count(channelId: string): number {
    return this.byChannel.get(channelId)?.length ?? 0;
  }

  channels(): IterableIterator<string> {
    return this.byChannel.keys();
  }
}
