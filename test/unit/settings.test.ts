/**
 * The hot settings: defaults, validation of updates as a whole, and hot application to the next admission pass. The
 * validation is one function for every table (`defineSettings`): it is exercised here through the gateway's table,
 * which is the admission engine's plus the gateway's own keys.
 */
import { describe, expect, it } from 'vitest';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import { ManualClock } from './manual-clock.js';
import { CapacityError, SettingsError } from '../../packages/slotgate/src/core/errors.js';
import {
  DEFAULT_SETTINGS,
  admissionSettings,
  type Settings,
  type SettingsUpdate,
} from '../../packages/slotgate/src/core/settings.js';
import type { AdmissionEvent } from '../../packages/slotgate/src/admission/types.js';
import { gatewaySettings } from '../../packages/gateway/src/settings.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import { elapse, flush, track } from './manual-time.js';

/** The settings reference (docs/configuration.md), copied: key → [default, min, max] (booleans: [default]). */
const SPEC_TABLE = {
  load_cache_enabled: [true],
  adaptive_enabled: [true],
  load_cache_ttl_ms: [200, 1, 5000],
  max_acquire_attempts: [8, 1, 100],
  slot_handoff_enabled: [true],
  wait_enabled: [true],
  wait_timeout_ms: [5000, 0, 60000],
  safety_poll_ms: [5000, 1000, 60000],
  max_waiting_per_channel: [0, 0, 10000],
  cooldown_enabled: [true],
  cooldown_seconds: [30, 1, 3600],
  cooldown_on_status_429: [true],
  cooldown_on_message_match: [false],
  lease_ttl_ms: [60000, 5000, 86400000],
  lease_fencing_enabled: [true],
  lease_reclaim_enabled: [true],
  retry_times: [1, 0, 10],
} as const;
/** The gateway's own keys; every other key is the admission engine's. */
const GATEWAY_ONLY = ['cooldown_on_status_429', 'cooldown_on_message_match', 'retry_times'];
const SETTINGS_SPEC = gatewaySettings.table;
const parseSettingsUpdate = gatewaySettings.parse;
const mergeSettings = admissionSettings.merge;

const INT_KEYS = Object.entries(SPEC_TABLE)
  .filter(([, v]) => v.length === 3)
  .map(([k, v]) => [k, v[1], v[2]] as [string, number, number]);
const BOOL_KEYS = Object.entries(SPEC_TABLE)
  .filter(([, v]) => v.length === 1)
  .map(([k]) => k);

function settingsError(fn: () => unknown): SettingsError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(SettingsError);
    return err as SettingsError;
  }
  throw new Error('expected a SettingsError, nothing was thrown');
}

describe('defaults', () => {
  it('match the reference exactly: every key, no extra key, every default; the gateway adds only its own keys', () => {
    const expected = Object.fromEntries(Object.entries(SPEC_TABLE).map(([k, v]) => [k, v[0]]));
    expect({ ...gatewaySettings.defaults }).toEqual(expected);
    expect([...gatewaySettings.keys].sort()).toEqual(Object.keys(SPEC_TABLE).sort());
    const admissionOnly = Object.fromEntries(
      Object.entries(expected).filter(([k]) => !GATEWAY_ONLY.includes(k)),
    );
    expect({ ...DEFAULT_SETTINGS }).toEqual(admissionOnly);
    expect([...admissionSettings.keys].sort()).toEqual(Object.keys(admissionOnly).sort());
  });

  it('declare the valid ranges of the reference', () => {
    for (const [key, min, max] of INT_KEYS) {
      expect(SETTINGS_SPEC[key as keyof typeof SETTINGS_SPEC]).toMatchObject({ type: 'int', min, max });
    }
    for (const key of BOOL_KEYS) expect(SETTINGS_SPEC[key as keyof typeof SETTINGS_SPEC].type).toBe('bool');
  });

  it('are frozen', () => {
    expect(Object.isFrozen(DEFAULT_SETTINGS)).toBe(true);
  });
});

