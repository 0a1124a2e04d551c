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
  /**
   * Called when the store builds the call that will run this acquire (after any wait of its own: a reconnect's
   * check, a turn's batching): a lease it gives is scored no earlier than then.
   */
  onSent?: () => void;
}

export interface LeaseRef {
  channelId: string;
  token: string;
  /** The lease TTL it was taken with: a slot it passes to a waiter keeps its key alive at least this long. */
  ttlMs?: number;
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
  /**
   * How long the registration lives without being removed (the wait deadline plus a margin). A Redis store keeps it
   * max(`ttlMs`, `keyTtlMs`) past its arrival in the queue, at most 62 s (MAX_REGISTRATION_LIVE_MS: `wait_timeout_ms`
   * at its 60 s bound plus the margin).
   */
  ttlMs: number;
  /**
   * The registration TTL of a waiter with its whole wait ahead (`wait_timeout_ms` plus the margin). Defaults to
   * `ttlMs`. A Redis store keeps the registration this long past its arrival in the queue (its queue holds arrivals,
   * and each member names its own lifetime), and its queue key at least 1.5 times this.
   */
  keyTtlMs?: number;
  /** The lease TTL in force (a slot granted keeps its key alive at least this long). */
  leaseTtlMs: number;
  /**
   * How long before this registration its request reached the instance, ms. The queue orders it as of then, at most
   * MAX_ARRIVAL_LEAD_MS earlier than the registration: two requests that reach two instances a few milliseconds apart
   * then stand in the order they arrived, whichever registration reaches the queue first. @default 0
   */
  arrivedMsAgo?: number;
}

/** How much earlier than its registration a waiter may stand in its queue (EnqueueOptions.arrivedMsAgo). */
export const MAX_ARRIVAL_LEAD_MS = 50;

/** How much earlier than now a registration stands in its queue, ms: `msAgo` within [0, the cap] (0 if not finite). */
export const clampArrivalLead = (msAgo: number): number =>
  Number.isFinite(msAgo) ? Math.min(MAX_ARRIVAL_LEAD_MS, Math.max(0, msAgo)) : 0;

/** How much earlier than now a registration stands in its queue, ms: its `arrivedMsAgo` within [0, the cap]. */
export const arrivalLeadMs = (options: EnqueueOptions): number => clampArrivalLead(options.arrivedMsAgo ?? 0);

/** `granted`: the waiter holds a slot at once (claim it); `queued`: it waits for a grant; `queue_full`: turned away. */
export type EnqueueReply = 'granted' | 'queued' | 'queue_full';

/** Where a waiter stands: holding a grant (claim it), still queued, or lost by the queue (enqueue again). */
export type WaiterState = 'granted' | 'queued' | 'gone';

export interface Listening {
  /** Settles once messages are delivered (with Redis down at start: once it answers). */
  readonly ready: Promise<void>;
  stop(): Promise<void>;
}

/** What a store tells an instance about its waiters. */
export interface QueueListener {
  /**
   * A slot of the channel was granted to the waiter with this token: claim it (renew it) or release it. With
   * `leaseTtlMs`, the grant is already a full lease of that TTL (a waiter of the instance whose release granted it):
   * take it over with no claim, or release it. With `heldForMs`, the grant is known to hold the slot at least that
   * long from now without a claim (its claim deadline, by the store's clock, a margin taken off): the waiter may hold
   * it at once and claim it after. With `leaseTtlMs`, `leaseAgeMs` says how long ago at most that lease's TTL began
   * (when the release that granted it was sent): its holder's deadline runs from then, never past its expiry.
   */
  grant(channelId: string, token: string, leaseTtlMs?: number, heldForMs?: number, leaseAgeMs?: number): void;
  /** A queue formed on a channel where this instance holds a slot: pass slots on through the queue from now on. */
  queued(channelId: string): void;
  /**
   * The subscription came back after its connection was lost (a restart of Redis, a network cut): messages sent
   * meanwhile are gone, so every waiter should check its queues now.
   */
  resync(): void;
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
  /** Whose counts these are: the summary keeps them apart per instance, and takes them out when it stops exchanging. */
  instanceId: string;
  /**
   * `changes`: the counts given replace this instance's earlier counts of those channels. `full`: they replace
   * everything it reported before (a channel not given counts 0). `leave`: everything it reported is taken out.
   */
  mode: 'changes' | 'full' | 'leave';
  /** This instance's own counts (absolute, not changes), of the channels it reports. */
  counts: ReadonlyMap<string, OwnCounts>;
  /**
   * The contributions stay for this long from now unless renewed. Undefined: the time they lapse is left as it
   * is (and, on a store that keeps them apart per write, the reply cannot tell whether it still knows this instance).
   */
  keepMs?: number;
  /**
   * Takes out at most this many instances whose contributions lapsed (they stopped exchanging), on a store that
   * needs it; RedisStore leaves lapsed instances out of every snapshot it builds and ignores this. @default 0
   */
  sweep?: number;
  /** Channels whose fleet-wide loads to return. */
  read: readonly string[];
  /**
   * How old the other instances' counts may be: the readers of one summary share a snapshot of it, built again when
   * it is older than this; this instance's own counts in the reply are always as it just reported them. 0 reads the
   * summary as it is now. @default 0
   */
  maxAgeMs?: number;
  /** A fresh read: counts and cooldowns read now, not as of up to `maxAgeMs` or a second ago. */
  fresh?: boolean;
  /** Called when the exchange goes out. */
  onSent?: () => void;
}

