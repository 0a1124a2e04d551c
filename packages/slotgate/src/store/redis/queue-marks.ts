/**
 * What a RedisStore believes of each channel's queue, and how its releases race a queue that forms (docs/redis.md,
 * "Which release"): the marks that make a release a plain ZREM or send it through the queue, each stamped so that a
 * reply to a command sent before a mark does not undo it; the registrations of this store on their way; and the
 * plain releases a `Q` message may have to make good with a kick.
 */
import type { Clock } from '../../core/clock.js';
import type { AcquireReply, AcquireTarget, ChannelLoad, LeaseRef } from '../store.js';

export interface QueueMarksDeps {
  /** Times the plain releases answered without a clock bound. */
  clock: Clock;
  /**
   * Now on the Redis clock by the store's upper bound (RedisClock.upperNow); undefined where there is none (Cluster,
   * before the first reading).
   */
  scoreNow?: () => number | undefined;
  /**
   * Sends a release of `lease` through the queue (lua/releaseSlot-2.lua): the kick that grants a slot a plain release
   * freed behind a queue that formed meanwhile (its token is nobody's: only the grant loop does anything).
   */
  kick: (lease: LeaseRef) => void;
}

/** A lease TTL for keys a grant touches when the caller gave none (it only ever extends a key's expiry). */
export const DEFAULT_LEASE_TTL_MS = 60_000;

/** Channels whose plain releases are remembered, past which those with none in flight are dropped. */
const PLAIN_LIMIT = 10_000;

/**
 * Where the store has no upper bound of the Redis clock (Cluster, before its first reading, or when that is over 10 s
 * old: redis-time.ts), or the release failed: how long after a plain release was answered a queue's forming may still
 * have run before it. A `Q` message that arrives within this of the release's answer is taken to be about a queue
 * formed after it (formed).
 */
const UNBOUNDED_RACE_MS = 1000;

/** A channel's releases by plain ZREM from this store: how many are unanswered, and when the last was answered. */
interface PlainReleases {
  inFlight: number;
  /** A kick waits for the releases in flight to be answered (on Cluster one may be sent again after a redirect). */
  kickDue: LeaseRef | undefined;
  /** The store's upper bound of the Redis clock when the last with one was answered. */
  answeredBelow: number;
  /** This store's clock when the last without one (no bound, or it failed) was answered. */
  unboundedAt: number;
  /** The lease TTL of the last (a kick grants this instance's waiters leases of it). */
  ttlMs: number;
}

export class QueueMarks {
  /**
   * Channels this instance believes have a queue, each with the stamp of its latest mark (`marks` then): a clear
   * from a reply to a command sent before that mark does not undo it (the mark may have come by another connection,
   * a `Q` message, about a queue that formed after the command ran).
   */
  private readonly queued = new Map<string, number>();
  /** Marks of a queue so far, over all channels: a command's stamp is this when it was sent. */
  private marks = 0;
  /** Per channel, this store's registrations not yet answered: until they are, the channel counts as queued. */
  private readonly registrations = new Map<string, number>();
  /** Per channel, this store's releases by plain ZREM (formed() reads them). */
  private readonly plain = new Map<string, PlainReleases>();

  constructor(private readonly deps: QueueMarksDeps) {}

  /** Whether this instance believes the channel has a queue (the store's `queued()`: no handoff, no acquire there). */
  has(channelId: string): boolean {
    return this.queued.has(channelId);
  }

  /**
   * Whether a slot of the channel is given back through the queue: it is marked queued, or a registration of this
   * store is on its way there (sent ahead of the release on the same connection, it may form a queue the release
   * would otherwise free a slot behind). Only the release counts the registration: a newcomer that took it for a
   * queue and skipped its acquire was overtaken more often (the bench's FIFO inversions in open200 ×4 were 2.1 %
   * in 2 runs, against 1.1–1.3 % in 2 runs of each of the other two ways).
   */
  releasesViaQueue(channelId: string): boolean {
    return this.queued.has(channelId) || this.registrations.has(channelId);
  }

  /** The stamp of a command sent now: what its reply may clear is judged by it (mark). */
  stamp(): number {
    return this.marks;
  }

  /** Marks the channel queued, or clears it unless it was marked after `stamp` (the clearing command was sent). */
  mark(channelId: string, queued: boolean, stamp = Infinity): void {
    // (no limit: a mark dropped while its queue lives would send releases past it, and the marks are one per channel)
    if (queued) this.queued.set(channelId, ++this.marks);
    else if ((this.queued.get(channelId) ?? Infinity) <= stamp) this.queued.delete(channelId);
  }