describe('validation of an update', () => {
  it('rejects several bad keys at once and names every key, its valid range and the value received', () => {
    const bad = {
      load_cache_ttl_ms: 9000, // out of range
      max_acquire_attempts: 0, // below range
      wait_enabled: 'yes', // wrong type
      retry_times: 2.5, // not an integer
      no_such_setting: 42, // unknown key
      max_acquire_attempts_typo: true, // unknown key
    };
    const err = settingsError(() => parseSettingsUpdate(bad));
    expect(err.code).toBe('invalid_settings');
    expect(err.issues).toHaveLength(6);
    const expectations = [
      ['load_cache_ttl_ms', 'an integer in 1–5000', '9000'],
      ['max_acquire_attempts', 'an integer in 1–100', '0'],
      ['wait_enabled', 'a boolean', '"yes"'],
      ['retry_times', 'an integer in 0–10', '2.5'],
    ] as const;
    for (const [key, range, got] of expectations) {
      const issue = err.issues.find((i) => i.includes(`\`${key}\``));
      expect(issue, key).toBeDefined();
      expect(issue).toContain(range);
      expect(issue).toContain(`got ${got}`);
      expect(err.message).toContain(issue);
    }
    const unknown = err.issues.find((i) => i.includes('`no_such_setting`'));
    expect(unknown).toMatch(/unknown/i);
    expect(unknown).toContain('got 42');
    expect(err.issues.find((i) => i.includes('`max_acquire_attempts_typo`'))).toContain('got true');
  });

  it('uses the message shape of the style guide', () => {
    const err = settingsError(() => parseSettingsUpdate({ load_cache_ttl_ms: 9000 }));
    expect(err.issues).toEqual(['Expected `load_cache_ttl_ms` to be an integer in 1–5000, got 9000']);
  });

  it.each([
    ['a fraction', 1.5],
    ['NaN', Number.NaN],
    ['Infinity', Number.POSITIVE_INFINITY],
    ['a numeric string', '100'],
    ['null', null],
    ['a boolean', true],
  ])('rejects %s for an integer key', (_, value) => {
    const err = settingsError(() => parseSettingsUpdate({ safety_poll_ms: value }));
    expect(err.issues).toHaveLength(1);
    expect(err.issues[0]).toContain('`safety_poll_ms`');
    expect(err.issues[0]).toContain('an integer in 1000–60000');
  });

  it.each([
    ['a number', 1],
    ['a string', 'true'],
    ['null', null],
  ])('rejects %s for a boolean key', (_, value) => {
    const err = settingsError(() => parseSettingsUpdate({ load_cache_enabled: value }));
    expect(err.issues).toEqual([expect.stringContaining('`load_cache_enabled` to be a boolean')]);
  });

  it('accepts every boundary value and rejects one step past each boundary', () => {
    for (const [key, min, max] of INT_KEYS) {
      expect(parseSettingsUpdate({ [key]: min })).toEqual({ [key]: min });
      expect(parseSettingsUpdate({ [key]: max })).toEqual({ [key]: max });
      const below = settingsError(() => parseSettingsUpdate({ [key]: min - 1 }));
      expect(below.issues[0]).toContain(`an integer in ${min}–${max}, got ${min - 1}`);
      const above = settingsError(() => parseSettingsUpdate({ [key]: max + 1 }));
      expect(above.issues[0]).toContain(`an integer in ${min}–${max}, got ${max + 1}`);
    }
    for (const key of BOOL_KEYS) {
      expect(parseSettingsUpdate({ [key]: false })).toEqual({ [key]: false });
      expect(parseSettingsUpdate({ [key]: true })).toEqual({ [key]: true });
    }
  });

  it.each([
    ['null', null],
    ['an array', [1, 2]],
    ['a string', 'wait_enabled=false'],
    ['a number', 5],
  ])('rejects %s as the whole update', (_, input) => {
    const err = settingsError(() => parseSettingsUpdate(input));
    expect(err.issues).toHaveLength(1);
    expect(err.message).toContain('object');
  });

  it('names NaN and Infinity as received, not as null', () => {
    for (const [value, shown] of [
      [Number.NaN, 'NaN'],
      [Number.POSITIVE_INFINITY, 'Infinity'],
    ] as const) {
      const err = settingsError(() => parseSettingsUpdate({ safety_poll_ms: value }));
      expect(err.issues[0]).toContain(`got ${shown}`);
    }
  });

  it('accepts an empty update', () => {
    expect(parseSettingsUpdate({})).toEqual({});
  });
});

