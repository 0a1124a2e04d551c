/**
 * Waiting in the FIFO queues of up to QUEUES_PER_WAITER full channels until the store grants a slot (a release gives
 * it to the oldest live waiter, on any instance). A slow safety poll covers lost messages; on the way out the
 * registrations are always removed, detached from cancellation.
 */
import type { Candidate } from '../../core/channel.js';
import { jitter } from '../../core/jitter.js';
import { preciseNow } from '../../core/clock.js';
import { CapacityError, StoreUnavailableError } from '../../core/errors.js';
import { shareSuffix } from '../../core/ids.js';
import type { Settings } from '../../core/settings.js';
import type { ChannelLoad, EnqueueOptions, EnqueueReply, WaiterRef } from '../../store/store.js';
import type { Engine, Attempt, Moved } from '../engine.js';
import type { Lease } from '../leases/lease-book.js';
import type { Prepared } from '../pass/candidates.js';
import { maxWaitingOf, QUEUES_PER_WAITER } from '../pass/decide.js';
import { enforcedFloor } from '../limits/adaptive.js';
import type { Ticket } from '../types.js';
import type { Mailbox } from './inbox.js';
import { followConfig } from './reconfigure.js';

/** How long a registration outlives the wait deadline, so a live waiter never loses its place to expiry. */
const WAITER_TTL_MARGIN_MS = 2000;
/** The abort reason of a waiter's nap cut short by a grant (a constant: no DOMException per wake-up). */
const WOKEN = Object.freeze({ woken: true });

/** A queue this waiter stands in, under `token`, waiting under `max`. */
export interface Place<C extends Candidate> {
  channel: C;
  token: string;
  max: number;
  /** When its registration was sent: every grant to the token comes after. */
  sentAt?: number;
}

/** A registration to make: the place, and the store call that makes it (an enqueue or a requeue). */
export type Registration<C extends Candidate> = [Place<C>, () => Promise<EnqueueReply>];

export async function waitForSlot<C extends Candidate>(
  engine: Engine,
  queues: readonly C[],
  /** The load view as the pass last saw it: a waiter whose every queue it shows full is turned away. */
  shown: ReadonlyMap<string, ChannelLoad> | undefined,
  prepared: Prepared<C>,
  saturated: readonly C[],
  settings: Settings,
  attempt: Attempt<C>,
): Promise<Ticket<C> | Moved<C>> {
  return new Waiter(engine, prepared, saturated, settings, attempt).run(queues, shown);
}

export class Waiter<C extends Candidate> {
  /** The candidate set in force for this waiter, and the config version it was resolved at. */
  current: Prepared<C>;
  seen: number;
  readonly places: Place<C>[] = [];
  readonly box: Mailbox;
  readonly share: string;
  readonly waitStart: number;
  readonly deadline: number;
  /** Every token this waiter's grants arrive under (a moved registration has its own). */
  private readonly tokens: string[];
  /** The first of its queues that turned this waiter away (full). */
  private turnedAway: C | undefined;
  private claimed: Place<C> | undefined;
  private firstQueue: C | undefined;

  constructor(
    readonly engine: Engine,
    prepared: Prepared<C>,
    private readonly saturated: readonly C[],
    readonly settings: Settings,
    readonly attempt: Attempt<C>,
  ) {
    const { clock, leases, inbox } = engine;
    this.current = prepared;
    this.seen = attempt.configVersion;
    this.share = shareSuffix(attempt.request.client);
    const token = leases.nextToken(this.share);
    this.tokens = [token];
    this.box = inbox.open(token);
    this.waitStart = attempt.span?.start ?? clock.now();
    this.deadline = attempt.span?.deadline ?? this.waitStart + settings.wait_timeout_ms;
  }

  get signal(): AbortSignal | undefined {
    return this.attempt.request.signal;
  }

  fail(reason: 'aborted' | 'wait_timeout' | 'queue_full', on?: C): CapacityError {
    return this.engine.capacityError(reason, this.current.candidates, this.saturated, on);
  }

  refOf(p: Place<C>): WaiterRef {
    const floor = enforcedFloor(p.channel, this.settings);
    return { channelId: p.channel.id, token: p.token, max: p.max, ...(floor !== undefined && { floor }) };
  }

  optionsOf(c: C): EnqueueOptions {
    const { settings, engine } = this;
    return {
      maxWaiting: maxWaitingOf(c, settings),
      ttlMs: settings.wait_timeout_ms + WAITER_TTL_MARGIN_MS,
      leaseTtlMs: settings.lease_ttl_ms,
      arrivedMsAgo: preciseNow(engine.clock) - this.attempt.arrivedAt,
    };
  }

