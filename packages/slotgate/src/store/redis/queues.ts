/**
 * The wait queues in Redis: one FIFO queue per channel (lua/enqueueWaiter-n.lua and its companions), slots granted to
 * the oldest waiter in the same script that frees them, and the instance told on its own pub/sub channel. This module
 * sends the queue commands and delivers the messages; what they say of which channels have a queue goes to the
 * store's QueueMarks (queue-marks.ts), which decides how a slot is given back: through the queue, or by a plain ZREM.
 */
import type { Cluster, Redis } from 'ioredis';
import { preciseNow, type Clock } from '../../core/clock.js';
import { instanceOfToken } from '../../core/ids.js';
import {
  arrivalLeadMs,
  clampArrivalLead,
  type EnqueueOptions,
  type EnqueueReply,
  type LeaseRef,
  type Listening,
  type Purpose,
  type QueueListener,
  type WaiterRef,
  type WaiterState,
} from '../store.js';
import type { Deadlines } from './deadlines.js';
import type { KeyBuilder } from './keys.js';
import { DEFAULT_LEASE_TTL_MS, type QueueMarks } from './queue-marks.js';
import { SCRIPTS, type ReleaseSlotReply } from './scripts.js';
import { ceilOrEmpty } from './redis-time.js';
import { isCluster, subscriberOf } from './connection.js';

export interface RedisQueuesDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  deadlines: Deadlines;
  count: (purpose: Purpose, n: number) => void;
  /** How long a grant waits for its instance to claim it before the slot passes on. */
  claimMs: number;
  /** Times the queue keys' extension hints. */
  clock: Clock;
  /** Now on the Redis clock as last read; undefined before any read. */
  redisNow?: () => number | undefined;
  /** What the store believes of each channel's queue (which release, the race with a queue that forms). */
  marks: QueueMarks;
  /**
   * Now on the Redis clock by the store's upper bound (RedisClock.upperNow), which a release's grants are scored from
   * (lua/releaseSlot-2.lua); undefined where there is none (then, and on Cluster, the script reads TIME).
   */
  scoreNow?: () => number | undefined;
}

/** How long a grant waits for its instance to claim it, when the store's options name no other. */
export const DEFAULT_CLAIM_MS = 5000;

/** Channels whose queue keys' expiry is remembered (cleared past this, like the acquire's extension hints). */
const COVERED_LIMIT = 10_000;

/**
 * How often a store's waiters on one channel do the channel's work: the first to give up in this long sweeps its
 * expired leases (lua/leaveQueue-2.lua), and the first safety poll in this long runs the grant loop, which sweeps too
 * (lua/pollWaiter-2.lua). The others give up with a plain ZREM and poll with two ZSCOREs. Under overload many waiters
 * time out or poll each second, and once a second frees a dead holder's slot (or one granted to an instance that died)
 * as surely as once per waiter.
 */
const SWEEP_EVERY_MS = 1000;

/** Time allowed beyond the claim deadline for a claim's round trip, in the grant's expiry hint. */
const CLAIM_MARGIN_MS = 1000;

/**
 * A grant whose message says it holds for less than this (by the Redis clock as last read, the margin taken off) is
 * claimed before its waiter is admitted: the message may have been held up, or the clock offset be off.
 */
const MIN_HELD_AHEAD_MS = 1000;

/**
 * How long a registration lives past its arrival in the queue (lua/includes/queue.lua): the registration TTL of a
 * waiter with its whole wait ahead (`EnqueueOptions.keyTtlMs`, at least its own TTL).
 */
const liveMsOf = (options: EnqueueOptions) =>
  Math.min(MAX_REGISTRATION_LIVE_MS, Math.max(options.ttlMs, options.keyTtlMs ?? 0));

/**
 * The longest a registration lives (`wait_timeout_ms` at its bound, 60 s, plus the 2 s margin; lua/includes/queue.lua
 * has it as MAX_LIVE_MS): a longer one is cut to it, and members older than it go in one command. A store that has not
 * enqueued yet counts waiters in its load reads by it.
 */
