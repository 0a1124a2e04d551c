/**
 * Hot-reloadable settings: a table of keys with defaults, bounds and a line of doc each, and its validation. The same
 * snake_case keys serve the library, configuration files and admin APIs; `defineSettings` makes more tables.
 */
import { z } from 'zod';
import { SettingsError } from './errors.js';

/** An integer setting; `min` and `max` are inclusive. */
export interface IntSetting {
  type: 'int';
  default: number;
  min: number;
  max: number;
  doc: string;
}

export interface BoolSetting {
  type: 'bool';
  default: boolean;
  doc: string;
}

export type SettingSpec = IntSetting | BoolSetting;
export type SettingsTable = Record<string, SettingSpec>;

/** The values a table describes. */
export type SettingsOf<T extends SettingsTable> = {
  readonly [K in keyof T]: T[K] extends BoolSetting ? boolean : number;
};

export const intSetting = (def: number, min: number, max: number, doc: string): IntSetting => ({
  type: 'int',
  default: def,
  min,
  max,
  doc,
});

export const boolSetting = (def: boolean, doc: string): BoolSetting => ({ type: 'bool', default: def, doc });

/** The admission engine's settings. */
export const ADMISSION_SETTINGS = {
  load_cache_enabled: boolSetting(true, 'rollback switch: false reads Redis directly for every selection'),
  adaptive_enabled: boolSetting(
    true,
    "rollback switch: false turns every channel's adaptive limit off (its max applies, nothing is reported)",
  ),
  load_cache_ttl_ms: intSetting(200, 1, 5000, 'load snapshot TTL'),
  max_acquire_attempts: intSetting(8, 1, 100, 'acquire budget per admission pass'),
  slot_handoff_enabled: boolSetting(
    true,
    'a slot released while a request of this instance wants its channel and nobody waits for it, in the same event-loop turn, passes to it with no Redis command',
  ),
  wait_enabled: boolSetting(true, 'bounded wait queue on/off'),
  wait_timeout_ms: intSetting(5000, 0, 60000, 'longest wait per request'),
  safety_poll_ms: intSetting(
    5000,
    1000,
    60000,
    'how often a waiter checks its queues for a grant whose message was lost (jittered; grants arrive as messages)',
  ),
  max_waiting_per_channel: intSetting(
    0,
    0,
    10000,
    "0 = max(32, 8 × the channel's max_concurrency), at most 10000",
  ),
  cooldown_enabled: boolSetting(
    true,
    'master cooldown switch (off: scripts skip the check, marking is a no-op)',
  ),
  cooldown_seconds: intSetting(30, 1, 3600, 'default cooldown length'),
  lease_ttl_ms: intSetting(60000, 5000, 86400000, 'lease expiry; renewed every third of it'),
  lease_fencing_enabled: boolSetting(
    true,
    'a ticket whose slot is lost (gone from the store, or no renewal confirmed before its expiry) fires `ticket.lost`, and the gateway ends its request; false: only the `lease_lost` event, and the request runs on past the limit',
  ),
  lease_reclaim_enabled: boolSetting(
    true,
    'a lease the store lost is first taken back when its channel has a free slot; false: its request ends at once',
  ),
} as const satisfies SettingsTable;

/** A key of an earlier release, accepted with a warning: renamed, it sets its new key unless that is given. */
export type LegacySetting =
  | { spec: SettingSpec; renamedTo: string; convert: (value: number) => number }
  | { spec: SettingSpec; removed: string };

export const ADMISSION_LEGACY: Record<string, LegacySetting> = {
  wait_interval_ms: {
    spec: intSetting(100, 1, 5000, ''),
    renamedTo: 'safety_poll_ms',
    convert: (v) => Math.min(10_000, Math.max(2000, 50 * v)),
  },
  load_summary_enabled: {
    spec: boolSetting(true, ''),
    removed:
      'cached loads always come from the load summary; load_cache_enabled: false reads the keys directly',
  },
};

export type SettingKey = keyof typeof ADMISSION_SETTINGS;
/** The admission engine's settings, as in force. */
export type Settings = SettingsOf<typeof ADMISSION_SETTINGS>;
/** A partial update of the admission engine's settings. */
export type SettingsUpdate = Partial<Settings>;