  enqueueing(p: Place<C>): Registration<C> {
    return [p, () => this.engine.store.enqueue(this.refOf(p), this.optionsOf(p.channel))];
  }

  /** A new token whose grants reach this waiter's mailbox. */
  newToken(): string {
    const token = this.engine.leases.nextToken(this.share);
    this.tokens.push(token);
    this.engine.inbox.attach(token, this.box);
    return token;
  }

  async run(
    queues: readonly C[],
    shown: ReadonlyMap<string, ChannelLoad> | undefined,
  ): Promise<Ticket<C> | Moved<C>> {
    const { clock, recorder } = this.engine;
    this.firstQueue = queues[0];
    try {
      if (this.attempt.span && clock.now() >= this.deadline) throw this.fail('wait_timeout', queues[0]);
      const ticket = await this.join(queues, shown);
      return ticket ?? (await this.wait());
    } catch (err) {
      if (err instanceof CapacityError) recorder.waitTime.observe(clock.now() - this.waitStart);
      throw err;
    } finally {
      this.leaveAll();
    }
  }

  /**
   * Joins up to QUEUES_PER_WAITER of the queues in one flight; turned away without asking Redis when the view shows
   * every one full. One left in fewer queues than it could join gives up: a later waiter in more queues would be
   * served ahead of it (docs/admission.md, "Two queues or none").
   */
  private async join(queues: readonly C[], shown: ReadonlyMap<string, ChannelLoad> | undefined) {
    const shownFull = (c: C) => (shown?.get(c.id)?.waiting ?? 0) >= maxWaitingOf(c, this.settings);
    const token = this.tokens[0]!;
    if (queues.every(shownFull)) throw this.fail('queue_full', queues[0]);
    let next = 0;
    while (this.places.length < QUEUES_PER_WAITER && next < queues.length) {
      if (this.signal?.aborted) throw this.fail('aborted', this.places[0]?.channel ?? queues[next]);
      const batch: Registration<C>[] = [];
      while (this.places.length + batch.length < QUEUES_PER_WAITER && next < queues.length) {
        const c = queues[next++]!;
        batch.push(this.enqueueing({ channel: c, token, max: c.maxConcurrency! }));
      }
      const ticket = await this.settle(batch);
      if (ticket) return ticket;
    }
    if (this.places.length === 0) throw this.fail('queue_full', queues[0]);
    const granted = this.places.some((p) => this.box.granted.includes(p.channel.id));
    if (this.turnedAway && !granted && this.places.length < Math.min(QUEUES_PER_WAITER, queues.length)) {
      throw this.fail(this.signal?.aborted ? 'aborted' : 'queue_full', this.turnedAway);
    }
    return undefined;
  }

  /** Sleeps until a grant, a configuration change, a safety poll, the deadline or an abort. */
  private async wait(): Promise<Ticket<C> | Moved<C>> {
    const { clock, random } = this.engine;
    let napping: AbortController | undefined;
    this.box.onGrant = () => napping?.abort(WOKEN);
    const period = this.settings.safety_poll_ms;
    let nextPoll = clock.now() + jitter(period, random);
    for (;;) {
      if (this.signal?.aborted) throw this.fail('aborted', this.places[0]?.channel);
      if (this.engine.configVersion() !== this.seen) {
        const outcome = await followConfig(this);
        if (outcome) return outcome;
        continue;
      }
      const ticket = await this.claimGrants();
      if (ticket) return ticket;
      const now = clock.now();
      if (now >= this.deadline || this.places.length === 0) {
        throw this.fail('wait_timeout', this.places[0]?.channel ?? this.firstQueue);
      }
      if (this.box.recheck || now >= nextPoll) {
        this.box.recheck = false;
        const outcome = await this.safetyPoll();
        if (outcome) return outcome;
        nextPoll = clock.now() + jitter(period, random);
        continue;
      }
      // a change or a grant that came during the awaits above found no nap to cut short: go round again, or it would
      // wait for the next safety poll
      if (this.engine.configVersion() !== this.seen || this.box.granted.length > 0) continue;
      const nap = (napping = new AbortController());
      const onAbort = () => nap.abort(this.signal?.reason);
      this.signal?.addEventListener('abort', onAbort, { once: true });
      try {
        await clock.sleep(Math.min(nextPoll, this.deadline) - now, nap.signal);
      } catch {
        // woken by a grant or by the caller's abort
      } finally {
        this.signal?.removeEventListener('abort', onAbort);
        napping = undefined;
      }
    }
  }

