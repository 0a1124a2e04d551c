/**
 * This instance's waiters, by token, and the grants the store sends them. A mailbox opens before the enqueue, so a
 * grant that beats its reply is kept; a grant nobody stands for any more is given back and passes on.
 */
import { pushTo, removeFrom } from '../../core/collections.js';
import type { Grant, QueueListener } from '../../store/store.js';

export interface Mailbox {
  /** The channels granted to this waiter and not taken yet, oldest first. */
  readonly granted: string[];
  /**
   * Of those, how long each holds with no claim: `ttlMs` from `since` for a full lease (made by this instance's own
   * release), from the grant for another (which came after the registration's send).
   */
  readonly held: Map<string, { ttlMs: number; since?: number }>;
  /** Set when the store's subscription came back after a loss: the waiter polls its queues now. */
  recheck: boolean;
  /** Ends the waiter's sleep: a grant or a recheck arrived. */
  onGrant: (() => void) | undefined;
}

export class Inbox implements QueueListener {
  private readonly boxes = new Map<string, Mailbox>();
  /** The tokens queued on each channel. */
  private readonly byChannel = new Map<string, string[]>();

  constructor(private readonly giveBack: (channelId: string, token: string) => void) {}

  open(token: string): Mailbox {
    const box: Mailbox = { granted: [], held: new Map(), recheck: false, onGrant: undefined };
    this.boxes.set(token, box);
    return box;
  }

  /** Delivers the grants of another token of the same waiter (a moved registration) to its mailbox. */
  attach(token: string, box: Mailbox): void {
    this.boxes.set(token, box);
  }

  joined(channelId: string, token: string): void {
    pushTo(this.byChannel, channelId, token);
  }

  left(channelId: string, token: string): void {
    removeFrom(this.byChannel, channelId, token);
  }

  close(token: string): void {
    this.boxes.delete(token);
  }

  grant(grant: Grant): void {
    const { channelId, token } = grant;
    const box = this.boxes.get(token);
    if (!box || !this.byChannel.get(channelId)?.includes(token)) return this.giveBack(channelId, token);
    box.granted.push(channelId);
    if (grant.kind === 'lease') box.held.set(channelId, { ttlMs: grant.ttlMs, since: grant.since });
    else if (grant.heldMs !== undefined) box.held.set(channelId, { ttlMs: grant.heldMs });
    box.onGrant?.();
  }

  queued(): void {
    // the store keeps what it learns of queues; nothing to do for the waiters
  }

  resync(): void {
    for (const box of this.boxes.values()) {
      box.recheck = true;
      box.onGrant?.();
    }
  }

  /** Wakes every waiter (the candidate sets changed). */
  wake(): void {
    for (const box of this.boxes.values()) box.onGrant?.();
  }

  count(channelId: string): number {
    return this.byChannel.get(channelId)?.length ?? 0;
  }

  channels(): IterableIterator<string> {
    return this.byChannel.keys();
  }
}