describe('keys of earlier releases', () => {
  it('wait_interval_ms is a deprecated alias: it sets safety_poll_ms to 50 × its value within 2–10 s, with a warning', () => {
    expect(admissionSettings.parse({ wait_interval_ms: 100 })).toEqual({ safety_poll_ms: 5000 });
    expect(admissionSettings.parse({ wait_interval_ms: 1 })).toEqual({ safety_poll_ms: 2000 });
    expect(admissionSettings.parse({ wait_interval_ms: 5000 })).toEqual({ safety_poll_ms: 10_000 });
    // the new key wins when both are given
    expect(admissionSettings.parse({ wait_interval_ms: 100, safety_poll_ms: 3000 })).toEqual({
      safety_poll_ms: 3000,
    });
    // validated as it was
    expect(settingsError(() => admissionSettings.parse({ wait_interval_ms: 0 })).issues).toEqual([
      'Expected `wait_interval_ms` to be an integer in 1–5000, got 0',
    ]);
    expect(admissionSettings.warnings({ wait_interval_ms: 100 })).toEqual([
      'Setting `wait_interval_ms` is deprecated: use `safety_poll_ms` (it sets safety_poll_ms = 5000)',
    ]);
  });

  it('load_summary_enabled was removed: accepted and ignored, with a warning', () => {
    expect(admissionSettings.parse({ load_summary_enabled: false, wait_enabled: true })).toEqual({
      wait_enabled: true,
    });
    expect(admissionSettings.warnings({ load_summary_enabled: false })).toEqual([
      expect.stringMatching(/^Setting `load_summary_enabled` was removed and is ignored: /),
    ]);
    expect(admissionSettings.warnings({ wait_enabled: true })).toEqual([]);
  });

  it('an engine given them emits settings_deprecated with the warnings', async () => {
    const events: AdmissionEvent[] = [];
    const admission = createAdmission({
      store: new MemoryStore(),
      settings: { wait_interval_ms: 40 } as SettingsUpdate,
      onEvent: (e) => events.push(e),
    });
    expect(admission.settings.safety_poll_ms).toBe(2000);
    admission.updateSettings({ load_summary_enabled: true });
    expect(events.filter((e) => e.type === 'settings_deprecated').map((e) => e.type)).toHaveLength(2);
    await admission.close();
  });
});

describe('mergeSettings()', () => {
  it('applies a valid update into a new frozen object and leaves the base unchanged', () => {
    const base = mergeSettings(DEFAULT_SETTINGS, { wait_timeout_ms: 1234 });
    const snapshot = { ...base };
    const next = mergeSettings(base, { max_acquire_attempts: 3, wait_enabled: false });
    expect(next).not.toBe(base);
    expect(Object.isFrozen(next)).toBe(true);
    expect(next).toEqual({ ...snapshot, max_acquire_attempts: 3, wait_enabled: false });
    expect(base).toEqual(snapshot);
  });

  // A key given as `undefined` is "not given": it never replaces the base value with undefined.
  it('never produces a setting outside its valid range from a key given as undefined', () => {
    const base = mergeSettings(DEFAULT_SETTINGS, {});
    let next: Settings;
    try {
      next = mergeSettings(base, { safety_poll_ms: undefined, wait_enabled: undefined });
    } catch (err) {
      expect(err).toBeInstanceOf(SettingsError); // rejecting the update is fine too
      return;
    }
    expect(next.safety_poll_ms).toBe(base.safety_poll_ms);
    expect(next.wait_enabled).toBe(base.wait_enabled);
  });

  it('rejects a partly bad update whole: nothing of it applies, the base is unchanged', () => {
    const base = mergeSettings(DEFAULT_SETTINGS, {});
    const snapshot = { ...base };
    const err = settingsError(() =>
      mergeSettings(base, { max_acquire_attempts: 3, wait_timeout_ms: -1, bogus: 1 }),
    );
    expect(err.issues).toHaveLength(2);
    expect(base).toEqual(snapshot);
    expect(DEFAULT_SETTINGS.max_acquire_attempts).toBe(8);
  });
});

