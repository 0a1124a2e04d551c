/**
 * The acquires and releases asked for during one event-loop turn go out together at `setImmediate` (`send`, which a
 * topology implements): every acquirer resumed by one reply flight and every release from the timers that fired share
 * one round trip. A release can be withdrawn until the turn ends — the slot passes to another request of this
 * instance with no command (slot handoff) — at most once per token and turn, so a caller that gives a slot back and
 * takes it again in a loop still yields to the event loop.
 */
import type { AcquireReply, LeaseRef, PendingRelease } from '../../store.js';
import type { AcquireRequest } from './acquire-call.js';

export interface Queued<Req, Res> {
  request: Req;
  resolve: (value: Res) => void;
  reject: (err: unknown) => void;
}

export interface ReleaseRequest extends LeaseRef {
  ttlMs: number;
}

export type QueuedRelease = Queued<ReleaseRequest, boolean>;
export type QueuedAcquire = Queued<AcquireRequest, AcquireReply[]>;

/** One turn's commands, and the work waiting for them to be written (load reads go behind them). */
export interface Turn {
  releases: QueuedRelease[];
  acquires: QueuedAcquire[];
  written: (() => void)[];
}

export abstract class TurnQueue {
  private acquires: QueuedAcquire[] = [];
  private releases: (QueuedRelease & { withdrawn?: boolean })[] = [];
  private scheduled = false;
  private written: (() => void)[] = [];
  private withdrawnThisTurn = new Set<string>();

  /** Channels one acquire call may try. */
  abstract readonly maxChannelsPerAcquire: number;

  /** Sends one turn's commands. */
  protected abstract send(turn: Turn): void;

  acquire(request: AcquireRequest): Promise<AcquireReply[]> {
    return new Promise((resolve, reject) => {
      this.acquires.push({ request, resolve, reject });
      this.schedule();
    });
  }

  release(lease: ReleaseRequest): PendingRelease {
    let queued!: QueuedRelease & { withdrawn?: boolean };
    const done = new Promise<boolean>((resolve, reject) => {
      queued = { request: lease, resolve, reject };
    });
    this.releases.push(queued);
    this.schedule();
    const turn = this.releases;
    return {
      done,
      withdrawable: true,
      withdraw: () => {
        if (queued.withdrawn || this.releases !== turn || this.withdrawnThisTurn.has(lease.token))
          return false;
        this.withdrawnThisTurn.add(lease.token);
        queued.withdrawn = true;
        queued.resolve(true);
        return true;
      },
    };
  }

  /** Resolves once this turn's commands are written; undefined when nothing is queued. */
  flushed(): Promise<void> | undefined {
    if (!this.scheduled) return undefined;
    return new Promise((resolve) => this.written.push(resolve));
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
      written: this.written,
    };
    this.releases = [];
    this.acquires = [];
    this.written = [];
    this.withdrawnThisTurn = new Set();
    this.send(turn);
  };
}
