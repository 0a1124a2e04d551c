/**
 * Which channels this store believes have waiters: replies and messages mark a channel, replies that saw no waiter
 * clear it. A release always grants to the oldest waiter in Redis whatever the hint says; the hint only decides
 * whether a slot may pass to a request of this instance without a release (a handoff) and whether a newcomer skips
 * the channel. Each mark is numbered, so a reply to a command sent before a mark (a queue-formed message that came by
 * another connection) never clears it.
 */
import type { AcquireReply, AcquireTarget, ChannelLoad } from '../../store.js';

export class QueueHints {
  private readonly marks = new Map<string, number>();
  private marked = 0;

  has(channelId: string): boolean {
    return this.marks.has(channelId);
  }

  /** The stamp of a command sent now: its reply clears only the marks made before it. */
  stamp(): number {
    return this.marked;
  }

  mark(channelId: string): void {
    this.marks.set(channelId, ++this.marked);
  }

  /** The reply to a command sent at `stamp` saw no waiter on the channel. */
  clear(channelId: string, stamp: number): void {
    if ((this.marks.get(channelId) ?? Infinity) <= stamp) this.marks.delete(channelId);
  }

  /** `queued` means waiters; `acquired` means none when the call ran. */
  noteAcquire(targets: readonly AcquireTarget[], replies: readonly AcquireReply[], stamp: number): void {
    replies.forEach((reply, i) => {
      if (reply === 'queued') this.mark(targets[i]!.channelId);
      else if (reply === 'acquired') this.clear(targets[i]!.channelId, stamp);
    });
  }

  /** Waiters in a load read mark; none never clears (a read counts registrations by one lifetime only). */
  noteLoads(loads: ReadonlyMap<string, ChannelLoad>): void {
    for (const [id, load] of loads) if (load.waiting > 0) this.mark(id);
  }
}
