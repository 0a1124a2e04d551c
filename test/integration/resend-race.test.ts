/**
 * An acquire in flight when the connection drops must not admit on a Redis that lost the holders' leases. ioredis
 * emits 'ready' before it resends the commands it had in flight, so a resent acquire runs on the empty Redis before
 * any check of the store's epoch, and before the other instances restore their leases: the store fails such an
 * acquire whatever it answered, and its lease manager gives the slot back.
 *
 * Deterministic: instance B's acquire is held in a TCP proxy (sent, unanswered) while Redis restarts empty; B then
 * reconnects to the empty Redis while A, which holds the channel's one slot, is still cut off; A comes back and
 * restores its lease. B must not be told it acquired, and the channel (max 1) ends with A's lease alone.
 */
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { LeaseManager } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { StoreUnavailableError } from '../../packages/slotgate/src/core/errors.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { useCleanups } from '../helpers/cleanups.js';
import { RedisServer } from '../helpers/redis-server.js';
import { uniquePrefix } from '../helpers/redis.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { until } from '../helpers/until.js';

const cleanups = useCleanups();
const opts = (token: string) => ({ token, leaseTtlMs: 60_000, checkCooldown: true });

async function proxied(server: RedisServer, prefix: string) {
  const proxy = new TcpProxy(server.port);
  const port = await proxy.listen();
  cleanups.push(() => proxy.close());
  // a long operation time-out: B's acquire is still waiting for its reply when ioredis would resend it
  const store = new RedisStore({
    url: `redis://127.0.0.1:${port}`,
    prefix,
    timeoutMs: 8_000,
    restartGraceMs: 1_000,
  });
  const leases = new LeaseManager({ store, instanceId: prefix, leaseTtlMs: () => 60_000 });
  cleanups.push(() => store.close());
  cleanups.push(() => leases.close(500));
  return { proxy, store, leases };
}

describe('an acquire in flight across an empty restart', () => {
  it(
    'is not resent onto the empty Redis: never two leases on a channel of max 1',
    { timeout: 60_000 },
    async () => {
      const server = await RedisServer.start();
      cleanups.push(() => server.stop());
      const prefix = uniquePrefix('resend');
      const a = await proxied(server, prefix);
      const b = await proxied(server, prefix);
      const admin = new Redis(server.url, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
      admin.on('error', () => {}); // it reconnects by itself across the restart
      cleanups.push(() => void admin.disconnect());
      const slots = `${prefix}:v1:{ch}:slots`;

      // both verified their epoch; A holds the one slot
      expect(await b.store.acquireFirst([{ channelId: 'warm', max: 1 }], opts('b:0'))).toEqual(['acquired']);
      expect(await a.store.acquireFirst([{ channelId: 'ch', max: 1 }], opts('a:1'))).toEqual(['acquired']);

      // B's acquire goes out and is held on the way: sent, never answered
      a.proxy.cut();
      b.proxy.cut();
      const bAcquire = b.leases.acquireFirst([{ channelId: 'ch', max: 1 }], true).then(
        (outcome) => outcome.replies,
        (err: Error) => err,
      );
      await new Promise((r) => setTimeout(r, 100));

      // Redis restarts empty: both connections drop; B reconnects to it, A stays cut off
      await server.restart();
      b.proxy.heal();
      await until(() => b.proxy.connections > 0, 'B reconnected');
      const settled = await bAcquire;
      // A comes back and restores its lease, as its lease manager does when its store finds the restart
      a.proxy.heal();
      await a.store.ready();
      expect(await a.store.reclaim([{ channelId: 'ch', token: 'a:1', max: 1 }], 60_000, true)).toEqual([]);

      expect(settled).toBeInstanceOf(StoreUnavailableError);
      expect((settled as Error).message).toContain('the connection dropped while it was in flight');
      // B's lease manager gives back what the resent acquire took
      await until(async () => (await admin.zrange(slots, 0, -1)).join() === 'a:1', "A's lease alone");
    },
  );
});
