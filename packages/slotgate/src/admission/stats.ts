/** The counters the admission engine keeps; a gateway exports them to Prometheus. */
import type { StoreFailureMode } from './leases/local-share.js';
import type { CapacityReason } from '../core/errors.js';
import { Histogram, type HistogramSnapshot } from '../core/histogram.js';
import type { Purpose } from '../store/store.js';
import type { LoadViewCounters } from './loads/load-view.js';

export type Outcome =
  'acquired' | `capacity_${CapacityReason}` | 'client_limit' | 'store_unavailable' | 'no_channel';

export interface ChannelStats {
  /** This instance's live leases (bounded) or in-flight tickets (unlimited). */
  active: number;
  /** This instance's live waiters. */
  waiting: number;
}

export interface AdmissionStats {
  instanceId: string;
  store: 'memory' | 'redis';
  /** Store commands issued, by purpose (a script call counts as one). */
  commands: Record<Purpose, number>;
  outcomes: Record<Outcome, number>;
  /** Bounded channels tried with the acquire script, and the acquire requests that carried them. */
  acquireAttempts: number;
  acquireCalls: number;
  /** Passes that asked the store for a slot, and those whose first channel tried was full or queued. */
  firstTries: number;
  firstTriesFull: number;
  /** Admissions served by a slot this instance released in the same turn, with no store command. */
  handoffs: number;
  /** Waiters admitted on a slot the store granted them. */
  grants: number;
  admissionLatencyMs: HistogramSnapshot;
  waitTimeMs: HistogramSnapshot;
  loadView: LoadViewCounters;
  leasesLost: number;
  liveLeases: number;
  /** The store failure mode, whether it admits on a local share now, and how often it did. */
  localShare: { mode: StoreFailureMode; active: boolean; admitted: number };
  channels: Record<string, ChannelStats>;
  /** Limited clients with a slot held or waited for on this instance, by client id. */
  clients: Record<string, ChannelStats>;
}

/** Every outcome an acquire can have (label values for metrics exporters). */
export const OUTCOMES: readonly Outcome[] = [
  'acquired',
  'capacity_full',
  'capacity_queue_full',
  'capacity_wait_timeout',
  'capacity_aborted',
  'client_limit',
  'store_unavailable',
  'no_channel',
];

export class StatsRecorder {
  readonly outcomes = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Outcome, number>;
  readonly admissionLatency = new Histogram();
  readonly waitTime = new Histogram();
  acquireAttempts = 0;
  acquireCalls = 0;
  firstTries = 0;
  firstTriesFull = 0;
  grants = 0;
  leasesLost = 0;
}
