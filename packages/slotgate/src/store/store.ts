/**
 * The slot store: the only place where slot ownership is decided. Two implementations pass one contract suite
 * (test/contract): RedisStore, shared by every instance, and MemoryStore, one process (the embedded default).
 */
import type { Presence, SharedSettings, SharedSettingsOptions } from './fleet.js';

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
  return { load_read: 0, acquire: 0, release: 0, renew: 0, wait: 0, cooldown: 0, settings: 0 };
}

/** Channels read per load-read batch, renewed per renewal call, and tried per single-node acquire request. */
export const BATCH_SIZE = 50;

/**
 * What an acquire found on a channel: a slot (`acquired`), no free slot (`full`), a cooldown (`cooling`), or older
 * requests waiting in its queue (`queued`: a newcomer never takes a slot ahead of them).
 */
export type AcquireReply = 'acquired' | 'full' | 'cooling' | 'queued';

export interface AcquireTarget {
  channelId: string;
  /** The channel's max concurrency, > 0. */
  max: number;
}

export interface AcquireOptions {
  /** The lease token `<instanceId>:<seq>` that becomes the slot's member when a channel admits it. */
  token: string;
  leaseTtlMs: number;
  /** false when cooldowns are disabled: the script skips the cooldown check. */
  checkCooldown: boolean;
}

export interface LeaseRef {
  channelId: string;
  token: string;
}

/** A lease to take back: its channel's max decides whether a free slot is left for it. */
export interface ReclaimRef extends LeaseRef {
  max: number;
}

/** `first`: the store's very first check (nothing was held before it); otherwise a restart was detected. */
export type RestartListener = (info: { first: boolean }) => Promise<void>;

/** A waiter in a channel's queue: its token (the lease's, once granted) and the max it waits under. */
export interface WaiterRef {
  channelId: string;
  token: string;
  max: number;
}

export interface EnqueueOptions {
  /** The queue's bound: a full queue turns the waiter away. */
  maxWaiting: number;
  /** How long the registration lives past its arrival unless removed: the whole wait plus a margin, at most 62 s. */
  ttlMs: number;
  /** The lease TTL in force (a slot granted keeps its key alive at least this long). */
  leaseTtlMs: number;
  /**
   * How long before this registration its request reached the instance, ms: it stands in the queue as of then, at
   * most MAX_ARRIVAL_LEAD_MS earlier, so two requests that reach two instances a few milliseconds apart stand in the
   * order they arrived. @default 0
   */
  arrivedMsAgo?: number;
}

/** How much earlier than its registration a waiter may stand in its queue (EnqueueOptions.arrivedMsAgo). */
export const MAX_ARRIVAL_LEAD_MS = 50;

/** `msAgo` within [0, MAX_ARRIVAL_LEAD_MS] (0 if not finite). */
export const clampArrivalLead = (msAgo: number): number =>
  Number.isFinite(msAgo) ? Math.min(MAX_ARRIVAL_LEAD_MS, Math.max(0, msAgo)) : 0;

/** `granted`: the waiter holds a slot at once (claim it); `queued`: it waits for a grant; `queue_full`: turned away. */
export type EnqueueReply = 'granted' | 'queued' | 'queue_full';

/** Where a waiter stands: holding a grant (claim it), still queued, or lost by the queue (enqueue again). */
export type WaiterState = 'granted' | 'queued' | 'gone';

/**
 * A slot granted to a waiter. `claim`: it holds the slot only until a short claim deadline; the waiter claims it (a
 * renewal) or gives it back. `lease`: a full lease already (this instance's own release granted it), whose TTL began
 * no earlier than `since` (the waiters' clock): taken over with no store call.
 */
export type Grant =
  | { kind: 'claim'; channelId: string; token: string }
  | { kind: 'lease'; channelId: string; token: string; ttlMs: number; since: number };

export interface Listening {
  /** Settles once messages are delivered (with Redis down at start: once it answers). */
  readonly ready: Promise<void>;
  stop(): Promise<void>;
}

/** What a store tells an instance about its waiters. */
export interface QueueListener {
  grant(grant: Grant): void;
  /** A queue formed on a channel where this instance holds a slot: give slots back through the queue from now on. */
  queued(channelId: string): void;
  /** The subscription came back after a loss: messages sent meanwhile are gone, so every waiter checks its queues. */
  resync(): void;
}

export interface PendingRelease {
  /** Settles when the store has answered: true when the lease was there; rejects on a store failure. */
  readonly done: Promise<boolean>;
  /** Whether the removal waits for the end of this event-loop turn (only then can it be withdrawn). */
  readonly withdrawable: boolean;
  /**
   * Takes the removal back before it is sent: the slot stays taken under the same token and `done` resolves true.
   * False once sent, and for a token already withdrawn in this turn (so a release-and-acquire loop yields).
   */
  withdraw(): boolean;
}

export interface ChannelLoad {
  /** Live leases (expiry in the future). */
  active: number;
  /** Live waiter registrations. */
  waiting: number;
  coolingDown: boolean;
  /** Remaining cooldown in ms, 0 when not cooling; -1 when the cooldown has no expiry. */
  cooldownRemainingMs: number;
}

/** One instance's own counts on one channel: its leases and its waiters. */
export interface OwnCounts {
  active: number;
  waiting: number;
}

