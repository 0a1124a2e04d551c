/**
 * The slot store: the only place where slot ownership is decided. Two implementations pass one contract suite
 * (test/contract): RedisStore (shared by every instance) and MemoryStore (one process, the embedded default).
 */

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

export type AcquireReply = 'acquired' | 'full' | 'cooling';

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

export interface PendingRelease {
  /** Settles when the store has answered: true when the lease was there; rejects on a store failure. */
  readonly done: Promise<boolean>;
  /** Whether the removal waits for the end of this event-loop turn (only then can it be withdrawn). */
  readonly held: boolean;
  /**
   * Takes the removal back while it is held: the slot stays taken under the same token and `done` resolves true, as
   * if removed. False once it is on its way, for a removal that was not held, and for a token already withdrawn in
   * this turn (a slot passes on at most once per turn, so a release-and-acquire loop yields to the event loop).
   */
  withdraw(): boolean;
}

/** A removal that was sent at once: nothing to withdraw. */
export function sentRelease(done: Promise<boolean>): PendingRelease {
  return { done, held: false, withdraw: () => false };
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

export interface ReadLoadsOptions {
  onSent?: () => void;
}

export interface CooldownInfo {
  reason: string;
  /** -1 when the key has no expiry. */
  remainingMs: number;
}

export interface SlotStore {
  readonly kind: 'memory' | 'redis';
  /**
   * How many channels `acquireFirst` may try in one call: > 1 on a single Redis node or in memory, 1 on Redis
   * Cluster (one script call per channel keeps every script within one hash slot).
   */
  readonly maxChannelsPerAcquire: number;

  /**
   * Tries the targets in order in one atomic call and stops at the first that admits the token.
   * Returns one reply per target tried (the last is 'acquired' when one admitted it).
   */
  acquireFirst(targets: readonly AcquireTarget[], opts: AcquireOptions): Promise<AcquireReply[]>;

  /** Removes the lease; true when it was there. Idempotent: a second release is a no-op returning false. */
  release(lease: LeaseRef): Promise<boolean>;

  /**
   * The same removal as `release`, as a handle that can take it back while it has not been sent: a store that sends
   * the commands of one event-loop turn together holds it until the turn ends (`held`).
   */
  releaseDeferred(lease: LeaseRef): PendingRelease;

  /** Extends every lease to now + leaseTtlMs; returns the leases that were missing (lost). Batches of ≤ 50. */
  renew(leases: readonly LeaseRef[], leaseTtlMs: number): Promise<LeaseRef[]>;

  /**
   * Registers a waiter unless the channel already has `maxWaiting` live waiters. The registration expires by itself
   * after `ttlMs`. Returns false when the queue is full.
   */
  registerWaiter(channelId: string, token: string, maxWaiting: number, ttlMs: number): Promise<boolean>;
  unregisterWaiter(channelId: string, token: string): Promise<void>;

  /**
   * Live loads of the channels: one clock read, ≤ 50 channels per batch, read-only. `onSent` is called when the
   * read goes out: it reflects every acquire and release of this store sent before that moment, and none after.
   */
  readLoads(channelIds: readonly string[], opts?: ReadLoadsOptions): Promise<Map<string, ChannelLoad>>;

  setCooldown(channelId: string, ms: number, reason: string): Promise<void>;
  clearCooldown(channelId: string): Promise<void>;
  readCooldown(channelId: string): Promise<CooldownInfo | null>;

  /** Commands issued so far, by purpose (a script call counts as one). */
  readonly commands: Readonly<Record<Purpose, number>>;

  /** Whether the store answers, and how fast (a health check: never throws). */
  health(): Promise<StoreHealth>;

  /**
   * Settings overrides shared by every instance on this store: in Redis a hash and a change announcement, so every
   * instance applies a change within a second; in memory, this process only.
   */
  sharedSettings<T extends object>(options: SharedSettingsOptions<T>): SharedSettings<T>;

  /** The instances that share this store, as they announce themselves (for operators' views). */
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

export interface SharedSettingsOptions<T extends object> {
  /** Validates the overrides read from the store and every update written; throws on bad input. */
  parse: (input: unknown) => T;
  /** Called with the validated overrides on start, on every change and on every periodic re-read that differs. */
  onOverrides: (overrides: T) => void;
  onError?: (err: Error) => void;
  /** Fallback re-read period for a lost change announcement. @default 5000 */
  rereadMs?: number;
}

export interface SharedSettings<T extends object> {
  /**
   * Reads the overrides once, then follows changes. Never waits on the store beyond the first read's own time-out:
   * with the store down at start, the instance runs on its own settings and picks the overrides up later.
   */
  start(): Promise<void>;
  /** Validates an update, merges it into the stored overrides and announces it to every instance. */
  write(update: T): Promise<void>;
  /** Removes every override (back to each instance's configured values) and announces it. */
  reset(): Promise<void>;
  close(): Promise<void>;
}

/** What an instance says of itself; `seen_at` is added by the store when it is announced. */
export type InstanceInfo = Record<string, unknown> & { id: string };

export interface Presence {
  /** Records (or refreshes) this instance; announcements older than `list`'s window drop out of it. */
  announce(info: InstanceInfo): Promise<void>;
  /** The instances announced within the last `maxAgeMs`, ordered by id, each with its `seen_at` (ISO time). */
  list(maxAgeMs: number): Promise<Array<InstanceInfo & { seen_at: string }>>;
  /** Removes the instance at once (graceful shutdown). */
  leave(id: string): Promise<void>;
}

export function emptyCounts(): Record<Purpose, number> {
  return { load_read: 0, acquire: 0, release: 0, renew: 0, wait: 0, cooldown: 0, settings: 0 };
}

/** Channels read per load-read pipeline, renewed per renewal call, and tried per single-node acquire request. */
export const BATCH_SIZE = 50;
