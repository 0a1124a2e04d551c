/**
 * A master of a Redis Cluster that restarts empty (SIGKILL, started again on the same port with its nodes.conf, so it
 * serves the same slots with no data): each master holds an epoch key of its own, so the instances see the restart
 * like a single node's. The holder registers its leases again before another instance admits on the channel.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { LeaseManager, type LeaseEvent } from '../../packages/slotgate/src/store/leases.js';
import { hashSlot } from '../../packages/slotgate/src/store/redis/cluster-epochs.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { useCleanups } from '../helpers/cleanups.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import { uniquePrefix } from '../helpers/redis.js';

const cleanups = useCleanups();

function instance(cluster: RedisCluster, prefix: string, id: string, events: LeaseEvent[] = []) {
  const store = new RedisStore({
    cluster: { nodes: cluster.addresses },
    prefix,
    timeoutMs: 500,
    restartGraceMs: 1_500,
  });
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

describe('a Redis Cluster master restarted empty', () => {
  it('its epoch key is gone: the holder registers its leases again before another instance admits', async () => {
    const cluster = await RedisCluster.start();
    cleanups.push(() => cluster.stop());
    const prefix = uniquePrefix('cluster-restart');
    const a = instance(cluster, prefix, 'a');
    const b = instance(cluster, prefix, 'b');
    const admin = cluster.client();
    cleanups.push(async () => admin.disconnect());
    await admin.ping();
    const ownerOf = (key: string) => admin.slots[hashSlot(key)]![0]!;
    // a channel on another master than the one that would hold a single, fleet-wide epoch key
    let channelId = 'r';
    for (let n = 0; ownerOf(a.store.keys.slots(channelId)) === ownerOf(a.store.keys.epoch()); n++) {
      channelId = `r${n}`;
    }
    const target = [{ channelId, max: 2 }];
    const held = [
      (await a.leases.acquireFirst(target, true)).lease!,
      (await a.leases.acquireFirst(target, true)).lease!,
    ];
    expect(held.every(Boolean)).toBe(true);
    await b.store.ready();

    // the master serving the channel's slot, found on the cluster's own slot map
    const owner = ownerOf(a.store.keys.slots(channelId));
    const server = cluster.servers.find((s) => `127.0.0.1:${s.port}` === owner)!;
    expect(server).toBeDefined();
    await server.restart();
    await cluster.waitUntilOk();

    let reply;
    for (let i = 0; i < 200 && !reply; i++) {
      reply = await b.leases.acquireFirst(target, true).catch(() => undefined);
      if (!reply) await sleep(50);
    }
    // with one epoch key for the whole cluster (on another master), b is admitted into the slots a's requests use
    expect(reply?.replies).toEqual(['full']);
    expect((await admin.zrange(a.store.keys.slots(channelId), 0, -1)).sort()).toEqual(
      held.map((l) => l.token).sort(),
    );
    expect(a.events.filter((e) => e.type === 'leases_restored').length).toBeGreaterThanOrEqual(1);
    expect(held.map((l) => l.lost.aborted)).toEqual([false, false]);
    expect(a.store.restartsDetected).toBeGreaterThanOrEqual(1);
    expect(b.store.restartsDetected).toBeGreaterThanOrEqual(1);

    // a master that is down for longer: the store's node list keeps reporting it down while it owns slots
    await server.stop();
    // while it is down, the store's node list reports it down (it still owns its slots), not missing
    let down: { address: string; healthy: boolean } | undefined;
    for (let i = 0; i < 100 && !down; i++) {
      down = (await a.store.nodes()).find((n) => n.address === owner && !n.healthy);
      if (!down) await sleep(50);
    }
    expect(down).toBeDefined();
    // and keeps reporting it after the client dropped its connection from the node list (after about 2 s)
    for (let i = 0; i < 30; i++) {
      await sleep(100);
      const listed = (await a.store.nodes()).find((n) => n.address === owner);
      expect(listed?.healthy, `read ${i}`).toBe(false);
    }
  });
});

describe('the grants subscription on a Redis Cluster', () => {
  it('when the node it lives on restarts, it subscribes again on a node and tells the waiters to resync', async () => {
    const cluster = await RedisCluster.start();
    cleanups.push(() => cluster.stop());
    const store = new RedisStore({
      cluster: { nodes: cluster.addresses },
      prefix: uniquePrefix('cluster-sub'),
    });
    cleanups.push(() => store.close());
    let resyncs = 0;
    const listening = store.listen('w', { grant: () => {}, queued: () => {}, resync: () => void resyncs++ });
    cleanups.push(() => listening.stop());
    await listening.ready;
    // the node holding the subscription: the one with a pub/sub client
    const subscribed = async () => {
      const lists = await Promise.all(
        cluster.servers.map((s) =>
          cluster
            .onNode(s, (c) => c.call('CLIENT', 'LIST', 'TYPE', 'pubsub') as Promise<string>)
            .catch(() => ''),
        ),
      );
      return cluster.servers.filter((_, i) => lists[i]!.trim() !== '');
    };
    const [node] = await subscribed();
    expect(node).toBeDefined();
    await node!.restart();
    await cluster.waitUntilOk();
    for (let i = 0; i < 200 && (resyncs === 0 || (await subscribed()).length === 0); i++) await sleep(50);
    expect(resyncs).toBeGreaterThan(0);
    expect(await subscribed()).toHaveLength(1);
  });
});
