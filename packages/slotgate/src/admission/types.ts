/** The admission engine's public types. */
import type { UpstreamSignal } from '../core/adaptive.js';
import type { Candidate } from '../core/channel.js';
import type { Client } from '../core/client.js';
import type { Clock } from '../core/clock.js';
import type { Random } from '../core/order.js';
import type { Settings, SettingsUpdate } from '../core/settings.js';
import type { LeaseEvent } from './leases/lease-manager.js';
import type { ChannelLoad, SlotStore } from '../store/store.js';
import type { ChannelPeak } from '../store/peak.js';
import type { StoreFailureMode } from './leases/local-share.js';
import type { ChannelLimit } from './limits/adaptive.js';
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
   * While the store is unreachable, a bounded channel admits nothing, or with `local_share` up to ⌊max ÷ fleetSize()⌋
   * here once the store has failed for a lease TTL (docs/redis.md). @default 'fail_closed'
   */
  storeFailureMode?: StoreFailureMode;
  /** How many instances share the store, as last seen; 0 when none was seen. @default () => 0 */
  fleetSize?: () => number;
  /** Lease troubles (lost, release retried or abandoned, uncertain acquire) and settings changes. */
  onEvent?: (event: AdmissionEvent) => void;
  /** Called once per acquire with its outcome and latency. */
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
   * The candidate set in force now, asked again while the request waits (after `configChanged()`, at every safety
   * poll) and before a ticket is handed out under a changed configuration. @default () => candidates
   */
  resolve?: () => readonly C[];
  /** Abort while waiting → CapacityError reason 'aborted'. */
  signal?: AbortSignal;
  /** Channel ids to skip in this pass (already tried by the caller's retry chain). */
  exclude?: ReadonlySet<string>;
  /**
   * Who the request is for. A limited client first takes one of its own slots, fleet-wide, then a channel slot; the
   * ticket holds both. At its limit the acquire fails with ClientLimitError.
   */
  client?: Client;
  /**
   * The client in force now, asked again while the request waits for a client slot: a changed limit applies in its
   * place in the queue; with no limit left (or another id) the request goes on without one. @default () => client
   */
  resolveClient?: () => Client | undefined;
  /**
   * Ms since the request reached the caller (e.g. Fastify's `reply.elapsedTime`): a waiter stands in the queues as of
   * then, at most 50 ms back, ahead of later arrivals elsewhere that reached their acquire sooner. @default 0
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
   * Fires (reason: a LeaseLostError) when the slot is lost for good, with `lease_fencing_enabled`: another request
   * may hold it, so end the work the ticket guards, then release it. Never fires for an unlimited channel.
   */
  readonly lost: AbortSignal;
  /**
   * Gives the slot back (idempotent); `handoff: false` when the guarded work may still be running out of sight.
   * `upstream`: what the upstream said of the request, for the channel's adaptive limit (ignored without one).
   */
  release(options?: { handoff?: boolean; upstream?: UpstreamSignal }): Promise<void>;
}

export interface Admission {
  acquire<C extends Candidate>(request: AcquireRequest<C>): Promise<Ticket<C>>;
  /** Starts a cooldown: in the store for a bounded (or unknown) channel, in process memory for an unlimited one. */
  cooldown(channel: string | Candidate, opts?: { ms?: number; reason?: string }): Promise<void>;
  clearCooldown(channel: string | Candidate): Promise<void>;
  /**
   * The candidate sets changed: every waiting request resolves its set again at once, keeping its place in the queues
   * of channels still in it; an empty set fails with NoChannelError.
   */
  configChanged(): void;
  /** Validates the whole update (throws SettingsError and changes nothing on bad input) and applies it. */
  updateSettings(update: unknown): Settings;
  readonly settings: Settings;
  readonly instanceId: string;
  /** Live loads straight from the store (admin views); unlimited channels from this process. */
  readLoads(channels: readonly Candidate[]): Promise<Map<string, ChannelLoad>>;
  /** Loads through the load view (cached, this instance's counts on store trouble); for dashboards and metrics. */
  viewLoads(channels: readonly Candidate[]): Promise<Map<string, ChannelLoad>>;
  /**
   * Each bounded channel's high-water mark across the fleet: the most slots held at once over the last one to two
   * minutes, from the store. Throws StoreUnavailableError.
   */
  readPeaks(channels: readonly Candidate[]): Promise<Map<string, ChannelPeak>>;
  /** Who holds each channel's slots: instance id → slots held, from the store. Throws StoreUnavailableError. */
  readHolders(channels: readonly Candidate[]): Promise<Map<string, Map<string, number>>>;
  /**
   * Each adaptive channel's limit as this instance last learned it (from its releases' reports), the max until it
   * learns one; channels without an adaptive limit (or with the `adaptive_enabled` switch off) are left out.
   */
  limits(channels: readonly Candidate[]): Map<string, ChannelLimit>;
  /** The same, read from the store now (admin views). Throws StoreUnavailableError. */
  readLimits(channels: readonly Candidate[]): Promise<Map<string, ChannelLimit>>;
  /** Limited clients' slots, from the store: client id → active and waiting. Throws StoreUnavailableError. */
  readClients(clients: readonly Client[]): Promise<Map<string, ChannelLoad>>;
  stats(): AdmissionStats;
  /** Stops renewing and gives back every lease this instance holds (bounded to 5 s). */
  close(): Promise<void>;
}
