/**
 * Which channels this store believes have waiters. The hint only decides whether a slot may be handed off without a
 * release and whether a newcomer skips the channel. Marks are numbered, so a reply to a command sent before a mark
 * (a message that came by another connection) never clears it.
 */
import type { AcquireReply, AcquireTarget, ChannelLoad } from '../../store.js';

export class QueueHints {
  private readonly marks = new Map<string, number>();
  private marked = 0;

  has(channelId: string): boolean {
    return this.marks.has(channelId);
  }

  /** A command's stamp: its reply clears only the marks made before it. */
  stamp(): number {
    return this.marked;
  }

  mark(channelId: string): void {
    this.marks.set(channelId, ++this.marked);
  }

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

  /** A load read without waiters never clears: it counts registrations by one lifetime only. */
  noteLoads(loads: ReadonlyMap<string, ChannelLoad>): void {
    for (const [id, load] of loads) if (load.waiting > 0) this.mark(id);
  }
}
