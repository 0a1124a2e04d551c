/**
 * Each Lua script's header is the one place its KEYS and ARGV are documented: this test holds every header against
 * the calls the TypeScript wrappers make. The store's own code paths call every script at least once (on one node,
 * and on a single node dressed as a Cluster client for the Cluster-only ones), and each call's key and argument counts
 * must be what the header of its script documents.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { admissionSettings } from '../../packages/slotgate/src/core/settings.js';
import { fixFindings } from '../../packages/slotgate/src/store/redis/doctor/fix.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import {
  ACCESS_SCRIPT,
  SCRIPTS,
  SETTINGS_SCRIPTS,
  Script,
} from '../../packages/slotgate/src/store/redis/scripts.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';

const ALL = [
  ...Object.values(SCRIPTS),
  ...Object.values(SETTINGS_SCRIPTS),
  ACCESS_SCRIPT,
] as Script<unknown>[];
const FILES = [...new Set(ALL.map((s) => s.file))];

interface Shape {
  /** The highest position a closed entry (`[n]`, `[n..m]`) names. */
  closed: number;
  /** Whether an entry is open (`[n..]`) or a formula (`[3c-2]`, `[2k]`): the count varies per call. */
  open: boolean;
}

/** The KEYS and ARGV entries of a script's header comment. */
function headerOf(file: string): { keys: Shape; args: Shape; text: string } {
  const source = readFileSync(
    new URL(`../../packages/slotgate/src/store/redis/lua/${file}.lua`, import.meta.url),
    'utf8',
  );
  const text = /^--\[\[\n([\s\S]*?)\n\]\]/.exec(source)?.[1] ?? '';
  const shape = (name: 'KEYS' | 'ARGV'): Shape => {
    const s: Shape = { closed: 0, open: false };
    for (const [, spec] of text.matchAll(new RegExp(`^\\s+${name}\\[([^\\]]+)\\]`, 'gm'))) {
      const m = /^(\d+)(?:\.\.(\d+)?)?$/.exec(spec!);
      if (!m) s.open = true;
      else if (spec!.endsWith('..')) s.open = true;
      else s.closed = Math.max(s.closed, Number(m[2] ?? m[1]));
      if (m && spec!.endsWith('..')) s.closed = Math.max(s.closed, Number(m[1]) - 1);
    }
    return s;
  };
  return { keys: shape('KEYS'), args: shape('ARGV'), text };
}

/** Whether a call's keys and arguments are what the header documents. */
function fits(file: string, keys: number, args: number): boolean {
  const { keys: k, args: a } = headerOf(file);
  const fixedKeys = /-(\d+)$/.exec(file);
  if (fixedKeys && keys !== Number(fixedKeys[1])) return false;
  if (!k.open && !a.open && !fixedKeys) {
    // one group of keys and arguments per item (a call of several registrations)
    return keys > 0 && keys % k.closed === 0 && args === (keys / k.closed) * a.closed;
  }
  if (!k.open && keys !== k.closed) return false;
  return a.open ? args >= a.closed : args === a.closed;
}

describe('every Lua header', () => {
  it.each(FILES)('%s documents its keys, arguments, reply and cost', (file) => {
    const { keys, text } = headerOf(file);
    expect(text).toMatch(new RegExp(`^\\s+${file.replace(/-.*$/, '')}: `));
    expect(keys.closed > 0 || keys.open).toBe(true);
    expect(text).toMatch(/Returns\b/);
    expect(text).toMatch(/Cost: /);
    const fixedKeys = /-(\d+)$/.exec(file);
    if (fixedKeys) expect(keys).toEqual({ closed: Number(fixedKeys[1]), open: false });
  });
});

