/** The slot store, the only place slot ownership is decided: RedisStore (shared) and MemoryStore (one process). */
import type { LimitLaw, UpstreamSignal } from '../core/adaptive.js';
import type { Presence, SharedSettings, SharedSettingsOptions } from './fleet.js';
import type { ChannelPeak } from './peak.js';

/** What a store command was issued for; stats and metrics count commands by purpose. */
export type Purpose = 'load_read' | 'acquire' | 'release' | 'renew' | 'wait' | 'cooldown' | 'settings';
export const PURPOSES: readonly Purpose[] = [
  'load_read',
  'acquire',
  'release',
  'renew',
  'wait',
  'cooldown',
  'settings',
];

export function emptyCounts(): Record<Purpose, number> {
  return Object.fromEntries(PURPOSES.map((p) => [p, 0])) as Record<Purpose, number>;
}

/** Channels read per load-read batch, renewed per renewal call, and tried per single-node acquire request. */
export const BATCH_SIZE = 50;

/** `queued`: older requests wait on the channel, and a newcomer never takes a slot ahead of them. */
export type AcquireReply = 'acquired' | 'full' | 'cooling' | 'queued';

export interface AcquireTarget {
  channelId: string;
  /** The channel's max concurrency, > 0. */
  max: number;
  /** Given when the channel's adaptive limit is enforced: it admits up to that limit, never below this floor. */
  floor?: number;
}

export interface AcquireOptions {
  /** The lease token `<instanceId>:<seq>`. */
  token: string;
  leaseTtlMs: number;
  /** false when cooldowns are disabled. */
  checkCooldown: boolean;
}

export interface LeaseRef {
  channelId: string;
  token: string;
}

/** A lease to take back under its channel's max. */
export interface ReclaimRef extends LeaseRef {
  max: number;
}

/** `first`: the store's first check; otherwise a restart was detected. */
export type RestartListener = (info: { first: boolean }) => Promise<void>;

/** A waiter: its token (the lease's, once granted) and the max it waits under. */
export interface WaiterRef {
  channelId: string;
  token: string;
  max: number;
  /** As AcquireTarget's: the grants its calls make are made under the channel's adaptive limit (or UNKNOWN_FLOOR). */
  floor?: number;
}

/**
 * The floor of a call that cannot know the channel's adaptive limit (a grant passed on for a waiter that is gone, the
 * clean-up of an uncertain acquire, a retried release): the stored limit, if any, caps what the call grants.
 */
export const UNKNOWN_FLOOR = -1;

/** A release of an adaptive channel's slot (core/adaptive.ts). */
export interface LimitRelease {
  /** As AcquireTarget's, for the grant of the freed slot; UNKNOWN_FLOOR when the caller cannot tell. */
  floor?: number;
  /** What the upstream said of the request the slot served; none: nothing to report. */
  report?: { signal: UpstreamSignal; law: LimitLaw; heldMs: number };
}

export interface EnqueueOptions {
  /** A full queue turns the waiter away. */
  maxWaiting: number;
  /** How long the registration lives past its arrival unless removed (at most 62 s). */
  ttlMs: number;
  leaseTtlMs: number;
  /**
   * How long before this registration its request reached the instance: it stands in the queue as of then (at most
   * MAX_ARRIVAL_LEAD_MS earlier), so requests reaching two instances ms apart keep their order. @default 0
   */
  arrivedMsAgo?: number;
}

export const MAX_ARRIVAL_LEAD_MS = 50;

export const clampArrivalLead = (msAgo: number): number =>
  Number.isFinite(msAgo) ? Math.min(MAX_ARRIVAL_LEAD_MS, Math.max(0, msAgo)) : 0;

/** `granted`: the waiter holds a slot at once (claim it). */
export type EnqueueReply = 'granted' | 'queued' | 'queue_full';

/** `gone`: the queue lost the waiter (enqueue again). */
export type WaiterState = 'granted' | 'queued' | 'gone';

/**
 * A slot granted to a waiter. `claim`: held only until the claim deadline, `heldMs` from the grant when the message
 * says (the grant came after the waiter's registration was sent); the waiter renews it or gives it back.
 * `lease`: a full lease (this instance's own release granted it) whose TTL began no earlier than `since`.
 */
export type Grant =
  | { kind: 'claim'; channelId: string; token: string; heldMs?: number | undefined }
  | { kind: 'lease'; channelId: string; token: string; ttlMs: number; since: number };

export interface Listening {
  /** Settles once messages are delivered. */
  readonly ready: Promise<void>;
  stop(): Promise<void>;
}

export interface QueueListener {
  grant(grant: Grant): void;
  /** A queue formed on a channel where this instance holds a slot: give slots back through the queue from now on. */
  queued(channelId: string): void;
  /** Messages may have been lost: every waiter checks its queues. */
  resync(): void;
}

export interface PendingRelease {
  /** true when the lease was there; rejects on a store failure. */
  readonly done: Promise<boolean>;
  /** Whether the removal waits for the end of this event-loop turn (only then can it be withdrawn). */
  readonly withdrawable: boolean;
  /**
   * Takes the removal back before it is sent: the slot stays taken and `done` resolves true. False once sent, and
   * for a token already withdrawn this turn (so a release-and-acquire loop yields).
   */
  withdraw(): boolean;
}

