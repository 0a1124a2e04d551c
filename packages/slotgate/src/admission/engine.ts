/** What the pass and the wait share: the instance's state holders, built once by the facade. */
import type { Candidate } from '../core/channel.js';
import type { Clock } from '../core/clock.js';
import type { CapacityError, CapacityReason } from '../core/errors.js';
import type { Random } from '../core/order.js';
import type { Settings } from '../core/settings.js';
import type { LeaseManager } from './leases/lease-manager.js';
import type { SlotStore } from '../store/store.js';
import type { Prepared } from './pass/candidates.js';
import type { Cooldowns } from './limits/cooldowns.js';
import type { Handoff } from './leases/handoff.js';
import type { LoadView } from './loads/load-view.js';
import type { StatsRecorder } from './stats.js';
import type { Tickets } from './leases/tickets.js';
import type { Inbox } from './waiting/inbox.js';
import type { AcquireRequest } from './types.js';
import { enforcedFloor } from './limits/adaptive.js';

export interface Engine {
  readonly store: SlotStore;
  readonly clock: Clock;
  readonly random: Random;
  readonly leases: LeaseManager;
  readonly view: LoadView;
  readonly inbox: Inbox;
  readonly recorder: StatsRecorder;
  readonly cooldowns: Cooldowns;
  readonly handoff: Handoff;
  readonly tickets: Tickets;
  /** The settings in force (read once per pass: a change applies to the next pass). */
  settings(): Settings;
  /** The max a pass plans a bounded channel with: its adaptive limit when enforced (limits/adaptive.ts). */
  maxOf(c: Candidate): number;
  /** How many times the candidate sets changed: a waiter that saw fewer resolves its set again. */
  configVersion(): number;
  /** The request's candidate set in force now, prepared. */
  resolve<C extends Candidate>(request: AcquireRequest<C>): Prepared<C>;
  capacityError(
    reason: CapacityReason,
    candidates: readonly Candidate[],
    saturated: readonly Candidate[],
    waitedOn?: Candidate,
  ): CapacityError;
}

/** A wait under way, carried over to the next pass of the same acquire. */
export interface WaitSpan {
  start: number;
  deadline: number;
}

/** One pass of an acquire: its request, the config version its set was resolved at, and a wait carried over. */
export interface Attempt<C extends Candidate> {
  request: AcquireRequest<C>;
  configVersion: number;
  span?: WaitSpan;
  /** When the request reached this instance, on the precise clock: its registrations stand as of then. */
  arrivedAt: number;
}

/** A waiter none of whose queues is valid any more: the acquire goes on with a new pass over `next`. */
export interface Moved<C extends Candidate> {
  next: Prepared<C>;
  /** The config version `next` was resolved at. */
  configVersion: number;
  span: WaitSpan;
}

/** One acquire call over `batch`, counted for the stats; `share`: the request's client (ids.ts). */
export async function tryAcquire(
  engine: Engine,
  batch: readonly Candidate[],
  settings: Settings,
  share: string,
) {
  const targets = batch.map((c) => ({
    channelId: c.id,
    max: c.maxConcurrency!,
    floor: enforcedFloor(c, settings),
  }));
  engine.recorder.acquireCalls++;
  const outcome = await engine.leases.acquireFirst(targets, settings.cooldown_enabled, share);
  engine.recorder.acquireAttempts += outcome.replies.length;
  return outcome;
}