describe('settings of an admission engine', () => {
  const full = (id: string) => ({ id, maxConcurrency: 1 });

  it('rejects bad initial settings', () => {
    const err = settingsError(() =>
      createAdmission({ store: new MemoryStore(), settings: { load_cache_ttl_ms: 0 } }),
    );
    expect(err.message).toContain('`load_cache_ttl_ms` to be an integer in 1–5000, got 0');
  });

  it('updateSettings(bad) throws, changes nothing and emits no event', async () => {
    const events: string[] = [];
    const admission = createAdmission({
      store: new MemoryStore(),
      settings: { max_acquire_attempts: 5 },
      onEvent: (e) => events.push(e.type),
    });
    const before: Settings = admission.settings;
    const err = settingsError(() =>
      admission.updateSettings({ max_acquire_attempts: 2, safety_poll_ms: 0, unknown_key: 'x' }),
    );
    expect(err.issues).toEqual(
      expect.arrayContaining([
        expect.stringContaining('`safety_poll_ms` to be an integer in 1000–60000, got 0'),
        expect.stringContaining('`unknown_key`'),
      ]),
    );
    expect(err.issues).toHaveLength(2);
    expect(admission.settings).toBe(before);
    expect(admission.settings.max_acquire_attempts).toBe(5);
    expect(events).toEqual([]);
    await admission.close();
  });

  it('a valid update is announced and applies to the next pass (max_acquire_attempts → acquireAttempts)', async () => {
    const store = new MemoryStore();
    const events: Settings[] = [];
    const admission = createAdmission({
      store,
      settings: { wait_enabled: false },
      onEvent: (e) => {
        if (e.type === 'settings_changed') events.push(e.settings);
      },
    });
    const candidates = ['a', 'b', 'c', 'd', 'e'].map(full);
    const held = [];
    for (let i = 0; i < candidates.length; i++) held.push(await admission.acquire({ candidates }));
    expect(new Set(held.map((t) => t.channel.id)).size).toBe(5);

    const attempts = () => admission.stats().acquireAttempts;
    let before = attempts();
    await expect(admission.acquire({ candidates })).rejects.toMatchObject({ reason: 'full' });
    expect(attempts() - before).toBe(5); // budget 8 covers all five full channels

    const applied = admission.updateSettings({ max_acquire_attempts: 2 });
    expect(applied.max_acquire_attempts).toBe(2);
    expect(admission.settings.max_acquire_attempts).toBe(2);
    expect(events.map((s) => s.max_acquire_attempts)).toEqual([2]);

    before = attempts();
    await expect(admission.acquire({ candidates })).rejects.toMatchObject({ reason: 'full' });
    expect(attempts() - before).toBe(2);

    for (const t of held) await t.release();
    await admission.close();
  });

  it('wait_enabled=false turns a wait into an immediate CapacityError reason full', async () => {
    const clock = new ManualClock();
    const store = new MemoryStore({ clock });
    const admission = createAdmission({
      store,
      clock,
      settings: { wait_timeout_ms: 50, safety_poll_ms: 2000 },
      random: () => 0, // polls at +5, +15, +35, then at the deadline
    });
    const candidates = [full('solo')];
    const holder = await admission.acquire({ candidates });

    const t0 = clock.now();
    const waited = track(clock, admission.acquire({ candidates }));
    await elapse(clock, 49);
    expect(waited.at).toBeUndefined();
    await elapse(clock, 1);
    expect(waited.at).toBe(t0 + 50);
    expect(waited.error).toBeInstanceOf(CapacityError);
    expect((waited.error as CapacityError).reason).toBe('wait_timeout');
    expect(store.commands.wait).toBe(2); // register + unregister

    // Had wait_enabled been ignored, this pass would sit out a 5 s wait.
    admission.updateSettings({ wait_enabled: false, wait_timeout_ms: 5000 });
    const t1 = clock.now();
    const immediate = track(clock, admission.acquire({ candidates }));
    await flush();
    expect(immediate.at).toBe(t1); // failed with no time passing
    expect(immediate.error).toBeInstanceOf(CapacityError);
    expect((immediate.error as CapacityError).reason).toBe('full');
    expect((immediate.error as CapacityError).channels).toEqual(['solo']);
    expect(store.commands.wait).toBe(2); // no registration this time

    await holder.release();
    await admission.close();
  });
});
