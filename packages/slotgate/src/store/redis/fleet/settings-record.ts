/** The record kept next to the settings overrides (lua/includes/settingsRecord.lua), and what a read decides. */
import type { OverridesOrigin } from '../../fleet.js';

const CHANGES = ['update', 'reset', 'external'] as const;
type Change = (typeof CHANGES)[number];

export interface SettingsRecord {
  version: number;
  change: Change;
  /** Redis ms; null when unknown. */
  at: number | null;
  /** '' when unknown. */
  by: string;
  /** Of the overrides this record was written with. */
  digest: string;
  restoredAt: number | null;
  restoredBy: string;
}

/** One read: the overrides (JSON text per field), their record and their digest now. */
export interface SettingsSnapshot {
  fields: Record<string, string>;
  record: SettingsRecord | null;
  digest: string;
}

/** A read whose record matches its content: what an instance puts back after a store loss. */
export type RecordedSnapshot = SettingsSnapshot & { record: SettingsRecord };

/** `record`: take the overrides and record a change made outside the scripts; `restore`: put back what was lost. */
export type SettingsAction = 'apply' | 'record' | 'restore';

export function decide(known: RecordedSnapshot | undefined, now: SettingsSnapshot): SettingsAction {
  if (known && (now.record?.version ?? 0) < known.record.version) return 'restore';
  if (now.record) return now.record.digest === now.digest ? 'apply' : 'record';
  return Object.keys(now.fields).length > 0 ? 'record' : 'apply';
}

export function isRecorded(snapshot: SettingsSnapshot): snapshot is RecordedSnapshot {
  return snapshot.record !== null && snapshot.record.digest === snapshot.digest;
}

function pairs(flat: unknown): Record<string, string> {
  if (!Array.isArray(flat)) throw new TypeError(`unexpected settings reply ${JSON.stringify(flat)}`);
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[String(flat[i])] = String(flat[i + 1]);
  return out;
}

const ms = (text: string | undefined): number | null =>
  text && Number.isSafeInteger(Number(text)) ? Number(text) : null;

/** The version is read as Lua's `tonumber` reads it; a record damaged otherwise fails to match, and is rewritten. */
export function parseRecord(fields: Record<string, string>): SettingsRecord | null {
  const version = Number(fields.version);
  if (fields.version === undefined || !Number.isFinite(version)) return null;
  const change = fields.change as Change;
  return {
    version,
    change: CHANGES.includes(change) ? change : 'external',
    at: ms(fields.at),
    by: fields.by ?? '',
    digest: fields.digest ?? '',
    restoredAt: ms(fields.restored_at),
    restoredBy: fields.restored_by ?? '',
  };
}

export function parseSnapshot(reply: unknown): SettingsSnapshot {
  if (!Array.isArray(reply) || reply.length !== 3) {
    throw new TypeError(`unexpected settings reply ${JSON.stringify(reply)}`);
  }
  return { fields: pairs(reply[0]), record: parseRecord(pairs(reply[1])), digest: String(reply[2]) };
}

/** JSON per field; a field that is not JSON as its text, for the parser to judge. */
export function fieldValues(fields: Record<string, string>): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const [key, text] of Object.entries(fields)) {
    try {
      values[key] = JSON.parse(text);
    } catch {
      values[key] = text;
    }
  }
  return values;
}

const iso = (at: number | null): string | null => (at === null ? null : new Date(at).toISOString());

export function originOf(record: SettingsRecord): OverridesOrigin {
  return {
    version: record.version,
    change: record.change,
    changedAt: iso(record.at),
    changedBy: record.by || null,
    restoredAt: iso(record.restoredAt),
    restoredBy: record.restoredBy || null,
  };
}

/** lua/restoreSettings-2.lua's arguments after the instance id. */
export function restoreArgs(known: RecordedSnapshot): string[] {
  const { version, change, at, by } = known.record;
  return [String(version), change, at === null ? '' : String(at), by, ...Object.entries(known.fields).flat()];
}