  /** Claims the grants delivered, in arrival order; one gone before its claim just leaves that queue. */
  private async claimGrants(): Promise<Ticket<C> | undefined> {
    while (this.box.granted.length > 0) {
      const p = this.places.find((q) => q.channel.id === this.box.granted[0]);
      this.box.granted.shift();
      if (!p) continue;
      const ticket = await this.claim(p);
      if (ticket) return ticket;
    }
    return undefined;
  }

  /** After the set is resolved again: a grant whose message was lost is claimed, a queue that lost it joined again. */
  private async safetyPoll(): Promise<Ticket<C> | Moved<C> | undefined> {
    const outcome = await followConfig(this);
    if (outcome) return outcome;
    for (const p of [...this.places]) {
      let state;
      try {
        state = await this.engine.store.pollWaiter(this.refOf(p), this.settings.lease_ttl_ms);
      } catch (err) {
        if (err instanceof StoreUnavailableError) continue; // the next poll, or the deadline, decides
        throw err;
      }
      if (state === 'granted') {
        const ticket = await this.claim(p);
        if (ticket) return ticket;
      } else if (state === 'gone') {
        this.drop(p);
        const ticket = await this.settle([this.enqueueing({ ...p })]);
        if (ticket) return ticket;
      }
    }
    return undefined;
  }

  /** Makes one registration; the waiter counts in this instance's loads from before it is sent. */
  private async register([p, call]: Registration<C>): Promise<EnqueueReply> {
    this.enter(p);
    p.sentAt = this.engine.clock.now();
    let reply: EnqueueReply;
    try {
      reply = await call();
    } catch (err) {
      this.exit(p);
      throw err;
    }
    if (reply === 'queue_full') {
      this.turnedAway ??= p.channel;
      this.exit(p);
      this.engine.view.noteQueueFull(p.channel.id, maxWaitingOf(p.channel, this.settings));
    } else this.places.push(p);
    return reply;
  }

  /** Makes the registrations in one flight (the waiter stands at about one place in each); claims the first grant. */
  async settle(batch: readonly Registration<C>[]): Promise<Ticket<C> | undefined> {
    const replies = await Promise.allSettled(batch.map((r) => this.register(r)));
    const failed = replies.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    for (let i = 0; i < batch.length; i++) {
      if ((replies[i] as PromiseFulfilledResult<EnqueueReply>).value !== 'granted') continue;
      const ticket = await this.claim(batch[i]![0]);
      if (ticket) return ticket;
    }
    return undefined;
  }

  /**
   * Takes a grant with no store call when it holds long enough without a claim (a full lease already, or a grant whose
   * duration is known, dated from the registration's send); else by a claim.
   */
  private async claim(p: Place<C>): Promise<Ticket<C> | undefined> {
    const { leases, clock, recorder, tickets } = this.engine;
    const id = p.channel.id;
    const held = this.box.held.get(id);
    this.box.held.delete(id);
    let lease: Lease | undefined;
    if (held?.since !== undefined) lease = leases.adopt(id, p.token, p.max, held.ttlMs, held.since);
    else if (held && p.sentAt !== undefined)
      lease = leases.holdGrant(id, p.token, p.max, held.ttlMs, p.sentAt);
    lease ??= await leases.claim(id, p.token, p.max);
    if (!lease) {
      this.drop(p);
      return undefined;
    }
    this.claimed = p;
    const waited = clock.now() - this.waitStart;
    recorder.waitTime.observe(waited);
    recorder.grants++;
    return tickets.bounded(p.channel, lease, waited, this.signal);
  }

  enter(p: Place<C>): void {
    this.engine.inbox.joined(p.channel.id, p.token);
    this.engine.view.noteWaiter(p.channel.id, 1);
  }

  exit(p: Place<C>): void {
    this.engine.inbox.left(p.channel.id, p.token);
    this.engine.view.noteWaiter(p.channel.id, -1);
  }

  drop(p: Place<C>): void {
    this.places.splice(this.places.indexOf(p), 1);
    this.exit(p);
  }

  /** Out of every queue (a grant there passes on). */
  private leaveAll(): void {
    const { inbox, store } = this.engine;
    for (const t of this.tokens) inbox.close(t);
    for (const p of this.places) {
      this.exit(p);
      if (p === this.claimed) continue;
      void store.leaveQueue(this.refOf(p), this.settings.lease_ttl_ms).catch(() => {});
    }
  }
}
