/**
 * Lease lifetime against real Redis: renewal keeps a lease well past its TTL, and the leases of a holder that dies
 * without releasing (a child process killed with SIGKILL) are gone within one lease TTL.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { LeaseManager, type LeaseEvent } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';

const HOLDER = fileURLToPath(new URL('../helpers/lease-holder.ts', import.meta.url));
const ROOT = fileURLToPath(new URL('../..', import.meta.url));

const cleanups = useCleanups();

function makeStore(): RedisStore {
  const store = new RedisStore({ url: redisUrl(), prefix: uniquePrefix('lease') });
  cleanups.push(async () => {
    const admin = new Redis(redisUrl());
    const keys = await admin.keys(store.keys.pattern());
    if (keys.length) await admin.del(...keys);
    admin.disconnect();
    await store.close();
  });
  return store;
}

async function active(store: RedisStore, channelId: string): Promise<number> {
  return (await store.readLoads([channelId])).get(channelId)!.active;
}

describe('lease renewal and expiry', () => {
  it('renewal every TTL / 3 keeps a lease alive well past its TTL', async () => {
    const store = makeStore();
    const events: LeaseEvent[] = [];
    const leases = new LeaseManager({ store, leaseTtlMs: () => 300, onEvent: (e) => events.push(e) });
    cleanups.push(() => leases.close());
    const outcome = await leases.acquireFirst([{ channelId: 'long', max: 1 }], true);
    expect(outcome.replies).toEqual(['acquired']);

    await sleep(1_200); // four TTLs
    expect(await active(store, 'long')).toBe(1);
    expect(
      await store.acquireFirst([{ channelId: 'long', max: 1 }], {
        token: 'competitor:1',
        leaseTtlMs: 300,
        checkCooldown: true,
      }),
    ).toEqual(['full']);
    expect(events).toEqual([]);
    expect(leases.size).toBe(1);
    // a lease lives 300 ms per renewal, so it cannot have survived 1.2 s on fewer than three
    expect(store.commands.renew).toBeGreaterThanOrEqual(3);

    await leases.release(outcome.lease!);
    expect(await active(store, 'long')).toBe(0);
  });

  it('renews 120 leases over several channels in batched calls and keeps all of them', async () => {
    const store = makeStore();
    const events: LeaseEvent[] = [];
    const leases = new LeaseManager({ store, leaseTtlMs: () => 600, onEvent: (e) => events.push(e) });
    cleanups.push(() => leases.close());
    const channels = ['b0', 'b1', 'b2', 'b3'];
    for (let i = 0; i < 120; i++) {
      const outcome = await leases.acquireFirst([{ channelId: channels[i % 4]!, max: 30 }], true);
      expect(outcome.lease).toBeDefined();
    }
    const renewsBefore = store.commands.renew;
    await sleep(1_500);
    const loads = await store.readLoads(channels);
    expect(channels.map((c) => loads.get(c)!.active)).toEqual([30, 30, 30, 30]);
    expect(events).toEqual([]);
    // every tick renews all 120 leases in ceil(120 / 50) = 3 script calls, never one per lease
    const renews = store.commands.renew - renewsBefore;
    expect(renews).toBeGreaterThanOrEqual(3);
    expect(renews % 3).toBe(0);
  });

  it('leases removed behind their holder are taken back while there is room, else lost (their signal fires)', async () => {
    const store = makeStore();
    const events: LeaseEvent[] = [];
    const leases = new LeaseManager({ store, leaseTtlMs: () => 300, onEvent: (e) => events.push(e) });
    cleanups.push(() => leases.close());
    const kept = (await leases.acquireFirst([{ channelId: 'lost', max: 2 }], true)).lease!;
    const gone = (await leases.acquireFirst([{ channelId: 'lost', max: 2 }], true)).lease!;
    // e.g. an operator deleted both, and another instance took one of the two places
    expect(await store.release(kept, 60_000).done).toBe(true);
    expect(await store.release(gone, 60_000).done).toBe(true);
    const other = { token: 'other:1', leaseTtlMs: 60_000, checkCooldown: true };
    expect(await store.acquireFirst([{ channelId: 'lost', max: 2 }], other)).toEqual(['acquired']);
    const deadline = Date.now() + 3_000;
    while (!events.some((e) => e.type === 'lease_lost') && Date.now() < deadline) await sleep(20);
    expect(events).toEqual([
      { type: 'lease_reclaimed', channelId: 'lost', token: kept.token },
      { type: 'lease_lost', channelId: 'lost', token: gone.token, reason: 'missing' },
    ]);
    expect([kept.lost.aborted, gone.lost.aborted]).toEqual([false, true]);
    expect([...leases.leases()].map((l) => l.token)).toEqual([kept.token]);
    expect(leases.localCount('lost')).toBe(1);
    expect(await active(store, 'lost')).toBe(2);
  });

  describe('a holder process killed with SIGKILL', () => {
    let child: ChildProcess | undefined;
    afterEach(() => {
      if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      child = undefined;
    });

    it('loses its leases within one lease TTL', async () => {
      const store = makeStore();
      const prefix = store.keys.base.slice(0, -':v1'.length);
      const ttl = 1_000;
      const count = 3;
      child = spawn(
        process.execPath,
        ['--import', 'tsx', HOLDER, redisUrl(), prefix, 'held', String(ttl), String(count)],
        { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let stderr = '';
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      let stdout = '';
      const ready = new Promise<void>((resolve, reject) => {
        child!.stdout!.on('data', (d: Buffer) => {
          stdout += d.toString();
          if (stdout.includes('ready')) resolve();
        });
        child!.once('exit', (code) => reject(new Error(`holder exited early (${code}): ${stderr}`)));
      });
      await ready;

      expect(await active(store, 'held')).toBe(count);
      // its renewal works: still held after more than one TTL
      await sleep(ttl * 1.5);
      expect(await active(store, 'held')).toBe(count);
      expect(stderr).toBe(''); // no lease_lost / renew_failed events

      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
      const killedAt = Date.now();
      // not released: the leases are still there right after the crash
      expect(await active(store, 'held')).toBe(count);

      let goneAt = 0;
      while (Date.now() - killedAt < ttl * 3) {
        if ((await active(store, 'held')) === 0) {
          goneAt = Date.now();
          break;
        }
        await sleep(20);
      }
      expect(goneAt).toBeGreaterThan(0);
      expect(goneAt - killedAt).toBeLessThanOrEqual(ttl + 500);
      // and the channel leaves no key behind (its expiry followed the newest lease)
      const admin = new Redis(redisUrl());
      try {
        let exists = 1;
        const deadline = Date.now() + 1_000;
        while ((exists = await admin.exists(store.keys.slots('held'))) === 1 && Date.now() < deadline) {
          await sleep(20);
        }
        expect(exists).toBe(0);
      } finally {
        admin.disconnect();
      }
      // a new holder can take all the places again
      for (let i = 0; i < count; i++) {
        expect(
          await store.acquireFirst([{ channelId: 'held', max: count }], {
            token: `next:${i}`,
            leaseTtlMs: 60_000,
            checkCooldown: true,
          }),
        ).toEqual(['acquired']);
      }
    });
  });
});