export const MAX_REGISTRATION_LIVE_MS = 62_000;

/** A waiter's member in a queue (lua/includes/queue.lua): its max, its registration lifetime in ms, its token. */
export const queueMember = (w: WaiterRef, liveMs: number) => `${w.max}|${liveMs}|${w.token}`;

/** The registration lifetime a queue member names (NaN for a member of another shape). */
export const memberLifetime = (member: string) => Number(member.split('|')[1]);

/** Members remembered per waiter (cleared past this: a member not remembered is rebuilt with the latest lifetime). */
const MEMBERS_LIMIT = 100_000;

/** Where a waiter's member is remembered: its channel and token. */
const placeOf = (channelId: string, token: string) => `${channelId}\n${token}`;

/** Registrations one enqueueWaiter call carries at most (a single node coalesces those sent together). */
const MAX_ENQUEUES_PER_CALL = 100;
/** The arguments of one registration: the script reads the i-th's at ENQUEUE_ARGS × i. */
const ENQUEUE_ARGS = 8;

type Arg = string | number;

/** A registration waiting for the end of the current job to go out with the others sent in it. */
interface PendingEnqueue {
  keys: string[];
  args: Arg[];
  /** When its request arrived, on the store clock's precise reading: its lead is measured when the call goes out. */
  arrivedAt: number;
  resolve: (reply: EnqueueReply) => void;
  reject: (err: unknown) => void;
}

export class RedisQueues {
  /**
   * The instances listening through this store: a release of one of their leases grants that instance's own waiters
   * a full lease, named in the reply instead of a message.
   */
  private readonly listeners = new Map<string, QueueListener>();
  /**
   * Per channel, until when (this store's clock) its queue key is known to last: an enqueue that checked its expiry
   * left it at least 1.5 registration lifetimes (lua/enqueueWaiter-n.lua). An enqueue whose registration, with a
   * quarter of its lifetime to spare, ends before then skips the check (a PTTL per enqueue otherwise).
   */
  private readonly coveredUntil = new Map<string, number>();
  /**
   * Per channel, when a release's grant last had the slots key's expiry checked (it then had at least the lease TTL
   * noted): within a quarter of it, the key has at least 3/4 of a lease TTL left, which outlasts a new lease until its
   * first renewal (TTL/3) extends it, so the next grants skip the PTTL (the acquire script's hint works alike).
   */
  private readonly slotsCheckedAt = new Map<string, { at: number; ttlMs: number }>();
  /** Per channel, when a waiter of this store that gave up, or a poll that ran the grant loop, swept its leases. */
  private readonly sweptAt = new Map<string, number>();
  /**
   * Per channel, when a safety poll of this store last ran the grant loop. Apart from sweptAt: a give-up sweeps a full
   * channel's expired leases and grants only what that freed, where the loop grants whatever is free.
   */
  private readonly loopedAt = new Map<string, number>();
  /**
   * When each release through the queue went out: the time a check it reports is counted from, and the stamp a queue
   * it leaves empty is cleared by (mark).
   */
  private readonly releaseSent = new WeakMap<LeaseRef, { at: number; stamp: number }>();
  /** The registration lifetime of this store's latest enqueue (wait timeout + margin). */
  private live: number | undefined;
  /**
   * The member each of this store's waiters stands in a queue under, "<max>|<lifetime>|<token>" (lua/includes/
   * queue.lua): its lifetime is the one it registered with, so a leave or a poll names it whatever the settings are
   * now. Forgotten when the registration ends here: a leave, a grant delivered, a poll that finds it granted or gone.
   */
  private readonly members = new Map<string, string>();
  /** Registrations sent in the current job, on a single node: they go out in one call when it ends. */
  private pendingEnqueues: PendingEnqueue[] = [];

  constructor(private readonly deps: RedisQueuesDeps) {}

  /**
   * How long a registration lives past its arrival, as this store last registered one (the longest possible before
   * the first): what a load read counts waiters by (a registration of another lifetime may be counted a little
   * longer or shorter than it lives; the count only orders candidates).
   */
  liveMs(): number {
    return this.live ?? MAX_REGISTRATION_LIVE_MS;
  }