export interface LoadExchangeReply {
  /** The fleet's counts of the channels read, this instance's included as it just reported them. */
  loads: Map<string, ChannelLoad>;
  /**
   * The summary did not know this instance when `keepMs` was given (it lost its data, or took this instance's counts
   * out as lapsed): nothing was put in, and only a `full` report makes its counts whole again. Always false on
   * RedisStore, whose every write carries the instance's whole counts.
   */
  resync: boolean;
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
   * Takes back leases the store no longer has, to now + leaseTtlMs; returns the leases not held (lost for good).
   * `restore`: re-registers every one whatever the load (the store lost its data while they ran: a restart).
   * Otherwise a lease still there is renewed, and a missing one is taken back only into a free slot of its `max`.
   */
  reclaim(leases: readonly ReclaimRef[], leaseTtlMs: number, restore: boolean): Promise<LeaseRef[]>;

  /**
   * Calls the listener when the store finds it lost its data (a Redis that restarted empty) before it admits anything
   * again: the listener re-registers what it holds (`reclaim` with `restore`). Returns the unsubscribe.
   */
  onRestart(listener: RestartListener): () => void;

  /** Calls the listener whenever the store's connection is established again after a loss. Returns the unsubscribe. */
  onReconnect(listener: () => void): () => void;

  /**
   * Puts a waiter at the tail of the channel's FIFO queue (bounded by `maxWaiting`; the registration expires by
   * itself after `ttlMs`). A slot that comes free goes to the oldest live waiter: it becomes that waiter's lease until
   * a short claim deadline, and the waiter's instance is told through `listen`. When a slot is free and nobody is
   * ahead, the waiter gets it at once (`granted`, no message).
   */
  enqueue(waiter: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply>;
  /**
   * Claims a slot granted to the waiter: it becomes a lease until `leaseTtlMs` from now, renewed like any other.
   * False when the grant is gone (its claim deadline passed first).
   */
  claim(lease: LeaseRef, leaseTtlMs: number): Promise<boolean>;
  /**
   * A waiter's slow safety check for a lost message or a lost queue. It also grants what is free, at least once a
   * second per channel from a store (RedisStore skips that in its other polls of the second).
   */
  pollWaiter(waiter: WaiterRef, leaseTtlMs: number): Promise<WaiterState>;
  /**
   * Takes the waiter out of the queue; a grant it holds there and will not claim passes on. True when it had one.
   * `sweep` (default true): a waiter that gives up (time-out, abort) also makes the store free slots whose leases ran
   * out, so a waiter that never polled still frees what a dead holder left; one that leaves because it was granted
   * elsewhere passes false (its leave only has to take it out).
   */
  leaveQueue(waiter: WaiterRef, leaseTtlMs: number, sweep?: boolean): Promise<boolean>;
  /**
   * Moves a waiter's registration to a new token and max (its channel's max changed while it waited), keeping its
   * place: where `from` is queued, `to` takes its arrival; where `from` holds a grant it has not claimed, the grant is
   * given back and `to` stands at the head (where `from` stood when granted); where `from` is neither, `to` joins at
   * the tail like `enqueue` (bounded by `maxWaiting`). Free slots are then granted under each head's own max, `to`
   * included (`granted`, with no message). Grants made to `from` are never claimable again.
   */
  requeue(from: WaiterRef, to: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply>;
  /** Delivers grants and queue news for this instance's waiters until stopped. */
  listen(instanceId: string, listener: QueueListener): Listening;
  /**
   * Whether this store has seen a queue on the channel lately (in its acquire replies, its own waiters or the
   * messages it got) and not seen it gone since: a slot is then given back through the queue, never passed on locally.
   */
  queued(channelId: string): boolean;

  /**
   * Live loads of the channels: one clock read, ≤ 50 channels per batch, read-only. `onSent` is called when the
   * read goes out: it reflects every acquire and release of this store sent before that moment, and none after.
   */
  readLoads(channelIds: readonly string[], opts?: ReadLoadsOptions): Promise<Map<string, ChannelLoad>>;

  /**
   * The load summary, where the store has one (Redis): every instance reports its own counts, and one command reads
   * the fleet's counts of many channels, so a load read costs the same whatever the channel count. Counts lag by
   * the reporting delay; cooldowns are as `setCooldown` and `clearCooldown` left them. Only ever orders candidates.
   * A store without it (memory: `readLoads` costs nothing there) has the load view read `readLoads`.
   */
  exchangeLoads?(exchange: LoadExchange): Promise<LoadExchangeReply>;

  /**
   * Who holds the channels' live slots: per channel, instance id (a lease token's part before its last `:`) → slots
   * held, grants not yet claimed included; an empty map for a channel nobody holds. One read-only command per
   * channel on that channel's own key (Cluster-legal), counted under `load_read`. For operators' views (the
   * gateway's fleet view), never on the admission path.
   */
  readHolders(channelIds: readonly string[]): Promise<Map<string, Map<string, number>>>;

  setCooldown(channelId: string, ms: number, reason: string): Promise<void>;
  clearCooldown(channelId: string): Promise<void>;
  readCooldown(channelId: string): Promise<CooldownInfo | null>;

  /** Commands issued so far, by purpose (a script call counts as one). */
  readonly commands: Readonly<Record<Purpose, number>>;

  /** Whether the store answers, and how fast (a health check: never throws). */
  health(): Promise<StoreHealth>;

  /**
   * Settings overrides shared by every instance on this store: in Redis a hash, a record of its last change and a
   * change announcement, so every instance applies a change within a second and puts the overrides back when Redis
   * comes back without them; in memory, this process only.
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
  /**
   * Called on the instance that put the overrides back after the store lost them (a Redis that restarted empty):
   * what it restored and the record it restored them with.
   */
  onRestore?: (overrides: T, origin: OverridesOrigin) => void;
  /** Fallback re-read period for a lost change announcement; it also bounds how long a store loss goes unseen. @default 5000 */
  rereadMs?: number;
  /** Who writes, recorded with every change and restore (`changedBy`, `restoredBy`). @default a random id */
  instanceId?: string;
}

/** What a store records of the overrides' last change, as an instance last read it. */
export interface OverridesOrigin {
  /** Counts the recorded changes; a higher version always wins over a lower one. 0: no record (nothing written yet). */
  version: number;
  /**
   * `update` (`write`), `reset`, or `external`: the overrides were changed outside `sharedSettings` (by hand, or by
   * an older release) and `changedAt` is when an instance first saw it. null with no record.
   */
  change: 'update' | 'reset' | 'external' | null;
  /** When the change was made (ISO time, on the store's clock); null when unknown. */
  changedAt: string | null;
  /** The `instanceId` that made it; null when unknown (external). */
  changedBy: string | null;
  /** When an instance put these overrides back after the store had lost them; null when they were never lost. */
  restoredAt: string | null;
  restoredBy: string | null;
}

/** The origin of overrides nobody has recorded a change of. */
export const NO_ORIGIN: OverridesOrigin = Object.freeze({
  version: 0,
  change: null,
  changedAt: null,
  changedBy: null,
  restoredAt: null,
  restoredBy: null,
});

export interface SharedSettings<T extends object> {
  /**
   * Reads the overrides once, then follows changes. Never waits on the store beyond the first read's own time-out:
   * with the store down at start, the instance runs on its own settings and picks the overrides up later.
   */
  start(): Promise<void>;
  /** Validates an update, merges it into the stored overrides and announces it to every instance. */
  write(update: T): Promise<void>;
  /**
   * Removes every override (back to each instance's configured values) and announces it. A reset is recorded too, so
   * an instance that still holds the overrides of before never puts them back after a store loss.
   */
  reset(): Promise<void>;
  /** The record of the overrides in force on this instance: which change, when, by whom, and whether restored. */
  readonly origin: OverridesOrigin;
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
