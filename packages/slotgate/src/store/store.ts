/**
 * The slot store: the only place where slot ownership is decided. Two implementations pass one contract suite
 * (test/contract): RedisStore (shared by every instance) and MemoryStore (one process, the embedded default).
 */

/** What a store command was issued for; stats and metrics count commands by purpose (spec §8). */
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
   * Takes back a release that has not been sent yet (a coalescing store holds the releases of one event-loop turn
   * until the turn ends): the slot stays held under the same token and that release resolves true, as if removed.
   * False when the release is already on its way (or the store sends every release at once: then it is absent).
   */
  withdrawRelease?(lease: LeaseRef): boolean;

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

/** Batches of at most `size`, in order. */
export function chunk<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** Channels read or renewed per pipeline / script call (spec §4.3, §3.2). */
export const BATCH_SIZE = 50;
