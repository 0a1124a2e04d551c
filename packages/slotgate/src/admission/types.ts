/** The admission engine's public types. */
import type { Candidate } from '../core/channel.js';
import type { Client } from '../core/client.js';
import type { Clock } from '../core/clock.js';
import type { Random } from '../core/order.js';
import type { Settings, SettingsUpdate } from '../core/settings.js';
import type { LeaseEvent } from './leases/lease-manager.js';
import type { ChannelLoad, SlotStore } from '../store/store.js';
import type { StoreFailureMode } from './leases/local-share.js';
import type { AdmissionStats, Outcome } from './stats.js';

export interface AdmissionOptions {
  store: SlotStore;
  /** Initial settings (validated; unknown keys or out-of-range values throw). */
  settings?: SettingsUpdate;
  /** Time and timers. @default the system clock */
  clock?: Clock;
  /** Uniform in [0, 1), for the weighted shuffles and the back-off jitter. @default Math.random */
  random?: Random;
  /** This instance's id, the prefix of its lease tokens. @default 12 random url-safe characters */
  instanceId?: string;
  /** Load fetch time-out, including the wait for a fetch slot. @default 3000 */
  loadFetchTimeoutMs?: number;
  /** Load fetch rounds at once. @default 2 */
  maxConcurrentFetches?: number;
  /**
   * What a bounded channel does while the store is unreachable: `fail_closed` admits nothing (503); `local_share`
   * admits up to ⌊max ÷ fleetSize()⌋ per channel on this instance once the store has failed for a lease TTL, and
   * registers those slots when it answers again (docs/redis.md). @default 'fail_closed'
   */
  storeFailureMode?: StoreFailureMode;
  /** How many instances share the store, as last seen (their heartbeats); 0 when none was seen. @default () => 0 */
  fleetSize?: () => number;
  /** Lease troubles (lost, release retried or abandoned, uncertain acquire) and settings changes. */
  onEvent?: (event: AdmissionEvent) => void;
  /** Called once per acquire with its outcome and latency (metrics exporters observe histograms here). */
  onAdmission?: (admission: AdmissionRecord) => void;
}

export interface AdmissionRecord {
  outcome: Outcome;
  latencyMs: number;
  /** Time in the wait queue, when the pass waited. */
  waitedMs?: number;
}

export type AdmissionEvent =
  | LeaseEvent
  | { type: 'settings_changed'; settings: Settings }
  /** An update named keys of earlier releases: what each does now. */
  | { type: 'settings_deprecated'; warnings: string[] };

export interface AcquireRequest<C extends Candidate> {
  /** The candidate set on arrival. */
  candidates: readonly C[];
  /**
   * The candidate set as the configuration in force has it now, asked again while the request waits: at once after
   * `admission.configChanged()`, at every safety poll, and before a ticket is handed out under a configuration that
   * changed during the acquire. Without it, `candidates` is read again (so changes made to it in place count).
   */
  resolve?: () => readonly C[];
  /** Abort while waiting → CapacityError reason 'aborted'. */
  signal?: AbortSignal;
  /** Channel ids to skip in this pass (already tried by the caller's retry chain). */
  exclude?: ReadonlySet<string>;
  /**
   * Who the request is for. A client with `maxConcurrency > 0` first takes one of its own slots (fleet-wide, waiting
   * for one within the same wait budget as a channel), then a channel slot; the ticket holds both and gives both
   * back. At its limit the acquire fails with ClientLimitError (`client_concurrency_exceeded`). A client without a
   * limit costs nothing.
   */
  client?: Client;
  /**
   * The client as the configuration in force has it now, asked again while the request waits for one of its
   * client's slots (at once after `configChanged()`, at every safety poll): a changed limit applies to that waiter in
   * its place in the client's queue, and a client whose limit is gone (undefined, another id, or no limit) lets the
   * request go on without a client slot. Without it, `client` stands for the whole acquire.
   */
  resolveClient?: () => Client | undefined;
  /**
   * How long before this call the request reached the caller, ms (a finite number ≥ 0; a gateway passes the time
   * since it began handling the request, such as Fastify's `reply.elapsedTime`). If it has to wait, it stands in the
   * queues as of then, at most 50 ms back (MAX_ARRIVAL_LEAD_MS): ahead of requests that reached another instance
   * after it but got to their acquire sooner. Without it, the request arrived at the call.
   */
  arrivedMsAgo?: number;
}

