/**
 * The acquires and releases of one event-loop turn go out together at `setImmediate`, in one round trip. A release
 * can be withdrawn until then (slot handoff), at most once per token and turn, so a caller that gives a slot back and
 * takes it again in a loop still yields to the event loop.
 */
import type { AcquireReply, LeaseRef, LimitRelease, PendingRelease } from '../../store.js';
import type { AcquireRequest } from './acquire-call.js';

export interface Queued<Req, Res> {
  request: Req;
  resolve: (value: Res) => void;
  reject: (err: unknown) => void;
}

export interface ReleaseRequest extends LeaseRef {
  ttlMs: number;
  limit?: LimitRelease;
}

export type QueuedRelease = Queued<ReleaseRequest, boolean>;
export type QueuedAcquire = Queued<AcquireRequest, AcquireReply[]>;

export interface Turn {
  releases: QueuedRelease[];
  acquires: QueuedAcquire[];
}

export abstract class TurnQueue {
  private acquires: QueuedAcquire[] = [];
  private releases: (QueuedRelease & { withdrawn?: boolean })[] = [];
  private scheduled = false;
  private withdrawnThisTurn = new Set<string>();

  abstract readonly maxChannelsPerAcquire: number;

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
    };
    this.releases = [];
    this.acquires = [];
    this.withdrawnThisTurn = new Set();
    this.send(turn);
  };
}