  /**
   * What an acquire call's replies say: `queued` means a queue, `acquired` means none was there when it ran (`stamp`:
   * when it was sent).
   */
  noteAcquire(targets: readonly AcquireTarget[], replies: readonly AcquireReply[], stamp: number): void {
    replies.forEach((reply, i) => {
      if (reply === 'queued') this.mark(targets[i]!.channelId, true);
      else if (reply === 'acquired') this.mark(targets[i]!.channelId, false, stamp);
    });
  }

  /**
   * What a load read says: live waiters mean a queue. None never clears a mark: the read counts the registrations by
   * this store's own lifetime, and one of another instance with a longer wait time-out may wait longer than that (a
   * fleet that rolls a new `wait_timeout_ms` out); a release past it would free a slot nobody is granted. Only the
   * scripts that judge each registration by its own lifetime clear: an acquire that took a slot, an enqueue granted at
   * once, a release that left no live waiter.
   */
  noteLoads(loads: ReadonlyMap<string, ChannelLoad>): void {
    for (const [id, load] of loads) if (load.waiting > 0) this.mark(id, true);
  }

  /**
   * A release by plain ZREM goes out (the channel was not marked queued): counted until it is answered (the callback
   * returned), so that a queue formed meanwhile is made good (formed).
   */
  plainRelease(lease: LeaseRef): (ok: boolean) => void {
    const id = lease.channelId;
    let p = this.plain.get(id);
    if (!p) {
      if (this.plain.size >= PLAIN_LIMIT) {
        for (const [channelId, q] of this.plain) if (q.inFlight === 0) this.plain.delete(channelId);
      }
      p = {
        inFlight: 0,
        kickDue: undefined,
        answeredBelow: -Infinity,
        unboundedAt: -Infinity,
        ttlMs: DEFAULT_LEASE_TTL_MS,
      };
      this.plain.set(id, p);
    }
    const released = p;
    released.inFlight++;
    released.ttlMs = lease.ttlMs ?? DEFAULT_LEASE_TTL_MS;
    let answered = false;
    return (ok) => {
      if (answered) return;
      answered = true;
      released.inFlight--;
      // a release that failed (a lost connection; on Cluster also a time-out) may still run: it counts from now,
      // without a bound, and keeps counting so whatever the next release's answer says
      const below = ok ? this.deps.scoreNow?.() : undefined;
      if (below === undefined) released.unboundedAt = this.deps.clock.now();
      else released.answeredBelow = Math.max(released.answeredBelow, below);
      const kick = released.kickDue;
      if (kick && released.inFlight === 0) {
        released.kickDue = undefined;
        this.deps.kick(kick);
      }
    };
  }

  /**
   * A queue formed on the channel at `formedAt` (Redis ms) while this instance held a slot there (a `Q` message). A
   * plain release of this store that Redis may have run after that freed its slot behind the waiter, and no script
   * granted it: one release through the queue, of a token nobody holds, grants it now. "May have": it is unanswered,
   * or it was answered when the store's upper bound of the Redis clock was past `formedAt` (without a bound, or
   * when it failed: less than UNBOUNDED_RACE_MS before this message came). A release answered before that ran before
   * the queue formed, and the script that formed it found the slot free.
   */
  formed(channelId: string, formedAt: number, instanceId: string): void {
    const p = this.plain.get(channelId);
    if (!p) return;
    const racing =
      p.inFlight > 0 ||
      p.answeredBelow >= formedAt ||
      this.deps.clock.now() - p.unboundedAt < UNBOUNDED_RACE_MS;
    if (!racing) return;
    const kick = { channelId, token: `${instanceId}:kick`, ttlMs: p.ttlMs };
    // one in flight: the kick follows its answer (on one node it would run after it anyway, on the same connection;
    // on Cluster a release redirected is sent again later)
    if (p.inFlight > 0) p.kickDue = kick;
    else this.deps.kick(kick);
  }

  /** A registration of this store on the channel goes out: until it is answered, its releases count the channel queued. */
  registering(channelId: string): () => void {
    this.registrations.set(channelId, (this.registrations.get(channelId) ?? 0) + 1);
    return () => {
      const n = this.registrations.get(channelId)! - 1;
      if (n > 0) this.registrations.set(channelId, n);
      else this.registrations.delete(channelId);
    };
  }
}
