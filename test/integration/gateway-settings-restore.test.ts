/**
 * Two gateways on a private redis-server that restarts empty: an override made through the admin API is back in
 * force on both within the re-read period, GET /admin/status says where every setting comes from and that the
 * overrides were restored (and by whom), the restoring gateway logs it; and the documented reset (deleting the
 * overrides hash) is not undone by either gateway after the next restart.
 */
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import {
  ADMIN,
  LOG_LINES,
  call,
  configDoc,
  expectNoSecretsLogged,
  startGateway,
  type TestGateway,
} from '../helpers/gateway.js';
import { RedisServer } from '../helpers/redis-server.js';
import { uniquePrefix } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

/** Generous: on a busy machine the reconnect alone may take seconds; the assertions are on the state reached. */
const DEADLINE_MS = 30_000;

interface Status {
  instance_id: string;
  settings_overrides: Record<string, unknown>;
  settings_source: { keys: Record<string, string>; overrides: Record<string, unknown> };
}

async function status(gw: TestGateway): Promise<Status> {
  const res = await call(`${gw.url}/admin/status`, { headers: ADMIN });
  expect(res.status).toBe(200);
  return res.json() as Status;
}

async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  await expect.poll(check, { timeout: DEADLINE_MS, interval: 100, message: what }).toBe(true);
}

describe('gateway settings overrides when Redis restarts empty', () => {
  it('come back on every instance, reported as restored; a later reset by an operator stays a reset', async () => {
    const server = await RedisServer.start();
    cleanups.push(() => server.stop());
    const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
    admin.on('error', () => {});
    cleanups.push(() => admin.disconnect());
    const prefix = uniquePrefix('gw-restore');
    const keys = new KeyBuilder(prefix);
    const doc = configDoc({
      redis: server.url,
      prefix,
      channels: [{ id: 'm', type: 'mock', models: ['m'], max_concurrency: 1 }],
      settings: { wait_timeout_ms: 3000 },
    });
    const a = await startGateway(doc);
    cleanups.push(() => a.close());
    const b = await startGateway(doc);
    cleanups.push(() => b.close());
    const both = [a, b];
    /** Kills Redis and starts an empty one on the same port (a marker key shows the data set is new). */
    const restart = async () => {
      await admin.set(`${prefix}:marker`, '1');
      await server.restart();
      expect(await admin.exists(`${prefix}:marker`)).toBe(0);
    };

    const put = await call(`${a.url}/admin/settings`, {
      method: 'PUT',
      headers: ADMIN,
      body: { max_waiting_per_channel: 20 },
    });
    expect(put.status).toBe(200);
    await until('both apply the override', () =>
      both.every((gw) => gw.gateway.settings.max_waiting_per_channel === 20),
    );
    const writer = (await status(a)).instance_id;
    await until('both read its record', async () =>
      (await Promise.all(both.map(status))).every((s) => s.settings_source.overrides.version === 1),
    );

    await restart(); // the overrides hash and its record are gone with the rest
    await until('both report the overrides restored', async () =>
      (await Promise.all(both.map(status))).every((s) => s.settings_source.overrides.restored_at !== null),
    );
    for (const gw of both) {
      expect(gw.gateway.settings.max_waiting_per_channel).toBe(20);
      expect(gw.gateway.admission.settings.max_waiting_per_channel).toBe(20);
      const s = await status(gw);
      expect(s.settings_overrides).toEqual({ max_waiting_per_channel: 20 });
      expect(s.settings_source.keys).toMatchObject({
        max_waiting_per_channel: 'override',
        wait_timeout_ms: 'config_file',
        retry_times: 'default',
      });
      expect(s.settings_source.overrides).toMatchObject({ version: 1, change: 'update', changed_by: writer });
      expect([(await status(a)).instance_id, (await status(b)).instance_id]).toContain(
        s.settings_source.overrides.restored_by,
      );
    }
    expect(await admin.hgetall(keys.settings())).toEqual({ max_waiting_per_channel: '20' });
    const restoredLines = LOG_LINES.filter((l) => l.includes('"event":"settings_restored"'));
    expect(restoredLines.length).toBeGreaterThanOrEqual(1);
    expect(restoredLines.at(-1)).toContain('"max_waiting_per_channel":20');

    // The documented reset: delete the hash (and announce it). It is recorded, so the next restart keeps it.
    await admin.del(keys.settings());
    await admin.publish(keys.settingsChannel(), 'reset');
    await until('both are back on the configured values', () =>
      both.every((gw) => gw.gateway.settings.max_waiting_per_channel === 0),
    );
    await until('both read the reset record', async () =>
      (await Promise.all(both.map(status))).every((s) => s.settings_source.overrides.version === 2),
    );
    await restart();
    await until(
      'the reset record is back',
      async () => (await admin.hget(keys.settingsRecord(), 'version')) === '2',
    );
    await until('both report it restored', async () =>
      (await Promise.all(both.map(status))).every((s) => s.settings_source.overrides.restored_at !== null),
    );
    expect(await admin.exists(keys.settings())).toBe(0);
    for (const gw of both) {
      expect(gw.gateway.settings.max_waiting_per_channel).toBe(0);
      const s = await status(gw);
      expect(s.settings_overrides).toEqual({});
      expect(s.settings_source.keys.max_waiting_per_channel).toBe('default');
      expect(s.settings_source.overrides).toMatchObject({ version: 2, change: 'external', changed_by: null });
    }
  }, 120_000);
});
