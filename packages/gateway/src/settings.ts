/**
 * The gateway's hot settings: the admission engine's, plus the gateway's own retry and cooldown policy. One table,
 * so the config file, the admin API and the overrides shared through the store validate them alike.
 */
import {
  ADMISSION_LEGACY,
  ADMISSION_SETTINGS,
  boolSetting,
  defineSettings,
  intSetting,
  type OverridesOrigin,
  type SettingsOf,
  type SettingsUpdate,
} from 'slotgate';

export const GATEWAY_SETTINGS = {
  ...ADMISSION_SETTINGS,
  cooldown_on_status_429: boolSetting(true, 'an upstream 429 starts a cooldown'),
  cooldown_on_message_match: boolSetting(false, 'rate-limit wording in an upstream error starts a cooldown'),
  retry_times: intSetting(1, 0, 10, 'gateway retries on another channel'),
} as const;

export const gatewaySettings = defineSettings(GATEWAY_SETTINGS, ADMISSION_LEGACY);
export type GatewaySettings = SettingsOf<typeof GATEWAY_SETTINGS>;
export type GatewaySettingsUpdate = Partial<GatewaySettings>;

/** The settings in force: defaults < the config file's `settings` < the overrides shared through the store. */
export function settingsInForce(
  fromFile: GatewaySettingsUpdate,
  overrides: GatewaySettingsUpdate = {},
): GatewaySettings {
  return gatewaySettings.merge(gatewaySettings.defaults, { ...fromFile, ...overrides });
}

const ADMISSION_KEYS = Object.keys(ADMISSION_SETTINGS) as (keyof typeof ADMISSION_SETTINGS)[];

/** The admission engine's part of the gateway's settings. */
export function admissionPart(settings: GatewaySettings): SettingsUpdate {
  return Object.fromEntries(ADMISSION_KEYS.map((k) => [k, settings[k]])) as SettingsUpdate;
}

/** Where a setting in force comes from: its default, the config file's `settings`, or an override shared through the store. */
export type SettingSource = 'default' | 'config_file' | 'override';

/** Each setting's source, and the store's record of the overrides' last change (and restore, if the store lost them). */
export function settingsSource(
  fromFile: GatewaySettingsUpdate,
  overrides: GatewaySettingsUpdate,
  origin: OverridesOrigin,
): Record<string, unknown> {
  const source = (key: keyof GatewaySettings): SettingSource =>
    overrides[key] !== undefined ? 'override' : fromFile[key] !== undefined ? 'config_file' : 'default';
  return {
    keys: Object.fromEntries(gatewaySettings.keys.map((k) => [k, source(k)])),
    overrides: {
      version: origin.version,
      change: origin.change,
      changed_at: origin.changedAt,
      changed_by: origin.changedBy,
      restored_at: origin.restoredAt,
      restored_by: origin.restoredBy,
    },
  };
}
