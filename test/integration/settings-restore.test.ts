/**
 * Settings overrides shared through Redis when Redis restarts empty, against real redis-server processes that each
 * test owns: the instances put the overrides in force back (one of them, whichever gets there first) and none drops
 * them meanwhile; a reset, recorded with a version of its own, is never undone by a copy of the overrides of before;
 * a change made by hand or by an older release is recorded; and the restore script decides by version alone, in
 * whatever order the copies arrive.
 */
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { admissionSettings, type SettingsUpdate } from '../../packages/slotgate/src/core/settings.js';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { Script } from '../../packages/slotgate/src/store/redis/scripts.js';
import type { OverridesOrigin, SharedSettings } from '../../packages/slotgate/src/store/fleet.js';
import { RedisServer } from '../helpers/redis-server.js';
import { uniquePrefix } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
/** Generous: a busy machine may take seconds to reconnect; the assertions are on the state reached, not the time. */
const DEADLINE_MS = 20_000;
const REREAD_MS = 1000;

async function privateServer(): Promise<RedisServer> {
  const server = await RedisServer.start();
  cleanups.push(() => server.stop());
  return server;
}

function adminClient(server: RedisServer): Redis {
  const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
  admin.on('error', () => {});
  cleanups.push(() => admin.disconnect());
  return admin;
}

/** An instance following the shared settings, with everything it was told. */
interface Instance {
  id: string;
  sync: SharedSettings<SettingsUpdate>;
  /** The overrides in force: the last handed to onOverrides. */
  readonly overrides: SettingsUpdate;
  applied: SettingsUpdate[];
  restores: { overrides: SettingsUpdate; origin: OverridesOrigin }[];
}

async function instance(server: RedisServer, prefix: string, id: string): Promise<Instance> {
  const store = new RedisStore({ url: server.url, prefix, timeoutMs: 500 });
  const applied: SettingsUpdate[] = [];
  const restores: Instance['restores'] = [];
  const sync = store.sharedSettings({
    parse: admissionSettings.parse,
    instanceId: id,
    rereadMs: REREAD_MS,
    onOverrides: (o) => applied.push(o),
    onRestore: (overrides, origin) => restores.push({ overrides, origin }),
    onError: () => {}, // Redis is down for part of every test
  });
  cleanups.push(() => store.close());
  cleanups.push(() => sync.close());
  await sync.start();
  return {
    id,
    sync,
    get overrides() {
      return applied.at(-1) ?? {};
    },
    applied,
    restores,
  };
}

/** A private server, a plain client on it, and the key names of a fresh prefix; `join` starts an instance there. */
async function setup(name: string) {
  const server = await privateServer();
  const admin = adminClient(server);
  const prefix = uniquePrefix(name);
  /** Kills the server and starts an empty one on the same port (a marker key shows the data set is new). */
  const restart = async () => {
    await admin.set(`${prefix}:marker`, '1');
    await server.restart();
    expect(await admin.exists(`${prefix}:marker`)).toBe(0);
  };
  return { admin, restart, keys: new KeyBuilder(prefix), join: (id: string) => instance(server, prefix, id) };
}

async function until(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  await expect.poll(check, { timeout: DEADLINE_MS, interval: 50, message: what }).toBe(true);
}

const same = (a: object, b: object) => isDeepStrictEqual(a, b);

