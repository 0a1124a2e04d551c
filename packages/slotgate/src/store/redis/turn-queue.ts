/**
 * What one event-loop turn's store commands have in common, on one node and on Cluster: the acquires and releases
 * queued during a turn go out together at `setImmediate` (`send`, which the topology implements). `setImmediate` runs
 * once this turn's timers and I/O callbacks are done, so every acquirer resumed by the same reply flight and every
 * release from the timers that fired are in the batch.
 *
 * A queued release can be withdrawn until the turn ends (the slot passes to another request of this instance with no
 * command at all), at most once per token and turn: a caller that gives a slot back and takes it again in a loop
 * would otherwise never yield to the event loop, every step a resolved promise.
 */
import type { AcquireReply, LeaseRef, PendingRelease } from '../store.js';
import type { AcquireRequest } from './acquire-call.js';

export interface Queued<Req, Res> {
  request: Req;
  resolve: (value: Res) => void;
  reject: (err: unknown) => void;
}

export interface QueuedRelease extends Queued<LeaseRef, boolean> {
  /** Taken back before the turn ended: not sent. */
  withdrawn: boolean;
  /** Sent through releaseSlot (the channel has waiters: the slot goes to the oldest) rather than a plain ZREM. */
  viaQueue: boolean;
}

export type QueuedAcquire = Queued<AcquireRequest, AcquireReply[]>;

/** One turn's commands: the releases not withdrawn, the acquires, and the work waiting for them to go out. */
export interface Turn {
  releases: QueuedRelease[];
  acquires: QueuedAcquire[];
  /** Resolve once the turn's commands are written (load reads go behind them). */
  waiting: (() => void)[];
}

export abstract class TurnQueue {
  private acquires: QueuedAcquire[] = [];
  private releases: QueuedRelease[] = [];
  private scheduled = false;
  /** Work waiting for this turn's commands to go out first. */
  private afterFlush: (() => void)[] = [];
  /** Tokens whose release was withdrawn in this turn. */
  private withdrawnThisTurn = new Set<string>();

  /** Sends one turn's commands. */
  protected abstract send(turn: Turn): void;

  acquire(request: AcquireRequest): Promise<AcquireReply[]> {
    return new Promise((resolve, reject) => {
      this.acquires.push({ request, resolve, reject });
      this.schedule();
    });
  }

  release(lease: LeaseRef, viaQueue: boolean): PendingRelease {
    let queued!: QueuedRelease;
    const done = new Promise<boolean>((resolve, reject) => {
      queued = { request: lease, resolve, reject, withdrawn: false, viaQueue };
    });
    this.releases.push(queued);
    this.schedule();
    const turn = this.releases;
    return {
      done,
      held: true,
      withdraw: () => {
        // Still in this turn's queue (not flushed), not withdrawn before, and the token's first withdrawal this turn.
        if (queued.withdrawn || this.releases !== turn || this.withdrawnThisTurn.has(lease.token))
          return false;
        this.withdrawnThisTurn.add(lease.token);
        queued.withdrawn = true;
        queued.resolve(true);
        return true;
      },
    };
  }

  /** Resolves once this turn's commands have gone out; undefined when nothing is queued. */
  flushed(): Promise<void> | undefined {
    if (!this.scheduled) return undefined;
    return new Promise((resolve) => this.afterFlush.push(resolve));
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.flush);
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    const turn: Turn = {
      releases: this.releases.filter((q) => !q.withdrawn),
      acquires: this.acquires,
      waiting: this.afterFlush,
    };
    this.releases = [];
    this.acquires = [];
    this.afterFlush = [];
    this.withdrawnThisTurn = new Set();
    this.send(turn);
  };
}
