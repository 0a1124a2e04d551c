/**
 * A Redis that restarts empty (SIGKILL, started again on the same port with no data): every instance finds the new
 * epoch before it admits anything, the instances holding leases register them again, and nobody admits before the
 * grace is over, so a channel never gets more than its max. The same when Redis comes back with data that lacks the
 * last writes (a snapshot here; a lagging replica after a failover): another redis-server process answering makes a
 * failover epoch. And the reclaim script on its own.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { LeaseManager, type LeaseEvent } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { RedisServer } from '../helpers/redis-server.js';
import { uniquePrefix } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';
import { answered } from '../helpers/until.js';

const cleanups = useCleanups();

async function privateServer(): Promise<RedisServer> {
  const server = await RedisServer.start();
  cleanups.push(() => server.stop());
  return server;
}

function instance(server: RedisServer, prefix: string, id: string, events: LeaseEvent[] = []) {
  const store = new RedisStore({ url: server.url, prefix, timeoutMs: 500, restartGraceMs: 1_500 });
  const leases = new LeaseManager({
    store,
    instanceId: id,
    leaseTtlMs: () => 30_000, // far longer than the test: only a restore can put the leases back
    onEvent: (e) => events.push(e),
  });
  cleanups.push(() => store.close());
  cleanups.push(() => leases.close(500));
  return { store, leases, events };
}

async function members(server: RedisServer, key: string): Promise<string[]> {
  const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
  try {
    return (await admin.zrange(key, 0, -1)).sort();
  } finally {
    admin.disconnect();
  }
}

describe('Redis restarted empty', () => {
  it('the holder registers its leases again before another instance admits on the channel', async () => {
    const server = await privateServer();
    const prefix = uniquePrefix('restart');
    const a = instance(server, prefix, 'a');
    const b = instance(server, prefix, 'b');
    const target = [{ channelId: 'r', max: 2 }];
    const held = [
      (await a.leases.acquireFirst(target, true)).lease!,
      (await a.leases.acquireFirst(target, true)).lease!,
    ];
    expect(held.every(Boolean)).toBe(true);
    await b.store.ready(); // b has verified the epoch too: it will see the restart as one

    await server.restart(); // SIGKILL, then a new redis-server on the same port: no data
    // b asks first: it must not be admitted into the two slots a's requests still use
    const reply = await answered(() => b.leases.acquireFirst(target, true));
    expect(reply.replies).toEqual(['full']);
    expect(await members(server, a.store.keys.slots('r'))).toEqual(held.map((l) => l.token).sort());
    expect(a.events.filter((e) => e.type === 'leases_restored')).toEqual([
      { type: 'leases_restored', leases: 2 },
    ]);
    expect(held.map((l) => l.lost.aborted)).toEqual([false, false]);
    expect([a.store.restartsDetected, b.store.restartsDetected]).toEqual([1, 1]);

    // the restored leases are renewed and released as usual
    await a.leases.renewAll();
    expect(a.events.filter((e) => e.type === 'lease_lost')).toEqual([]);
    for (const lease of held) await a.leases.release(lease)?.done;
    expect((await b.leases.acquireFirst(target, true)).replies).toEqual(['acquired']);
  });

  it('an instance that starts on a fresh Redis creates the epoch and does not wait', async () => {
    const server = await privateServer();
    const prefix = uniquePrefix('restart');
    const a = instance(server, prefix, 'a');
    await a.store.ready();
    const admin = new Redis(server.url);
    cleanups.push(() => admin.disconnect());
    expect(await admin.get(a.store.keys.epoch())).toMatch(/^[\w-]+\|\d+\|start\|[0-9a-f]{40}$/);
    expect(a.store.restartsDetected).toBe(0);
    // a second instance joins the same epoch: nothing restored, nothing detected
    const b = instance(server, prefix, 'b');
    await b.store.ready();
    expect([b.store.restartsDetected, b.events]).toEqual([0, []]);
  });
});

describe('Redis back from a snapshot that lacks the last writes (as after a failover to a lagging replica)', () => {
  it('the new redis-server process makes a failover epoch: the lease written after the snapshot is restored before anyone admits', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'slotgate-snapshot-'));
    cleanups.push(async () => rmSync(dir, { recursive: true, force: true }));
    const server = await RedisServer.start(undefined, ['--dir', dir, '--dbfilename', 'snapshot.rdb']);
    cleanups.push(() => server.stop());
    const prefix = uniquePrefix('snapshot');
    const a = instance(server, prefix, 'a');
    const b = instance(server, prefix, 'b');
    const target = [{ channelId: 's', max: 2 }];
    const before = (await a.leases.acquireFirst(target, true)).lease!;
    await b.store.ready();
    const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
    await admin.save(); // the snapshot holds the epoch and the first lease
    admin.disconnect();
    const after = (await a.leases.acquireFirst(target, true)).lease!; // written after the snapshot: lost below
    expect([before, after].every(Boolean)).toBe(true);

    await server.restart(); // SIGKILL; the new process loads the snapshot: same epoch id, another run_id
    expect(await members(server, a.store.keys.slots('s'))).toEqual([before.token]);
    const reply = await answered(() => b.leases.acquireFirst(target, true));
    // without the failover epoch b would take the slot of the lost lease: 3 in flight on a channel of max 2
    expect(reply.replies).toEqual(['full']);
    expect(await members(server, a.store.keys.slots('s'))).toEqual([before.token, after.token].sort());
    const check = new Redis(server.url, { maxRetriesPerRequest: 1 });
    cleanups.push(async () => check.disconnect());
    expect(await check.get(a.store.keys.epoch())).toMatch(/^[\w-]+\|\d+\|failover\|[0-9a-f]{40}$/);
    expect(a.events.filter((e) => e.type === 'leases_restored')).toEqual([
      { type: 'leases_restored', leases: 2 },
    ]);
    expect([a.store.restartsDetected, b.store.restartsDetected]).toEqual([1, 1]);
  });
});

describe('the reclaim script', () => {
  it('renews a lease still there, takes a missing one back into a free slot, and restores past max', async () => {
    const server = await privateServer();
    const prefix = uniquePrefix('reclaim');
    const { store } = instance(server, prefix, 'x');
    const opts = (token: string) => ({ token, leaseTtlMs: 30_000, checkCooldown: false });
    expect(await store.acquireFirst([{ channelId: 'c', max: 2 }], opts('x:1'))).toEqual(['acquired']);
    const refs = [
      { channelId: 'c', token: 'x:1', max: 2 }, // there: renewed
      { channelId: 'c', token: 'x:2', max: 2 }, // missing, one free slot: taken back
      { channelId: 'c', token: 'x:3', max: 2 }, // missing, channel full now: not held
    ];
    expect(await store.reclaim(refs, 30_000, false)).toEqual([refs[2]]);
    expect(await members(server, store.keys.slots('c'))).toEqual(['x:1', 'x:2']);
    expect(await store.reclaim(refs, 30_000, true)).toEqual([]);
    expect(await members(server, store.keys.slots('c'))).toEqual(['x:1', 'x:2', 'x:3']);
  });
});