describe('shared settings: Redis restarts empty', () => {
  it('the instances put the overrides back within a re-read period; none drops them meanwhile', async () => {
    const { admin, restart, keys, join } = await setup('restore');
    const [a, b] = [await join('gw-a'), await join('gw-b')];

    await a.sync.write({ max_waiting_per_channel: 20, wait_timeout_ms: 1234 });
    const wanted = { max_waiting_per_channel: 20, wait_timeout_ms: 1234 };
    await until('both apply the update', () => same(a.overrides, wanted) && same(b.overrides, wanted));
    await until('both read its record', () => a.sync.origin.version === 1 && b.sync.origin.version === 1);
    expect(a.sync.origin).toMatchObject({ change: 'update', changedBy: 'gw-a', restoredAt: null });
    const appliedBefore = [a.applied.length, b.applied.length];

    await restart();

    await until('the overrides are back in Redis', async () =>
      same(await admin.hgetall(keys.settings()), { max_waiting_per_channel: '20', wait_timeout_ms: '1234' }),
    );
    await until('both instances report them restored', () =>
      [a, b].every((i) => i.sync.origin.restoredAt !== null && i.sync.origin.version === 1),
    );
    // one instance restored them; the other found them back (a version as high as its own) and left them
    const restores = [...a.restores, ...b.restores];
    expect(restores).toHaveLength(1);
    expect(restores[0]!.overrides).toEqual(wanted);
    const restorer = a.restores.length ? a : b;
    for (const i of [a, b]) {
      expect(i.sync.origin).toMatchObject({ change: 'update', changedBy: 'gw-a', restoredBy: restorer.id });
      expect(i.overrides).toEqual(wanted);
    }
    // the overrides in force never changed: nothing applied since the restart (no empty overrides in between)
    expect([a.applied.length, b.applied.length]).toEqual(appliedBefore);
    expect(await admin.hgetall(keys.settingsRecord())).toMatchObject({
      version: '1',
      change: 'update',
      by: 'gw-a',
    });
  }, 60_000);

  it('a reset is not undone: after the restart the instances put back the reset, not the overrides of before', async () => {
    const { admin, restart, keys, join } = await setup('restore-reset');
    const [a, b] = [await join('gw-a'), await join('gw-b')];

    await a.sync.write({ max_waiting_per_channel: 20 });
    await until('both apply the update', () =>
      [a, b].every((i) => i.overrides.max_waiting_per_channel === 20),
    );
    await b.sync.reset();
    await until('both apply the reset and read its record', () =>
      [a, b].every((i) => same(i.overrides, {}) && i.sync.origin.change === 'reset'),
    );
    expect(a.sync.origin).toMatchObject({ version: 2, changedBy: 'gw-b' });

    await restart();
    await until(
      'the reset is recorded again',
      async () => (await admin.hget(keys.settingsRecord(), 'change')) === 'reset',
    );
    await until('both report it restored', () => [a, b].every((i) => i.sync.origin.restoredAt !== null));
    expect(await admin.exists(keys.settings())).toBe(0);
    for (const i of [a, b]) {
      expect(i.overrides).toEqual({});
      expect(i.sync.origin).toMatchObject({ version: 2, change: 'reset', changedBy: 'gw-b' });
    }
  }, 60_000);

  it('an update sent while the store has lost the overrides builds on them', async () => {
    const { admin, restart, keys, join } = await setup('restore-update');
    const a = await join('gw-a');
    await a.sync.write({ max_waiting_per_channel: 20 });
    await until('the update is read back', () => a.sync.origin.version === 1);

    await restart();
    // whether or not the instance has put them back by now, the update lands on top of them
    // (a write that fails while the client is still reconnecting is tried again; the last failure is reported)
    await until('the update is written', async () => {
      await a.sync.write({ wait_timeout_ms: 777 });
      return true;
    });
    expect(await admin.hgetall(keys.settings())).toEqual({
      max_waiting_per_channel: '20',
      wait_timeout_ms: '777',
    });
    expect(Number(await admin.hget(keys.settingsRecord(), 'version'))).toBeGreaterThanOrEqual(2);
    await until('the instance applies both', () =>
      same(a.overrides, { max_waiting_per_channel: 20, wait_timeout_ms: 777 }),
    );
  }, 60_000);
});