export interface ChannelLoad {
  /** Live leases. */
  active: number;
  /** Live waiter registrations. */
  waiting: number;
  coolingDown: boolean;
  /** Remaining cooldown in ms, 0 when not cooling; -1 when the cooldown has no expiry. */
  cooldownRemainingMs: number;
}

export interface OwnCounts {
  active: number;
  waiting: number;
}

/** One exchange with the load summary: this instance's counts go in, the fleet's counts of `read` come back. */
export interface LoadExchange {
  instanceId: string;
  /** `changes`: the counts given replace this instance's earlier counts of those channels; `leave`: all go. */
  mode: 'changes' | 'leave';
  /** This instance's own (absolute) counts of the channels it reports. */
  counts: ReadonlyMap<string, OwnCounts>;
  /** The counts lapse this long from now unless renewed; undefined keeps their lapse time. */
  keepMs?: number;
  read: readonly string[];
  /** How old the other instances' counts may be (this instance's own are always current); 0: as they are now. */
  maxAgeMs?: number;
}

export interface SlotStore {
  readonly kind: 'memory' | 'redis';
  /** How many channels `acquireFirst` may try in one call: 1 on Redis Cluster (one hash slot per script call). */
  readonly maxChannelsPerAcquire: number;

  /** Tries the targets in order in one atomic call; one reply per target tried, the last 'acquired' on success. */
  acquireFirst(targets: readonly AcquireTarget[], opts: AcquireOptions): Promise<AcquireReply[]>;
  /**
   * Gives the slot back, to the oldest waiter when one waits, and reports to the channel's adaptive limit. Idempotent;
   * may be withdrawn until sent (handoff).
   */
  release(lease: LeaseRef, leaseTtlMs: number, limit?: LimitRelease): PendingRelease;
  /** Extends every lease to now + leaseTtlMs; returns the leases that were missing (lost). Batches of ≤ 50. */
  renew(leases: readonly LeaseRef[], leaseTtlMs: number): Promise<LeaseRef[]>;
  /**
   * Takes back leases the store no longer has; returns those not held. `restore` (the store lost its data): every
   * one whatever the load; otherwise a missing one only into a free slot of its `max`.
   */
  reclaim(leases: readonly ReclaimRef[], leaseTtlMs: number, restore: boolean): Promise<LeaseRef[]>;
  /** When the store lost its data, before it admits again: the listener re-registers what it holds. */
  onRestart(listener: RestartListener): () => void;
  /** After every reconnect. Returns the unsubscribe. */
  onReconnect(listener: () => void): () => void;

  /** Puts a waiter in the channel's FIFO queue; freed slots go to the oldest live waiter, told through `listen`. */
  enqueue(waiter: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply>;
  /** A waiter's safety check for a lost message or queue; grants what is free first. */
  pollWaiter(waiter: WaiterRef, leaseTtlMs: number): Promise<WaiterState>;
  /** Takes the waiter out; a grant it holds passes on (true then). */
  leaveQueue(waiter: WaiterRef, leaseTtlMs: number): Promise<boolean>;
  /** Moves a registration to a new token and max in its place (a grant held is given back: head); lost: the tail. */
  requeue(from: WaiterRef, to: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply>;
  /** Delivers grants and queue news for this instance's waiters until stopped. */
  listen(instanceId: string, listener: QueueListener): Listening;
  /** Whether the store believes the channel has waiters: a slot is then released, never handed off. */
  queued(channelId: string): boolean;

  /** Live loads straight from the channels' keys, read-only. */
  readLoads(channelIds: readonly string[]): Promise<Map<string, ChannelLoad>>;
  /** The load summary: one command whatever the channel count. */
  exchangeLoads(exchange: LoadExchange): Promise<Map<string, ChannelLoad>>;
  /** Per channel, its high-water mark over the last one to two minutes (store/peak.ts), read-only. */
  readPeaks(channelIds: readonly string[]): Promise<Map<string, ChannelPeak>>;
  /** Per channel, instance id → live slots held. */
  readHolders(channelIds: readonly string[]): Promise<Map<string, Map<string, number>>>;
  /** Per channel, its stored adaptive limit (as learned, before its floor and max apply); none: absent. */
  readLimits(channelIds: readonly string[]): Promise<Map<string, number>>;
  /** The channel's adaptive limit as this store last learned it (a release's report), whole; undefined when none. */
  limitOf(channelId: string): number | undefined;

  setCooldown(channelId: string, ms: number, reason: string): Promise<void>;
  clearCooldown(channelId: string): Promise<void>;

  /** Commands issued so far (a script call counts as one). */
  readonly commands: Readonly<Record<Purpose, number>>;
  /** Never throws. */
  health(): Promise<StoreHealth>;
  /** Settings overrides shared by every instance on this store. */
  sharedSettings<T extends object>(options: SharedSettingsOptions<T>): SharedSettings<T>;
  readonly presence: Presence;
  close(): Promise<void>;
}

export interface StoreHealth {
  healthy: boolean;
  latencyMs?: number;
  error?: string;
}
