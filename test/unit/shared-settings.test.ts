/**
 * Shared settings without Redis: what an instance makes of a read of the overrides and their record (take them,
 * record a change made outside, or put back what the store lost), the MemoryStore's record of its own changes, and
 * where the gateway's settings in force come from, as GET /admin/status says.
 */
import { describe, expect, it } from 'vitest';
import { MemoryStore, admissionSettings, type SettingsUpdate } from 'slotgate';
import { ManualClock } from './manual-clock.js';
import {
  decide,
  originOf,
  parseRecord,
  type RecordedSnapshot,
  type SettingsSnapshot,
} from '../../packages/slotgate/src/store/redis/fleet/settings-record.js';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { createGateway } from '../../packages/gateway/src/server.js';

const record = (version: number, digest: string, change = 'update') =>
  parseRecord({ version: String(version), change, at: '1000', by: 'gw-a', digest })!;
const snapshot = (fields: Record<string, string>, rec: ReturnType<typeof record> | null, digest: string) =>
  ({ fields, record: rec, digest }) as SettingsSnapshot;
const known = (version: number): RecordedSnapshot =>
  ({
    fields: { max_waiting_per_channel: '20' },
    record: record(version, 'd1'),
    digest: 'd1',
  }) as RecordedSnapshot;

describe('decide: what a read of the overrides and their record calls for', () => {
  it.each([
    ['a record that matches its content', 'apply', undefined, snapshot({ a: '1' }, record(1, 'd1'), 'd1')],
    ['nothing stored, nothing read before (a new store)', 'apply', undefined, snapshot({}, null, 'e')],
    [
      'overrides without a record (an older release wrote them)',
      'record',
      undefined,
      snapshot({ a: '1' }, null, 'd1'),
    ],
    [
      'a record of other content (edited by hand)',
      'record',
      known(1),
      snapshot({ a: '2' }, record(1, 'd1'), 'd2'),
    ],
    ['the hash deleted by hand, its record kept', 'record', known(1), snapshot({}, record(1, 'd1'), 'e')],
    ['no record where this instance read one (Redis lost it)', 'restore', known(3), snapshot({}, null, 'e')],
    [
      'an older record than this instance read (an old snapshot)',
      'restore',
      known(3),
      snapshot({}, record(2, 'e'), 'e'),
    ],
    ['a newer record', 'apply', known(3), snapshot({}, record(4, 'e', 'reset'), 'e')],
    ['the same version', 'apply', known(3), snapshot({ a: '1' }, record(3, 'd1'), 'd1')],
  ] as const)('%s → %s', (_what, action, before, now) => {
    expect(decide(before, now)).toBe(action);
  });

  it('reads a record as the scripts write it, and says where the overrides came from', () => {
    const r = parseRecord({
      version: '4',
      change: 'reset',
      at: '1700000000000',
      by: 'gw-a',
      digest: 'd',
      restored_at: '1700000060000',
      restored_by: 'gw-b',
    });
    expect(originOf(r!)).toEqual({
      version: 4,
      change: 'reset',
      changedAt: '2023-11-14T22:13:20.000Z',
      changedBy: 'gw-a',
      restoredAt: '2023-11-14T22:14:20.000Z',
      restoredBy: 'gw-b',
    });
    expect(parseRecord({})).toBeNull();
    expect(parseRecord({ version: 'x' })).toBeNull();
    // an external change has no instance and a time of its first sighting
    expect(
      originOf(parseRecord({ version: '2', change: 'external', at: '0', by: '', digest: 'd' })!),
    ).toMatchObject({
      change: 'external',
      changedBy: null,
    });
  });
});

describe('MemoryStore shared settings', () => {
  it('records every change of this process (version, time, instance) and is never restored', async () => {
    const clock = new ManualClock(Date.parse('2024-01-01T00:00:00Z'));
    const store = new MemoryStore({ clock });
    const seen: SettingsUpdate[] = [];
    const sync = store.sharedSettings({
      parse: admissionSettings.parse,
      instanceId: 'gw-a',
      onOverrides: (o) => seen.push(o),
    });
    await sync.start();
    expect(sync.origin).toMatchObject({ version: 0, change: null, changedAt: null, restoredAt: null });
    await sync.write({ max_waiting_per_channel: 20 });
    expect(sync.origin).toEqual({
      version: 1,
      change: 'update',
      changedAt: '2024-01-01T00:00:00.000Z',
      changedBy: 'gw-a',
      restoredAt: null,
      restoredBy: null,
    });
    await clock.advance(60_000);
    await sync.reset();
    expect(sync.origin).toMatchObject({ version: 2, change: 'reset', changedAt: '2024-01-01T00:01:00.000Z' });
    expect(seen).toEqual([{}, { max_waiting_per_channel: 20 }, {}]);
    await sync.close();
  });
});

describe('GET /admin/status: where the settings in force come from', () => {
  it('each key says default, config_file or override; the overrides say which change, when and by whom', async () => {
    const config = parseConfig(
      {
        admin: { token: 'adm-unit' },
        tokens: [{ key: 'tok-unit', name: 'unit' }],
        channels: [{ id: 'm', type: 'mock', models: ['m'], max_concurrency: 1 }],
        settings: { wait_timeout_ms: 3000, retry_times: 2 },
      },
      'unit',
    );
    const gateway = await createGateway({ config, logger: false });
    try {
      const headers = { authorization: 'Bearer adm-unit' };
      const status = async () =>
        (await gateway.app.inject({ method: 'GET', url: '/admin/status', headers })).json() as {
          instance_id: string;
          settings_source: { keys: Record<string, string>; overrides: Record<string, unknown> };
        };
      const before = await status();
      expect(before.settings_source.keys).toMatchObject({
        wait_timeout_ms: 'config_file',
        retry_times: 'config_file',
        max_waiting_per_channel: 'default',
      });
      expect(before.settings_source.overrides).toEqual({
        version: 0,
        change: null,
        changed_at: null,
        changed_by: null,
        restored_at: null,
        restored_by: null,
      });

      const put = await gateway.app.inject({
        method: 'PUT',
        url: '/admin/settings',
        headers,
        payload: { max_waiting_per_channel: 20, retry_times: 3 },
      });
      expect(put.statusCode).toBe(200);
      const after = await status();
      expect(after.settings_source.keys).toMatchObject({
        wait_timeout_ms: 'config_file',
        retry_times: 'override',
        max_waiting_per_channel: 'override',
        lease_ttl_ms: 'default',
      });
      expect(Object.keys(after.settings_source.keys).sort()).toEqual(Object.keys(gateway.settings).sort());
      expect(after.settings_source.overrides).toMatchObject({
        version: 1,
        change: 'update',
        changed_by: after.instance_id,
        restored_at: null,
      });
      expect(Date.parse(after.settings_source.overrides.changed_at as string)).not.toBeNaN();
      // GET /admin/settings says the same
      const got = await gateway.app.inject({ method: 'GET', url: '/admin/settings', headers });
      expect(got.json()).toMatchObject({ source: after.settings_source });
    } finally {
      await gateway.close();
    }
  });
});