export interface Ticket<C extends Candidate> {
  channel: C;
  /** The lease token for a bounded channel; undefined for an unlimited one. */
  token: string | undefined;
  /** Time spent in the wait queue (0 when admitted at once). */
  waitedMs: number;
  /**
   * Fires when the slot is lost for good (fencing, `lease_fencing_enabled`): the store no longer held it and the
   * channel had no free slot to take it back into, or no renewal was confirmed before it expired (Redis unreachable
   * or stalled). Another request may hold the slot by then: end the work the ticket guards (abort the upstream call),
   * then release the ticket. Its `reason` is a LeaseLostError. Never fires for an unlimited channel.
   */
  readonly lost: AbortSignal;
  /**
   * Gives the slot back exactly once (idempotent), detached from any request cancellation. `handoff: false` when the
   * work it guarded may still be running where the caller cannot see it (an upstream call aborted mid-flight): the
   * slot then goes back through the store, never straight to another request of this instance in the same turn.
   */
  release(options?: { handoff?: boolean }): Promise<void>;
}

export interface Admission {
  acquire<C extends Candidate>(request: AcquireRequest<C>): Promise<Ticket<C>>;
  /** Starts a cooldown: in the store for a bounded (or unknown) channel, in process memory for an unlimited one. */
  cooldown(channel: string | Candidate, opts?: { ms?: number; reason?: string }): Promise<void>;
  clearCooldown(channel: string | Candidate): Promise<void>;
  /**
   * Says the candidate sets changed (a configuration reload): every request of this instance waiting for a slot
   * resolves its candidates again at once (`AcquireRequest.resolve`). It leaves the queues of channels no longer in
   * its set (disabled, removed, excluded or now unlimited), moves to the channel's new max in its place in the queue,
   * takes up the new set when none of its queues is left, and fails with NoChannelError when the set is empty.
   */
  configChanged(): void;
  /** Validates the whole update (throws SettingsError and changes nothing on bad input) and applies it. */
  updateSettings(update: unknown): Settings;
  readonly settings: Settings;
  readonly instanceId: string;
  /** Live loads straight from the store (admin views); unlimited channels from this process. */
  readLoads(channels: readonly Candidate[]): Promise<Map<string, ChannelLoad>>;
  /**
   * Loads through the load view: cached snapshots with this instance's corrections, fetched (coalesced) when stale,
   * in-memory fallback on store trouble. Free while the cache is warm; for dashboards and metrics.
   */
  viewLoads(channels: readonly Candidate[]): Promise<Map<string, ChannelLoad>>;
  /**
   * Who holds each channel's slots across the fleet: instance id → slots held, straight from the store (one read per
   * bounded channel; for operators' views, never needed to admit). Unlimited channels from this process (this
   * instance's in-flight tickets). Throws `StoreUnavailableError`.
   */
  readHolders(channels: readonly Candidate[]): Promise<Map<string, Map<string, number>>>;
  /**
   * Limited clients' slots across the fleet, straight from the store (one read per client; for operators' views):
   * client id → in flight (`active`) and waiting. Clients without a limit are left out. Throws `StoreUnavailableError`.
   */
  readClients(clients: readonly Client[]): Promise<Map<string, ChannelLoad>>;
  stats(): AdmissionStats;
  /** Stops renewing and gives back every lease this instance holds (bounded to 5 s). */
  close(): Promise<void>;
}