describe("every wrapper's calls", () => {
  const calls: { file: string; keys: number; args: number }[] = [];
  const restore: (() => void)[] = [];
  const cleanups: (() => Promise<unknown> | void)[] = [];

  beforeAll(() => {
    // (Script.queue is the pipelined form of a call; both pass the keys and the arguments apart)
    for (const method of ['send', 'queue'] as const) {
      const original = Script.prototype[method];
      Script.prototype[method] = function (
        this: Script<unknown>,
        target: unknown,
        keys: readonly string[],
        args: readonly unknown[],
      ) {
        calls.push({ file: this.file, keys: keys.length, args: args.length });
        return (original as (...a: unknown[]) => unknown).call(this, target, keys, args);
      } as never;
      restore.push(() => (Script.prototype[method] = original as never));
    }
  });

  afterAll(async () => {
    for (const r of restore) r();
    for (const c of cleanups.reverse()) await c();
  });

  it('call every script as its header documents it', async () => {
    const prefix = uniquePrefix('headers');
    const store = new RedisStore({ url: redisUrl(), prefix });
    cleanups.push(() => store.close());
    const opts = (token: string) => ({ token, leaseTtlMs: 60_000, checkCooldown: true });
    const wait = { maxWaiting: 5, ttlMs: 60_000, leaseTtlMs: 60_000 };
    // slots, a queue on each of two channels joined in one job, a poll, a move, a granting release, a give-back
    expect(await store.acquireFirst([{ channelId: 'a', max: 1 }], opts('x:1'))).toEqual(['acquired']);
    expect(await store.acquireFirst([{ channelId: 'b', max: 1 }], opts('x:2'))).toEqual(['acquired']);
    const w1 = { channelId: 'a', token: 'w:1', max: 1 };
    expect(
      await Promise.all([store.enqueue(w1, wait), store.enqueue({ ...w1, channelId: 'b' }, wait)]),
    ).toEqual(['queued', 'queued']);
    expect(await store.pollWaiter(w1, 60_000)).toBe('queued');
    const w2 = { ...w1, token: 'w:2' };
    expect(await store.requeue(w1, w2, wait)).toBe('queued');
    expect(await store.release({ channelId: 'a', token: 'x:1' }, 60_000).done).toBe(true);
    expect(await store.leaveQueue(w2, 60_000)).toBe(true);
    // leases kept and taken back; the direct reads; the load summary
    expect(await store.renew([{ channelId: 'b', token: 'x:2' }], 60_000)).toEqual([]);
    expect(await store.reclaim([{ channelId: 'b', token: 'x:2', max: 1 }], 60_000, false)).toEqual([]);
    expect((await store.readLoads(['a', 'b'])).size).toBe(2);
    expect((await store.readHolders(['b'])).get('b')).toEqual(new Map([['x', 1]]));
    expect((await store.readPeaks(['b'])).get('b')!.peak).toBe(1);
    const counts = new Map([['b', { active: 1, waiting: 0 }]]);
    await store.exchangeLoads({ instanceId: 'x', mode: 'changes', counts, keepMs: 60_000, read: ['b'] });
    // the settings overrides: read, written, and put back after the store lost them
    const admin = new Redis(redisUrl());
    cleanups.push(() => admin.quit());
    let seen = {};
    const sync = store.sharedSettings({
      parse: admissionSettings.parse,
      onOverrides: (o) => (seen = o),
      rereadMs: 50,
    });
    cleanups.push(() => sync.close());
    await sync.start();
    await sync.write({ wait_enabled: false });
    await expect.poll(() => seen, { timeout: 10_000 }).toEqual({ wait_enabled: false });
    await admin.del(store.keys.settings(), store.keys.settingsRecord());
    await expect
      .poll(() => admin.hget(store.keys.settings(), 'wait_enabled'), { timeout: 10_000 })
      .toBe('false');
    // the doctor's fixes: an expired lease, a dead owner's slot
    await admin.zadd(store.keys.slots('b'), 1, 'gone:1');
    await admin.hset(store.keys.instances(), 'x', JSON.stringify({ seen_at: new Date(0).toISOString() }));
    const score = Number(await admin.zscore(store.keys.slots('b'), 'x:2'));
    const fixed = await fixFindings(
      admin,
      [
        { key: store.keys.slots('b'), kind: 'expired_members', detail: '', members: ['gone:1'] },
        {
          key: store.keys.slots('b'),
          kind: 'dead_owner',
          detail: '',
          owner: 'x',
          channelId: 'b',
          members: ['x:2'],
          scores: [score],
        },
      ],
      prefix,
    );
    expect(fixed).toBe(2);

    // a single node dressed as a Cluster client: the epoch's grace starts once a check reached every master
    const fake = new Redis(redisUrl(), { enableAutoPipelining: false, maxRetriesPerRequest: 1 });
    cleanups.push(() => fake.disconnect());
    Object.assign(fake as unknown as Record<string, unknown>, {
      isCluster: true,
      nodes: () => [],
      slots: Array.from({ length: 16384 }, () => [`${fake.options.host}:${fake.options.port}`]),
    });
    const cluster = new RedisStore({ client: fake, prefix: uniquePrefix('headers-cluster') });
    cleanups.push(() => cluster.close());
    await cluster.ready();

    expect(new Set(calls.map((c) => c.file))).toEqual(new Set(FILES));
    const misfits = calls.filter((c) => !fits(c.file, c.keys, c.args));
    expect(misfits).toEqual([]);
  });
});
