/**
 * The Sentinel form of resend-race.test.ts: an acquire in flight when the primary fails over must not admit on the
 * promoted replica before the holders restored the leases it lacks (replication is asynchronous: the last leases
 * written on the old primary may be missing there). ioredis sends the acquire again on its new connection, to the
 * new primary, before any epoch check.
 *
 * Deterministic: every instance reaches each data node through a TCP proxy of its own (ioredis's `natMap`). A, which
 * holds the one slot of a max-1 channel, is cut off from both nodes; the replica loses A's lease, as a write not yet
 * replicated would be lost. B's acquire is held on its way to the primary, then B's connection drops and it can reach
 * the primary no more, so the only Redis it can send the acquire again to is the replica once it is promoted. A comes
 * back after B's acquire settled and restores its lease. B must not be told it acquired, and the channel ends with
 * A's lease alone.
 */
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { LeaseManager } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { StoreUnavailableError } from '../../packages/slotgate/src/core/errors.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { useCleanups } from '../helpers/cleanups.js';
import { RedisSentinelSet } from '../helpers/redis-sentinel.js';
import { uniquePrefix } from '../helpers/redis.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { until } from '../helpers/until.js';

const cleanups = useCleanups();
const opts = (token: string) => ({ token, leaseTtlMs: 60_000, checkCooldown: true });

/** An instance whose connections to the primary and to the replica each go through a proxy of its own. */
async function instance(set: RedisSentinelSet, prefix: string) {
  const toPrimary = new TcpProxy(set.primary.port);
  const toReplica = new TcpProxy(set.replica.port);
  const natMap = {
    [`127.0.0.1:${set.primary.port}`]: { host: '127.0.0.1', port: await toPrimary.listen() },
    [`127.0.0.1:${set.replica.port}`]: { host: '127.0.0.1', port: await toReplica.listen() },
  };
  cleanups.push(() => toPrimary.close());
  cleanups.push(() => toReplica.close());
  // time-outs longer than the failover: B's acquire is still waiting for its reply when ioredis sends it again
  const store = new RedisStore({
    sentinel: { sentinels: set.addresses, name: set.name },
    redisOptions: { natMap },
    prefix,
    timeoutMs: 20_000,
    restartGraceMs: 1_000,
  });
  const leases = new LeaseManager({ store, instanceId: prefix, leaseTtlMs: () => 60_000 });
  cleanups.push(() => store.close());
  cleanups.push(() => leases.close(500));
  return { toPrimary, toReplica, store, leases };
}

describe('an acquire in flight across a Sentinel failover', () => {
  it(
    'is not sent again onto the promoted replica before the holders restore: never two leases on max 1',
    { timeout: 90_000 },
    async () => {
      const set = await RedisSentinelSet.start();
      cleanups.push(() => set.stop());
      const prefix = uniquePrefix('resend-sentinel');
      const a = await instance(set, prefix);
      const b = await instance(set, prefix);
      const replica = new Redis(set.replica.url, { maxRetriesPerRequest: 1 });
      replica.on('error', () => {});
      cleanups.push(() => void replica.disconnect());
      const slots = `${prefix}:v1:{ch}:slots`;

      // both verified their epoch on the primary; A holds the one slot, and the replica has it
      expect(await b.store.acquireFirst([{ channelId: 'warm', max: 1 }], opts('b:0'))).toEqual(['acquired']);
      expect(await a.store.acquireFirst([{ channelId: 'ch', max: 1 }], opts('a:1'))).toEqual(['acquired']);
      await until(async () => (await replica.zrange(slots, 0, -1)).join() === 'a:1', 'A replicated');

      // A is cut off from both nodes, and the replica loses A's lease (a write not yet replicated)
      await a.toPrimary.close();
      a.toReplica.cut();
      await replica.config('SET', 'replica-read-only', 'no');
      const lost = await replica.keys(`${prefix}:v1:{ch}*`);
      expect(lost.length).toBeGreaterThan(0);
      await replica.del(...lost);

      // B's acquire goes out and is held on the way
      b.toPrimary.cut();
      const bAcquire = b.leases.acquireFirst([{ channelId: 'ch', max: 1 }], true).then(
        (outcome) => outcome.replies,
        (err: Error) => err,
      );
      await new Promise((r) => setTimeout(r, 100));

      // the replica is promoted; then B's connection to the old primary drops, and B's first reconnection reaches
      // the new primary (every sentinel names it) while A is still cut off
      await set.failover();
      expect(b.toPrimary.connections).toBe(1);
      await b.toPrimary.close();
      await until(() => b.toReplica.connections > 0, 'B on the new primary');
      const settled = await bAcquire;
      a.toReplica.heal();
      // A restores its lease, as its lease manager does when its store finds the failover
      await a.store.ready();
      expect(await a.store.reclaim([{ channelId: 'ch', token: 'a:1', max: 1 }], 60_000, true)).toEqual([]);

      expect(settled).toBeInstanceOf(StoreUnavailableError);
      expect((settled as Error).message).toContain('the connection dropped while it was in flight');
      // B's lease manager gives back what the acquire sent again took
      await until(async () => (await replica.zrange(slots, 0, -1)).join() === 'a:1', "A's lease alone");
    },
  );
});
