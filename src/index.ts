/** The public API of slotgate (spec §12). */
export { createAdmission, AdmissionEngine } from './admission/admission.js';
export type {
  Admission,
  AdmissionOptions,
  AdmissionEvent,
  AcquireRequest,
  Ticket,
} from './admission/admission.js';
export type { AdmissionStats, ChannelStats, Outcome } from './admission/stats.js';
export type { LoadViewCounters } from './admission/load-view.js';
export type { Candidate } from './core/channel.js';
export { systemClock, ManualClock, type Clock } from './core/clock.js';
export {
  SlotgateError,
  CapacityError,
  StoreUnavailableError,
  NoChannelError,
  SettingsError,
  ERROR_CODES,
  type CapacityReason,
} from './core/errors.js';
export {
  DEFAULT_SETTINGS,
  SETTINGS_SPEC,
  SETTING_KEYS,
  parseSettingsUpdate,
  type Settings,
  type SettingsUpdate,
  type SettingKey,
} from './core/settings.js';
export type { HistogramSnapshot } from './core/histogram.js';
export { MemoryStore, type MemoryStoreOptions } from './store/memory/memory-store.js';
export { RedisStore, type RedisStoreOptions } from './store/redis/redis-store.js';
export { KeyBuilder } from './store/redis/keys.js';
export { LeaseManager, type Lease, type LeaseEvent } from './store/leases.js';
export type { SlotStore, ChannelLoad, AcquireReply, Purpose, LeaseRef, CooldownInfo } from './store/store.js';