  /** The member `w` stands under: the one it registered with, else one with this store's latest lifetime. */
  private memberOf(w: WaiterRef): string {
    return this.members.get(placeOf(w.channelId, w.token)) ?? queueMember(w, this.liveMs());
  }

  /** The registration of `token` on the channel ended here: its member is forgotten. */
  private forget(channelId: string, token: string): void {
    this.members.delete(placeOf(channelId, token));
  }

  /** The releaseSlot arguments after the token. */
  releaseArgs = (lease: LeaseRef): (string | number)[] => {
    const instance = instanceOfToken(lease.token);
    const ttl = lease.ttlMs ?? DEFAULT_LEASE_TTL_MS;
    const now = this.deps.clock.now();
    this.releaseSent.set(lease, { at: now, stamp: this.deps.marks.stamp() });
    const checked = this.slotsCheckedAt.get(lease.channelId);
    // after a check the key has at least a lease TTL: within this window it still has enough for a grant's claim
    // (up to claimMs later; a claim does not extend the key) and the lease's first renewal (TTL/3 after it)
    const window = Math.min(ttl / 4, (2 * ttl) / 3 - this.deps.claimMs - CLAIM_MARGIN_MS);
    const trusted = checked !== undefined && ttl <= checked.ttlMs && now - checked.at < window;
    // (a grant to a waiter of this instance is a lease whose holder counts it from now: the bound, taken now, never
    // scores it earlier than Redis's clock did when the release was sent)
    return [
      this.deps.claimMs,
      ttl,
      this.deps.keys.grants(),
      lease.channelId,
      this.listeners.has(instance) ? instance : '',
      trusted ? 1 : 0,
      ceilOrEmpty(this.deps.scoreNow?.()),
    ];
  };

  /** Reads a releaseSlot reply: hands this instance's waiters the leases it granted them; true when the slot was held. */
  released = (lease: LeaseRef, reply: ReleaseSlotReply): boolean => {
    const ttl = lease.ttlMs ?? DEFAULT_LEASE_TTL_MS;
    const now = this.deps.clock.now();
    const sent = this.releaseSent.get(lease);
    const at = sent?.at ?? now;
    // no live waiter left, each judged by its own lifetime: the channel's releases go back to plain ZREMs
    if (reply.emptied && sent) this.deps.marks.mark(lease.channelId, false, sent.stamp);
    if (reply.checked) {
      if (this.slotsCheckedAt.size >= COVERED_LIMIT) this.slotsCheckedAt.clear();
      this.slotsCheckedAt.set(lease.channelId, { at, ttlMs: ttl });
    }
    const listener = this.listeners.get(instanceOfToken(lease.token));
    for (const token of reply.local) {
      this.forget(lease.channelId, token);
      // (the release's script scored the grant's lease after the release was sent: its holder's deadline runs from then)
      if (listener) listener.grant(lease.channelId, token, ttl, undefined, Math.max(0, now - at));
      // stopped listening meanwhile: nobody takes it over, so it is given back and passes on
      else this.leave({ channelId: lease.channelId, token, max: 0 }, ttl).catch(() => {});
    }
    return reply.removed;
  };

  private keysOf(channelId: string): string[] {
    const { keys } = this.deps;
    return [keys.slots(channelId), keys.queue(channelId)];
  }

  private argsOf(w: WaiterRef, leaseTtlMs: number): (string | number)[] {
    return [this.memberOf(w), this.deps.claimMs, leaseTtlMs, this.deps.keys.grants(), w.channelId];
  }

  /** Remembers the member `w` registers under, living `live` ms past its arrival. */
  private remember(w: WaiterRef, live: number): void {
    if (this.members.size >= MEMBERS_LIMIT) this.members.clear();
    this.members.set(placeOf(w.channelId, w.token), queueMember(w, live));
  }