describe('shared settings: changes made outside the scripts', () => {
  it('overrides written by an older release are recorded at the first read, and come back after a restart', async () => {
    const { admin, restart, keys, join } = await setup('restore-external');
    await admin.hset(keys.settings(), 'max_waiting_per_channel', '20'); // as an older release writes it: no record
    const a = await join('gw-a');
    expect(a.overrides).toEqual({ max_waiting_per_channel: 20 });
    await until('recorded as an external change', () => a.sync.origin.version === 1);
    expect(a.sync.origin).toMatchObject({ change: 'external', changedBy: null, restoredAt: null });
    expect(a.sync.origin.changedAt).not.toBeNull();

    await restart();
    await until(
      'the overrides are back',
      async () => (await admin.hget(keys.settings(), 'max_waiting_per_channel')) === '20',
    );
    expect(a.overrides).toEqual({ max_waiting_per_channel: 20 });
  }, 60_000);

  it('the overrides deleted by hand stay deleted after a restart (the documented reset)', async () => {
    const { admin, restart, keys, join } = await setup('restore-del');
    const [a, b] = [await join('gw-a'), await join('gw-b')];
    await a.sync.write({ max_waiting_per_channel: 20 });
    await until('both read the update', () => [a, b].every((i) => i.sync.origin.version === 1));

    await admin.del(keys.settings());
    await admin.publish(keys.settingsChannel(), 'reset');
    await until('both apply it and read its record', () =>
      [a, b].every((i) => same(i.overrides, {}) && i.sync.origin.version === 2),
    );
    expect(b.sync.origin.change).toBe('external');

    await restart();
    await until(
      'the record is back',
      async () => (await admin.hget(keys.settingsRecord(), 'version')) === '2',
    );
    expect(await admin.exists(keys.settings())).toBe(0);
    for (const i of [a, b]) expect(i.overrides).toEqual({});
  }, 60_000);
});

describe('settings scripts on an auto-pipelined client', () => {
  it('a read and a write sent in the same turn share one pipeline (every script is registered up front)', async () => {
    const server = await privateServer();
    const store = new RedisStore({ url: server.url, prefix: uniquePrefix('restore-pipe') });
    cleanups.push(() => store.close());
    const sync = store.sharedSettings({ parse: admissionSettings.parse, onOverrides: () => {} });
    cleanups.push(() => sync.close());
    // start() sends its read at once; the write goes out in the same turn, into the pipeline the read opened
    await Promise.all([sync.start(), sync.write({ max_waiting_per_channel: 20 })]);
    await expect.poll(() => sync.origin.version, { timeout: DEADLINE_MS }).toBe(1);
  });
});

describe('restoreSettings script', () => {
  const restore = new Script('restoreSettings-2', Number);

  it('the highest version wins, in whatever order the copies arrive', async () => {
    const server = await privateServer();
    const admin = adminClient(server);
    for (const order of [
      ['old', 'reset'],
      ['reset', 'old'],
    ]) {
      const keys = new KeyBuilder(uniquePrefix('restore-order'));
      const k = [keys.settings(), keys.settingsRecord()];
      const copies: Record<string, (string | number)[]> = {
        old: ['gw-b', 3, 'update', 1000, 'gw-a', 'max_waiting_per_channel', '20'], // read before the reset
        reset: ['gw-c', 4, 'reset', 2000, 'gw-a'],
      };
      const replies = [];
      for (const name of order)
        replies.push(await restore.call(admin, k, [keys.settingsChannel(), ...copies[name]!]));
      expect(replies[0]).toBeGreaterThan(0);
      expect(replies[1] !== 0).toBe(order[1] === 'reset'); // a lower version arriving second changes nothing
      expect(await admin.exists(keys.settings())).toBe(0);
      expect(await admin.hgetall(keys.settingsRecord())).toMatchObject({
        version: '4',
        change: 'reset',
        at: '2000',
        by: 'gw-a',
        restored_by: 'gw-c',
      });
    }
  });
});

describe('settings keys on Redis Cluster', () => {
  it('the record carries the overrides key as its hash tag: one slot, so one script may write both', () => {
    const keys = new KeyBuilder('slotgate');
    const record = keys.settingsRecord();
    expect(record.startsWith('slotgate:v1:')).toBe(true);
    expect(record.slice(record.indexOf('{') + 1, record.indexOf('}'))).toBe(keys.settings());
    expect(keys.settings()).not.toMatch(/[{}]/);
    expect(keys.parse(record)).toEqual({ kind: 'settings' });
  });
});
