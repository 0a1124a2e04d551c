/**
 * This instance's waiters, by token, and the grants the store sends them. A waiter registers before it enqueues, so
 * a grant that arrives before the enqueue's own reply is kept for it. A grant for a registration nobody stands in any
 * more (the waiter timed out, gave up, left that queue, or moved there to a new token) is given back at once, so it
 * passes to the next waiter.
 */
import { pushTo, removeFrom } from '../core/collections.js';
import type { QueueListener } from '../store/store.js';

export interface Mailbox {
  /** The channels granted to this waiter and not taken yet, oldest first. */
  readonly granted: string[];
  /**
   * Of those, the grants that are full leases already (made by this instance's own release): their TTL, and when (the
   * waiters' clock) it began at the latest.
   */
  readonly leased: Map<string, { ttlMs: number; from: number }>;
  /** Of the others, those known to hold their slot until a time (the clock's) without a claim. */
  readonly heldUntil: Map<string, number>;
  /** Set when the store's subscription came back after a loss: the waiter should poll its queues now. */
  recheck: boolean;
  /** Called when a grant or a recheck arrives (the waiter's current sleep should end). */
  onGrant: (() => void) | undefined;
}

export class Inbox implements QueueListener {
  private readonly boxes = new Map<string, Mailbox>();
  /** The channels each waiting token is queued on, for the local counts. */
  private readonly byChannel = new Map<string, string[]>();

  constructor(
    private readonly giveBack: (channelId: string, token: string) => void,
    /** The waiters' clock (a grant that holds for a while is noted until when, on it). */
    private readonly now: () => number,
  ) {}

  open(token: string): Mailbox {
    const box: Mailbox = {
      granted: [],
      leased: new Map(),
      heldUntil: new Map(),
      recheck: false,
      onGrant: undefined,
    };
    this.boxes.set(token, box);
    return box;
  }

  /** Delivers the grants of another token of the same waiter (a registration it moved to) to its mailbox. */
  attach(token: string, box: Mailbox): void {
    this.boxes.set(token, box);
  }

  /** The waiter is queued on the channel under this token (it counts there in this instance's loads). */
  joined(channelId: string, token: string): void {
    pushTo(this.byChannel, channelId, token);
  }

  left(channelId: string, token: string): void {
    removeFrom(this.byChannel, channelId, token);
  }

  close(token: string): void {
    this.boxes.delete(token);
  }

  grant(channelId: string, token: string, leaseTtlMs?: number, heldForMs?: number, leaseAgeMs = 0): void {
    const box = this.boxes.get(token);
    if (!box || !this.byChannel.get(channelId)?.includes(token)) {
      this.giveBack(channelId, token);
      return;
    }
    box.granted.push(channelId);
    if (leaseTtlMs !== undefined)
      box.leased.set(channelId, { ttlMs: leaseTtlMs, from: this.now() - leaseAgeMs });
    else if (heldForMs !== undefined) box.heldUntil.set(channelId, this.now() + heldForMs);
    box.onGrant?.();
  }

  queued(): void {
    // The store keeps what it learns of queues; nothing to do for the waiters.
  }

  resync(): void {
    for (const box of this.boxes.values()) {
      box.recheck = true;
      box.onGrant?.();
    }
  }

  /** Wakes every waiter (the candidate sets changed: each resolves its own again). */
  wake(): void {
    for (const box of this.boxes.values()) box.onGrant?.();
  }

  /** Waiters of this instance queued on the channel. */
  count(channelId: string): number {
    return this.byChannel.get(channelId)?.length ?? 0;
  }

  channels(): IterableIterator<string> {
    return this.byChannel.keys();
  }
}