  async enqueue(w: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply> {
    const sentAt = this.deps.clock.now();
    const live = liveMsOf(options);
    this.live = live;
    this.remember(w, live);
    const covered = sentAt + 1.25 * live <= (this.coveredUntil.get(w.channelId) ?? -Infinity);
    // how much earlier than the script's clock the waiter stands: as of its request's arrival, measured when the call
    // goes out (registrations of one job leave together, and one made early in the job has waited for the others)
    const arrivedAt = preciseNow(this.deps.clock) - arrivalLeadMs(options);
    const reply = await this.register(w, options, undefined, [covered ? 0 : 1, 0], (keys, args) =>
      this.coalesced(keys, args, arrivedAt),
    );
    // a full queue returns before the check
    if (!covered && reply !== 'queue_full') {
      if (this.coveredUntil.size >= COVERED_LIMIT) this.coveredUntil.clear();
      this.coveredUntil.set(w.channelId, sentAt + 1.5 * live);
    }
    return reply;
  }

  /**
   * `from`'s registration becomes `to`'s, in its place (lua/requeueWaiter-2.lua), with `from`'s lifetime: the same
   * wait, from the same arrival.
   */
  async requeue(from: WaiterRef, to: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply> {
    const fromMember = this.memberOf(from);
    this.remember(to, memberLifetime(fromMember));
    try {
      return await this.register(to, options, fromMember, [], (keys, args) => {
        this.deps.count('wait', 1);
        return SCRIPTS.requeueWaiter.call(this.deps.client, keys, args);
      });
    } finally {
      this.forget(from.channelId, from.token);
    }
  }

  /**
   * Registers `w` (its member remembered) through `send` (the script's arguments start with `from`'s member when it
   * moves `from`'s registration).
   */
  private async register(
    w: WaiterRef,
    options: EnqueueOptions,
    fromMember: string | undefined,
    extra: readonly Arg[],
    send: (keys: string[], args: Arg[]) => Promise<EnqueueReply>,
  ): Promise<EnqueueReply> {
    const { marks } = this.deps;
    const stamp = marks.stamp();
    const answered = marks.registering(w.channelId);
    try {
      const reply = await this.deps.deadlines.run('wait_register', () =>
        send(this.keysOf(w.channelId), [
          ...(fromMember ? [fromMember] : []),
          ...this.argsOf(w, options.leaseTtlMs),
          options.maxWaiting,
          ...extra,
        ]),
      );
      // granted at once or turned away: not in the queue
      if (reply !== 'queued') this.forget(w.channelId, w.token);
      marks.mark(w.channelId, reply !== 'granted', stamp);
      return reply;
    } catch (err) {
      // Uncertain, like an acquire: the script may still run after the time-out, and the caller, told it failed,
      // will never leave the queue. One detached removal, behind it on the same connection, undoes it (and gives
      // back a grant it may have made); the registration's expiry is the backstop. For a requeue, whichever of the
      // two registrations stands.
      this.leave(w, options.leaseTtlMs).catch(() => {});
      if (fromMember) this.leaveMember(w.channelId, fromMember, options.leaseTtlMs).catch(() => {});
      throw err;
    } finally {
      answered();
    }
  }

  /**
   * The registrations sent in one job (a waiter joining two queues, the waiters a reply flight resumed) go out when
   * the job ends, in the order sent, their leads all measured then: one asked for early in the job would otherwise
   * stand later by the time it waited for the others. On a single node they go in one call: each does what a call of
   * its own would (and fails alone), except that they share one reading of the Redis clock, so the script's EVALSHA
   * and its TIME are paid once. On Cluster, one enqueueWaiter call each (its keys share one channel's hash tag).
   */
  private coalesced(keys: string[], args: Arg[], arrivedAt: number): Promise<EnqueueReply> {
    if (args.length !== ENQUEUE_ARGS) throw new RangeError(`enqueueWaiter takes ${ENQUEUE_ARGS} arguments`);
    return new Promise((resolve, reject) => {
      this.pendingEnqueues.push({ keys, args, arrivedAt, resolve, reject });
      if (this.pendingEnqueues.length === 1) queueMicrotask(() => this.sendEnqueues());
    });
  }

  /** A registration's arguments with its lead (ARGV[8], µs) as of now: how long ago its request arrived, capped. */
  private withLead(args: Arg[], arrivedAt: number): Arg[] {
    args[ENQUEUE_ARGS - 1] = Math.round(1000 * clampArrivalLead(preciseNow(this.deps.clock) - arrivedAt));
    return args;
  }

  private sendEnqueues(): void {
    const { client, count } = this.deps;
    const all = this.pendingEnqueues;
    this.pendingEnqueues = [];
    for (const e of all) this.withLead(e.args, e.arrivedAt);
    if (isCluster(client)) {
      for (const e of all) {
        count('wait', 1);
        SCRIPTS.enqueueWaiter.call(client, e.keys, e.args).then(e.resolve, e.reject);
      }
      return;
    }
    for (let i = 0; i < all.length; i += MAX_ENQUEUES_PER_CALL) {
      const batch = all.slice(i, i + MAX_ENQUEUES_PER_CALL);
      count('wait', 1);
      const sent =
        batch.length === 1
          ? SCRIPTS.enqueueWaiter.call(client, batch[0]!.keys, batch[0]!.args).then((reply) => [reply])
          : SCRIPTS.enqueueWaiters.call(
              client,
              batch.flatMap((e) => e.keys),
              batch.flatMap((e) => e.args),
            );
      sent.then(
        (replies) => {
          if (replies.length !== batch.length) {
            const err = new TypeError(
              `enqueueWaiter answered ${replies.length} of ${batch.length} registrations`,
            );
            batch.forEach((e) => e.reject(err));
            return;
          }
          batch.forEach((e, j) => {
            const reply = replies[j]!;
            if (reply instanceof Error) e.reject(reply);
            else e.resolve(reply);
          });
        },
        (err: unknown) => batch.forEach((e) => e.reject(err)),
      );
    }
  }

  async poll(w: WaiterRef, leaseTtlMs: number): Promise<WaiterState> {
    this.deps.count('wait', 1);
    // the grant loop (which grants what is free, sweeping a full channel's expired leases first) once a second per
    // channel from this store: the other polls in that second only look this waiter up. A loop that did not run (the
    // call failed) is not counted: the next poll runs it.
    const loop = this.due(this.loopedAt, w.channelId);
    const args = [...this.argsOf(w, leaseTtlMs), loop ? 1 : 0, ceilOrEmpty(this.deps.scoreNow?.())];
    let state: WaiterState;
    try {
      state = await this.deps.deadlines.run('wait_poll', () =>
        SCRIPTS.pollWaiter.call(this.deps.client, this.keysOf(w.channelId), args),
      );
    } catch (err) {
      if (loop) this.loopedAt.delete(w.channelId);
      throw err;
    }
    // the loop swept: the store's waiters giving up on the channel in the next second need not
    if (loop) this.noteAt(this.sweptAt, w.channelId);
    if (state !== 'queued') this.forget(w.channelId, w.token);
    return state;
  }

  leave(w: WaiterRef, leaseTtlMs: number, sweep = true): Promise<boolean> {
    const member = this.memberOf(w);
    this.forget(w.channelId, w.token);
    // (a give-back of a grant, max 0, names no queued member: straight to the script)
    if (sweep && w.max > 0 && !this.due(this.sweptAt, w.channelId)) sweep = false;
    return this.leaveMember(w.channelId, member, leaseTtlMs, sweep);
  }

  /** Whether the channel's entry in `at` is SWEEP_EVERY_MS old or absent; when so, it is noted as of now. */
  private due(at: Map<string, number>, channelId: string): boolean {
    const last = at.get(channelId);
    if (last !== undefined && this.deps.clock.now() - last < SWEEP_EVERY_MS) return false;
    this.noteAt(at, channelId);
    return true;
  }

  private noteAt(at: Map<string, number>, channelId: string): void {
    if (at.size >= COVERED_LIMIT) at.clear();
    at.set(channelId, this.deps.clock.now());
  }

  /**
   * A waiter granted on another channel, or one giving up when another swept lately (`sweep` false), leaves this queue
   * with a plain ZREM of its member: the common leaves under overload, one command instead of a script call. Only when
   * the member was no longer queued (granted here too, or dropped as run out) does the script follow, to give back a
   * grant it holds here.
   */
  private leaveMember(channelId: string, member: string, leaseTtlMs: number, sweep = true): Promise<boolean> {
    this.deps.count('wait', 1);
    return this.deps.deadlines.run('wait_unregister', async () => {
      if (!sweep) {
        if ((await this.deps.client.zrem(this.deps.keys.queue(channelId), member)) === 1) return false;
        this.deps.count('wait', 1);
      }
      return SCRIPTS.leaveQueue.call(this.deps.client, this.keysOf(channelId), [
        member,
        this.deps.claimMs,
        leaseTtlMs,
        this.deps.keys.grants(),
        channelId,
        sweep ? 1 : 0,
      ]);
    });
  }

  /**
   * Subscribes to the instance's grants channel on a connection of its own. A message lost while it reconnects is
   * made good by the check every waiter makes when it is back (QueueListener.resync).
   */
  listen(instanceId: string, listener: QueueListener): Listening {
    this.listeners.set(instanceId, listener);
    const channel = this.deps.keys.grants(instanceId);
    const subscriber = subscriberOf(this.deps.client);
    subscriber.on('error', () => {}); // reconnects by itself (and resubscribes); see 'ready' below
    // After a lost connection the messages sent meanwhile are gone: once the subscription is back (a SUBSCRIBE
    // answered on the new connection, after ioredis's own resubscription), every waiter checks its queues.
    let lost = false;
    subscriber.on('close', () => {
      lost = true;
    });
    subscriber.on('ready', () => {
      if (!lost) return;
      lost = false;
      subscriber.subscribe(channel).then(
        () => listener.resync(),
        () => listener.resync(),
      );
    });
    subscriber.on('message', (from: string, message: string) => {
      if (from !== channel) return;
      // "G\n<claim deadline>\n<token>\n<channel>", "g\n<token>\n<channel>" (a release before the deadline was sent),
      // "Q\n<formed at, Redis ms>\n<channel>" (a queue formed) or "q\n<channel>" (the same from a build before the
      // time was sent): the channel is the rest, whatever it holds (a newline too)
      const kind = message.slice(0, 2);
      let rest = message.slice(2);
      let heldForMs: number | undefined;
      if (kind === 'G\n') {
        const cut = rest.indexOf('\n');
        const now = this.deps.redisNow?.();
        // A clock read late (its offset measured after the TIME reply waited) puts now too early, and a Cluster node
        // ahead of the one read lets a deadline look far: never more than a claim deadline from now, since the grant
        // was made before now. (A grant of another store's claimMs is taken as this one's.)
        const held = Math.min(Number(rest.slice(0, cut)) - (now ?? NaN), this.deps.claimMs) - CLAIM_MARGIN_MS;
        if (held >= MIN_HELD_AHEAD_MS) heldForMs = held;
        rest = rest.slice(cut + 1);
      }
      if (kind === 'g\n' || kind === 'G\n') {
        const cut = rest.indexOf('\n');
        if (cut > 0) {
          this.forget(rest.slice(cut + 1), rest.slice(0, cut));
          listener.grant(rest.slice(cut + 1), rest.slice(0, cut), undefined, heldForMs);
        }
      } else if (kind === 'Q\n') {
        const cut = rest.indexOf('\n');
        const channelId = rest.slice(cut + 1);
        this.deps.marks.mark(channelId, true);
        this.deps.marks.formed(channelId, Number(rest.slice(0, cut)), instanceId);
        listener.queued(channelId);
      } else if (kind === 'q\n') {
        this.deps.marks.mark(rest, true);
        listener.queued(rest);
      }
    });
    // With Redis down at start, the subscription completes when it answers (the offline queue holds it).
    const ready = subscriber.subscribe(channel).then(
      () => undefined,
      () => undefined,
    );
    return {
      ready,
      stop: async () => {
        if (this.listeners.get(instanceId) === listener) this.listeners.delete(instanceId);
        subscriber.disconnect();
      },
    };
  }
}