/** Validation and defaults for one settings table. */
export interface SettingsSchema<T extends SettingsTable> {
  readonly table: T;
  readonly keys: readonly (keyof T & string)[];
  readonly defaults: SettingsOf<T>;
  /** Validates a whole partial update, or throws one SettingsError naming every bad key, its range and value. */
  parse(input: unknown): Partial<SettingsOf<T>>;
  /** One warning per key of an earlier release (renamed or removed) the update uses. */
  warnings(input: unknown): string[];
  /** Applies a validated update to a full settings object, returning a new frozen one. */
  merge(base: SettingsOf<T>, update: unknown): SettingsOf<T>;
  /** "an integer in 1–5000" / "a boolean": what a key accepts, as the error messages say it. */
  describe(key: keyof T & string): string;
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

const zodOf = (spec: SettingSpec) =>
  spec.type === 'bool' ? z.boolean().optional() : z.int().min(spec.min).max(spec.max).optional();

const describeSpec = (spec: SettingSpec) =>
  spec.type === 'bool' ? 'a boolean' : `an integer in ${spec.min}–${spec.max}`;

export function defineSettings<T extends SettingsTable>(
  table: T,
  legacy: Record<string, LegacySetting> = {},
): SettingsSchema<T> {
  const keys = Object.keys(table) as (keyof T & string)[];
  const defaults = Object.freeze(
    Object.fromEntries(keys.map((k) => [k, table[k]!.default])),
  ) as SettingsOf<T>;
  const specs: Record<string, SettingSpec> = { ...table };
  for (const [k, l] of Object.entries(legacy)) specs[k] = l.spec;
  const schema = z.strictObject(
    Object.fromEntries(Object.entries(specs).map(([k, spec]) => [k, zodOf(spec)])),
  );
  const parse = (input: unknown): Partial<SettingsOf<T>> => {
    if (typeof input !== 'object' || input === null || Array.isArray(input)) {
      throw new SettingsError([`Expected settings to be an object of keys, got ${show(input)}`]);
    }
    const given = Object.fromEntries(Object.entries(input).filter(([, v]) => v !== undefined));
    const result = schema.safeParse(given);
    if (!result.success) {
      const issues = new Set<string>();
      for (const issue of result.error.issues) {
        if (issue.code === 'unrecognized_keys') {
          for (const key of issue.keys) {
            issues.add(
              `Unknown setting \`${key}\` (valid keys: ${keys.join(', ')}), got ${show(given[key])}`,
            );
          }
          continue;
        }
        const key = String(issue.path[0]);
        issues.add(`Expected \`${key}\` to be ${describeSpec(specs[key]!)}, got ${show(given[key])}`);
      }
      throw new SettingsError([...issues]);
    }
    const data: Record<string, unknown> = { ...result.data };
    for (const [k, l] of Object.entries(legacy)) {
      if (data[k] === undefined) continue;
      if ('renamedTo' in l && data[l.renamedTo] === undefined)
        data[l.renamedTo] = l.convert(data[k] as number);
      delete data[k];
    }
    return data as Partial<SettingsOf<T>>;
  };
  const warnings = (input: unknown): string[] => {
    if (typeof input !== 'object' || input === null) return [];
    return Object.entries(input)
      .filter(([k, v]) => legacy[k] !== undefined && v !== undefined)
      .map(([k, v]) => {
        const l = legacy[k]!;
        return 'renamedTo' in l
          ? `Setting \`${k}\` is deprecated: use \`${l.renamedTo}\` (it sets ${l.renamedTo} = ${l.convert(Number(v))})`
          : `Setting \`${k}\` was removed and is ignored: ${l.removed}`;
      });
  };
  return {
    table,
    keys,
    defaults,
    parse,
    warnings,
    merge: (base, update) => Object.freeze({ ...base, ...parse(update) }) as SettingsOf<T>,
    describe: (key) => describeSpec(table[key]!),
  };
}

export const admissionSettings = defineSettings(ADMISSION_SETTINGS, ADMISSION_LEGACY);
export const DEFAULT_SETTINGS: Settings = admissionSettings.defaults;
