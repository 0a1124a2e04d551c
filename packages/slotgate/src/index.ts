/**
 * slotgate: bounded per-channel concurrency shared by every instance through one Redis. The public API, documented
 * in docs/api.md; nothing else in this package is a stable interface.
 */
export { createAdmission } from './admission/admission.js';
export type {
  Admission,
  AdmissionOptions,
  AdmissionEvent,
  AdmissionRecord,
  AcquireRequest,
  Ticket,
} from './admission/types.js';
export type { StoreFailureMode } from './admission/leases/local-share.js';
export { OUTCOMES, type AdmissionStats, type ChannelStats, type Outcome } from './admission/stats.js';
export type { LoadViewCounters } from './admission/loads/load-view.js';
export type { LeaseEvent } from './admission/leases/lease-manager.js';
export type { Candidate } from './core/channel.js';
export {
  ADAPTIVE_DEFAULTS,
  effectiveLimit,
  nextLimit,
  type AdaptiveOptions,
  type LimitLaw,
  type LimitState,
  type UpstreamSignal,
} from './core/adaptive.js';
export type { ChannelLimit } from './admission/limits/adaptive.js';
export { clientIdOf, isClientResource, type Client } from './core/client.js';
export type { Clock, Timer } from './core/clock.js';
export type { Random } from './core/order.js';
export type { HistogramSnapshot } from './core/histogram.js';
export {
  SlotgateError,
  CapacityError,
  ClientLimitError,
  StoreUnavailableError,
  NoChannelError,
  SettingsError,
  LeaseLostError,
  ERROR_CODES,
  type CapacityReason,
  type LeaseLostReason,
} from './core/errors.js';
export {
  ADMISSION_SETTINGS,
  ADMISSION_LEGACY,
  DEFAULT_SETTINGS,
  admissionSettings,
  defineSettings,
  intSetting,
  boolSetting,
  type Settings,
  type SettingsUpdate,
  type SettingKey,
  type SettingsOf,
  type SettingsSchema,
  type SettingsTable,
  type SettingSpec,
  type LegacySetting,
  type IntSetting,
  type BoolSetting,
} from './core/settings.js';
export { MemoryStore, type MemoryStoreOptions } from './store/memory/memory-store.js';
export { RedisStore, type RedisStoreOptions } from './store/redis/redis-store.js';
export {
  createClient as createRedisClient,
  parseAddress,
  type ClusterConnection,
  type ConnectionOptions,
  type SentinelConnection,
} from './store/redis/connection/connection.js';
export type { NodeHealth, TopologyKind } from './store/redis/connection/nodes.js';
export { PURPOSES, type SlotStore, type ChannelLoad, type Purpose, type StoreHealth } from './store/store.js';
export { PEAK_MINUTE_MS, type ChannelPeak } from './store/peak.js';
export type {
  SharedSettings,
  SharedSettingsOptions,
  OverridesOrigin,
  Presence,
  InstanceInfo,
} from './store/fleet.js';
export { checkLeftovers } from './store/redis/doctor/check.js';
export {
  HEARTBEAT_PERIOD_MS,
  OWNER_DEAD_AFTER_MS,
  OWNER_LATE_AFTER_MS,
  formatReport as formatLeftoverReport,
  type DoctorReport,
  type Finding,
  type FindingKind,
  type LateOwner,
} from './store/redis/doctor/report.js';