/**
 * One exchange with the load summary (`SlotStore.exchangeLoads`): what this instance holds and waits on, per channel,
 * goes in; the fleet's counts of the channels it asks for come back.
 */
export interface LoadExchange {
  /** Whose counts these are: the summary keeps them apart per instance, and drops them once they lapse. */
  instanceId: string;
  /** `changes`: the counts given replace this instance's earlier counts of those channels; `leave`: all go. */
  mode: 'changes' | 'leave';
  /** This instance's own counts (absolute), of the channels it reports. */
  counts: ReadonlyMap<string, OwnCounts>;
  /** The counts stay this long from now unless renewed; undefined leaves their lapse time as it is. */
  keepMs?: number;
  /** Channels whose fleet-wide loads to return. */
  read: readonly string[];
  /**
   * How old the other instances' counts may be: readers share a snapshot of the summary, built again when it is
   * older than this. This instance's own counts are always as it just reported them. 0 reads it as it is now.
   */
  maxAgeMs?: number;
}

export interface SlotStore {
  readonly kind: 'memory' | 'redis';
  /** How many channels `acquireFirst` may try in one call: 1 on Redis Cluster (one hash slot per script call). */
  readonly maxChannelsPerAcquire: number;

  /** Tries the targets in order in one atomic call; one reply per target tried, the last 'acquired' on success. */
  acquireFirst(targets: readonly AcquireTarget[], opts: AcquireOptions): Promise<AcquireReply[]>;
  /**
   * Gives the slot back: to the channel's oldest waiter when one waits, else it is free. Idempotent. A store that
   * sends one event-loop turn's commands together can withdraw it until the turn ends (slot handoff).
   */
  release(lease: LeaseRef, leaseTtlMs: number): PendingRelease;
  /** Extends every lease to now + leaseTtlMs; returns the leases that were missing (lost). Batches of ≤ 50. */
  renew(leases: readonly LeaseRef[], leaseTtlMs: number): Promise<LeaseRef[]>;
  /**
   * Takes back leases the store no longer has; returns those not held. `restore`: every one whatever the load (the
   * store lost its data while they ran); otherwise a missing one only into a free slot of its `max`.
   */
  reclaim(leases: readonly ReclaimRef[], leaseTtlMs: number, restore: boolean): Promise<LeaseRef[]>;
  /**
   * Calls the listener when the store finds it lost its data (a Redis that restarted empty), before it admits
   * anything again: the listener re-registers what it holds. Returns the unsubscribe.
   */
  onRestart(listener: RestartListener): () => void;
  /** Calls the listener whenever the connection is established again after a loss. Returns the unsubscribe. */
  onReconnect(listener: () => void): () => void;

  /**
   * Puts a waiter at the tail of the channel's FIFO queue. A slot that comes free goes to the oldest live waiter,
   * whose instance is told through `listen`; a free slot with nobody ahead is granted at once (`granted`).
   */
  enqueue(waiter: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply>;
  /** A waiter's slow safety check for a lost message or a lost queue; grants what is free first. */
  pollWaiter(waiter: WaiterRef, leaseTtlMs: number): Promise<WaiterState>;
  /**
   * Takes the waiter out of the queue; a grant it holds there passes on. True when it had one. `givingUp` (default
   * true): a waiter that times out or aborts also frees slots whose leases ran out.
   */
  leaveQueue(waiter: WaiterRef, leaseTtlMs: number, givingUp?: boolean): Promise<boolean>;
  /**
   * Moves a waiter's registration to a new token and max, keeping its place (a grant it holds is given back and it
   * stands at the head again); a waiter the queue lost joins at the tail. Free slots are then granted.
   */
  requeue(from: WaiterRef, to: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply>;
  /** Delivers grants and queue news for this instance's waiters until stopped. */
  listen(instanceId: string, listener: QueueListener): Listening;
  /** Whether the store believes the channel has waiters: a slot is then given back through the queue, never handed off. */
  queued(channelId: string): boolean;

  /** Live loads of the channels straight from their keys: one clock read, ≤ 50 channels per call, read-only. */
  readLoads(channelIds: readonly string[]): Promise<Map<string, ChannelLoad>>;
  /** The load summary: this instance's counts in, the fleet's counts out, one command whatever the channel count. */
  exchangeLoads(exchange: LoadExchange): Promise<Map<string, ChannelLoad>>;
  /** Who holds the channels' live slots: per channel, instance id → slots held. For operators' views. */
  readHolders(channelIds: readonly string[]): Promise<Map<string, Map<string, number>>>;

  setCooldown(channelId: string, ms: number, reason: string): Promise<void>;
  clearCooldown(channelId: string): Promise<void>;

  /** Commands issued so far, by purpose (a script call counts as one). */
  readonly commands: Readonly<Record<Purpose, number>>;
  /** Whether the store answers, and how fast (never throws). */
  health(): Promise<StoreHealth>;
  /** Settings overrides shared by every instance on this store (in memory: this process only). */
  sharedSettings<T extends object>(options: SharedSettingsOptions<T>): SharedSettings<T>;
  /** The instances that share this store, as they announce themselves. */
  readonly presence: Presence;
  close(): Promise<void>;
}

export interface StoreHealth {
  healthy: boolean;
  /** Round-trip time of the check, when it answered. */
  latencyMs?: number;
  /** Why it is not healthy. */
  error?: string;
}
