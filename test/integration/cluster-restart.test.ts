/**
 * A master of a Redis Cluster that restarts empty (SIGKILL, started again on the same port with its nodes.conf, so it
 * serves the same slots with no data): each master holds an epoch key of its own, so the instances see the restart
 * like a single node's. The holder registers its leases again before another instance admits on the channel.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { systemClock, type Clock } from '../../packages/slotgate/src/core/clock.js';
import { LeaseManager, type LeaseEvent } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { hashSlot } from '../../packages/slotgate/src/store/redis/fencing/cluster-epochs.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { useCleanups } from '../helpers/cleanups.js';
import { answered } from '../helpers/until.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import { uniquePrefix } from '../helpers/redis.js';

const cleanups = useCleanups();

function instance(cluster: RedisCluster, prefix: string, id: string, clock: Clock = systemClock) {
  const events: LeaseEvent[] = [];
  const store = new RedisStore({
    cluster: { nodes: cluster.addresses },
    prefix,
    timeoutMs: 500,
    restartGraceMs: 1_500,
    clock,
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

    const reply = await answered(() => b.leases.acquireFirst(target, true));
    // with one epoch key for the whole cluster (on another master), b is admitted into the slots a's requests use
    expect(reply.replies).toEqual(['full']);
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
  it('an epoch made while another master refused starts its grace only when a check reaches every master', async () => {
    // A cluster coming back from an outage: the restarted master answers while another still refuses, so the first
    // checks make its new epoch there but fail as a whole. The holder's next check is held back here (its retry sleeps
    // until released), as a holder on a slower back-off would be, until after the other instance's first full check.
    const cluster = await RedisCluster.start();
    cleanups.push(() => cluster.stop());
    const prefix = uniquePrefix('cluster-partial');
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let hold = false;
    const held_back: Clock = {
      ...systemClock,
      sleep: (ms, signal) => (hold ? released : Promise.resolve()).then(() => systemClock.sleep(ms, signal)),
    };
    const a = instance(cluster, prefix, 'a', held_back);
    const b = instance(cluster, prefix, 'b');
    const admin = cluster.client();
    cleanups.push(async () => admin.disconnect());
    await admin.ping();
    const ownerOf = (key: string) => admin.slots[hashSlot(key)]![0]!;
    const serverAt = (address: string) => cluster.servers.find((s) => `127.0.0.1:${s.port}` === address)!;
    const target = [{ channelId: 'p', max: 2 }];
    const held = [
      (await a.leases.acquireFirst(target, true)).lease!,
      (await a.leases.acquireFirst(target, true)).lease!,
    ];
    expect(held.every(Boolean)).toBe(true);
    await b.store.ready();
    const restarted = serverAt(ownerOf(a.store.keys.slots('p')));
    const refusing = cluster.servers.find((s) => s !== restarted)!;

    hold = true;
    await restarted.restart();
    // While the restarted master is still refusing writes (its first 2 s), another master stops answering scripts
    // (a paused client's writes, scripts included): checks time out on it. Paused only now, so that no command for
    // the restarted master's slots was sent to it while the restarted one was down (ioredis sends those to a random
    // node, and the node's auto-pipeline would wait for that answer).
    await cluster.onNode(refusing, (c) => c.call('CLIENT', 'PAUSE', '60000', 'WRITE'));
    cleanups.push(() => cluster.onNode(refusing, (c) => c.call('CLIENT', 'UNPAUSE')).catch(() => {}));
    await cluster.waitUntilOk();
    // b's checks (its own retries) reach the restarted master, which makes the new epoch, and fail on the paused one
    let made: string | null = null;
    for (let i = 0; i < 200 && !made; i++) {
      void b.store.ready().catch(() => {});
      const [key] = await cluster.onNode(restarted, (c) => c.keys(`${prefix}:v1:epoch:*`));
      made = key ? await cluster.onNode(restarted, (c) => c.get(key)) : null;
      if (!made) await sleep(50);
    }
    expect(made).not.toBeNull();
    await sleep(2_000); // longer than the grace, while no check can reach every master
    await cluster.onNode(refusing, (c) => c.call('CLIENT', 'UNPAUSE'));

    // b's first full check: the grace starts now, and a (released) registers its leases within it
    const acquiring = answered(() => b.leases.acquireFirst(target, true));
    release();
    const reply = await acquiring;
    expect(reply.replies).toEqual(['full']);
    expect((await admin.zrange(a.store.keys.slots('p'), 0, -1)).sort()).toEqual(
      held.map((l) => l.token).sort(),
    );
    expect(a.events.filter((e) => e.type === 'leases_restored')).toHaveLength(1);
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
