/**
 * After a Redis restart, a store admits nothing until its restore listeners have finished, however short the grace
 * (epoch.ts awaits each listener before the check passes). The restore is held up on purpose (A's reclaim waits at a
 * gate), longer than the grace: A's own acquire, sent while the restore is held, must find the channel full of the
 * leases restored, never be admitted into an empty Redis ahead of them.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { LeaseManager } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { SlotStore } from '../../packages/slotgate/src/store/store.js';
import { useCleanups } from '../helpers/cleanups.js';
import { RedisServer } from '../helpers/redis-server.js';
import { uniquePrefix } from '../helpers/redis.js';

const cleanups = useCleanups();

/** How long the restore is held at most when nothing got through meanwhile: longer than every grace below. */
const HOLD_MS = 2_000;

/**
 * `store` with its restores (reclaims with `restore` set) held until `open()`; `held` resolves when one is waiting,
 * and `order` records when a restore was answered.
 */
function heldRestores(store: RedisStore, order: string[]) {
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  let waiting!: () => void;
  const held = new Promise<void>((resolve) => (waiting = resolve));
  const wrapped = new Proxy(store, {
    get(target, prop, receiver) {
      if (prop !== 'reclaim') return Reflect.get(target, prop, receiver) as unknown;
      return async (...args: Parameters<SlotStore['reclaim']>) => {
        if (!args[2]) return target.reclaim(...args);
        waiting();
        await gate;
        const notHeld = await target.reclaim(...args);
        order.push('restored');
        return notHeld;
      };
    },
  });
  return { store: wrapped as SlotStore, held, open };
}

describe('a restore slower than the grace', () => {
  it.each([
    { grace: 0, name: 'no grace' },
    { grace: 300, name: 'a 300 ms grace' },
  ])('nothing is admitted before the restored leases are back ($name)', async ({ grace }) => {
    const server = await RedisServer.start();
    cleanups.push(() => server.stop());
    const store = new RedisStore({
      url: server.url,
      prefix: uniquePrefix('restore-first'),
      timeoutMs: 500,
      restartGraceMs: grace,
    });
    cleanups.push(() => store.close());
    const order: string[] = [];
    const restores = heldRestores(store, order);
    const leases = new LeaseManager({ store: restores.store, instanceId: 'a', leaseTtlMs: () => 30_000 });
    cleanups.push(() => leases.close(500));
    cleanups.push(() => restores.open()); // a failed test leaves no restore waiting
    const target = [{ channelId: 'r', max: 2 }];
    const held = [
      (await leases.acquireFirst(target, true)).lease!,
      (await leases.acquireFirst(target, true)).lease!,
    ];
    expect(held.every(Boolean)).toBe(true);

    await server.restart(); // SIGKILL, then an empty redis-server on the same port
    await restores.held; // A reconnected, found the new epoch and is restoring its leases
    const reply = leases.acquireFirst(target, true).then((outcome) => {
      order.push('acquire answered');
      return outcome.replies;
    });
    // the restore is held until that acquire is answered (it went through ahead of it), or HOLD_MS at most
    await Promise.race([reply.catch(() => {}), sleep(HOLD_MS)]);
    restores.open();

    expect(await reply).toEqual(['full']);
    expect(order).toEqual(['restored', 'acquire answered']);
    const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
    cleanups.push(() => admin.disconnect());
    expect((await admin.zrange(store.keys.slots('r'), 0, -1)).sort()).toEqual(
      held.map((l) => l.token).sort(),
    );
    expect(held.map((l) => l.lost.aborted)).toEqual([false, false]);
  });
});
