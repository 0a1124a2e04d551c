/**
 * `channel_concurrency_setting`: the hot-reloadable settings of spec §6, one table with defaults and bounds.
 * The same snake_case keys are used by the library, the YAML config and the admin API.
 */
import { z } from 'zod';
import { SettingsError } from './errors.js';

interface IntSpec {
  type: 'int';
  default: number;
  min: number;
  max: number;
  doc: string;
}
interface BoolSpec {
  type: 'bool';
  default: boolean;
  doc: string;
}

const int = (def: number, min: number, max: number, doc: string): IntSpec => ({
  type: 'int',
  default: def,
  min,
  max,
  doc,
});
const bool = (def: boolean, doc: string): BoolSpec => ({ type: 'bool', default: def, doc });

export const SETTINGS_SPEC = {
  load_cache_enabled: bool(true, 'rollback switch: false reads Redis directly for every selection'),
  load_cache_ttl_ms: int(200, 1, 5000, 'load snapshot TTL'),
  max_acquire_attempts: int(8, 1, 100, 'acquire budget per admission pass'),
  slot_handoff_enabled: bool(
    true,
    'a slot released while a request of this instance wants its channel, in the same event-loop turn, passes to it with no Redis command',
  ),
  wait_enabled: bool(true, 'bounded wait queue on/off'),
  wait_timeout_ms: int(5000, 0, 60000, 'longest wait per request'),
  wait_interval_ms: int(100, 1, 5000, 'base poll interval while waiting'),
  max_waiting_per_channel: int(0, 0, 10000, "0 = the channel's max_concurrency"),
  cooldown_enabled: bool(true, 'master cooldown switch (off: scripts skip the check, marking is a no-op)'),
  cooldown_seconds: int(30, 1, 3600, 'default cooldown length'),
  cooldown_on_status_429: bool(true, 'an upstream 429 starts a cooldown'),
  cooldown_on_message_match: bool(false, 'rate-limit wording in an upstream error starts a cooldown'),
  lease_ttl_ms: int(60000, 5000, 86400000, 'lease expiry; renewed every third of it'),
  retry_times: int(1, 0, 10, 'gateway retries on another channel'),
} as const satisfies Record<string, IntSpec | BoolSpec>;

export type SettingKey = keyof typeof SETTINGS_SPEC;
export type Settings = {
  readonly [K in SettingKey]: (typeof SETTINGS_SPEC)[K] extends BoolSpec ? boolean : number;
};
export type SettingsUpdate = Partial<Settings>;

export const SETTING_KEYS = Object.keys(SETTINGS_SPEC) as SettingKey[];

export const DEFAULT_SETTINGS: Settings = Object.freeze(
  Object.fromEntries(SETTING_KEYS.map((k) => [k, SETTINGS_SPEC[k].default])) as Settings,
);

const updateSchema = z.strictObject(
  Object.fromEntries(
    SETTING_KEYS.map((k) => {
      const spec: IntSpec | BoolSpec = SETTINGS_SPEC[k];
      return [
        k,
        spec.type === 'bool' ? z.boolean().optional() : z.int().min(spec.min).max(spec.max).optional(),
      ];
    }),
  ),
);

/** "an integer in 1–5000" / "a boolean": what a key accepts, as the error messages say it. */
export function describeRange(key: SettingKey): string {
  const spec: IntSpec | BoolSpec = SETTINGS_SPEC[key];
  return spec.type === 'bool' ? 'a boolean' : `an integer in ${spec.min}–${spec.max}`;
}

function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (value === undefined) return 'undefined';
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/**
 * Validates a partial update as a whole: returns it typed, or throws one SettingsError that names every bad key,
 * its valid range and the value received. Never substitutes defaults for bad values.
 */
export function parseSettingsUpdate(input: unknown): SettingsUpdate {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    throw new SettingsError([`Expected settings to be an object of keys, got ${show(input)}`]);
  }
  // A key given as `undefined` means "not given": it must not overwrite the value it would replace.
  input = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined));
  const result = updateSchema.safeParse(input);
  if (result.success) return result.data as SettingsUpdate;
  const record = input as Record<string, unknown>;
  const issues = new Set<string>();
  for (const issue of result.error.issues) {
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) {
        issues.add(
          `Unknown setting \`${key}\` (valid keys: ${SETTING_KEYS.join(', ')}), got ${show(record[key])}`,
        );
      }
      continue;
    }
    const key = String(issue.path[0]) as SettingKey;
    issues.add(`Expected \`${key}\` to be ${describeRange(key)}, got ${show(record[key])}`);
  }
  throw new SettingsError([...issues]);
}

/** Applies a validated update to a full settings object, returning a new frozen one. */
export function mergeSettings(base: Settings, update: unknown): Settings {
  return Object.freeze({ ...base, ...parseSettingsUpdate(update) });
}
