/**
 * Grants on Redis Cluster: the release script PUBLISHes the grant (classic pub/sub, which the cluster bus carries to
 * every node), and each instance's subscriber is connected to one node of its own choosing. Here the waiter's
 * instance listens on one master while its channel's keys live on each of the three in turn, and the release comes
 * from another instance: the grant must arrive as a message, not through the waiter's safety poll.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import type { Admission } from '../../packages/slotgate/src/admission/types.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { useCleanups } from '../helpers/cleanups.js';
import { clearCluster, clusterClient, clusterNodes, uniquePrefix } from '../helpers/redis.js';

const cleanups = useCleanups();
const prefix = uniquePrefix('grants');

function instance(): { store: RedisStore; admission: Admission } {
  const store = new RedisStore({ cluster: { nodes: clusterNodes() }, prefix });
  // safety polls 5–10 s apart (50 × wait_interval_ms, jittered): a grant seen before one is a message
  const admission = createAdmission({
    store,
    settings: { wait_timeout_ms: 20_000, safety_poll_ms: 10_000, max_waiting_per_channel: 5 },
  });
  cleanups.push(async () => {
    await admission.close();
    await store.close();
  });
  return { store, admission };
}

describe('grants across the nodes of a Redis Cluster', () => {
  const admin = clusterClient();
  afterAll(async () => {
    admin.disconnect();
    await clearCluster(`${prefix}:*`);
  });

  /** `host:port` of the master serving `key`. */
  async function masterOf(key: string): Promise<string> {
    const slot = Number(await admin.cluster('KEYSLOT', key));
    const ranges = await admin.cluster('SLOTS');
    const range = ranges.find(([start, end]) => slot >= start && slot <= end)!;
    return `${range[2]![0]}:${range[2]![1]}`;
  }

  /** `host:port` of the masters with a subscriber on `channel` (PUBSUB NUMSUB counts a node's own clients). */
  async function subscribedAt(channel: string): Promise<string[]> {
    await admin.ping();
    const found: string[] = [];
    for (const node of admin.nodes('master')) {
      const [, count] = (await node.pubsub('NUMSUB', channel)) as [string, number];
      if (Number(count) > 0) found.push(`${node.options.host}:${node.options.port}`);
    }
    return found;
  }

  it('a waiter on one instance is granted by a release on another, whichever master holds the channel', async () => {
    const x = instance();
    const y = instance();
    const grants = x.store.keys.grants(x.admission.instanceId);

    // one channel on each master
    const masters = new Set(
      await Promise.all(admin.nodes('master').map((n) => `${n.options.host}:${n.options.port}`)),
    );
    const channelOn = new Map<string, string>();
    for (let i = 0; channelOn.size < masters.size; i++) {
      if (i > 10_000) throw new Error(`no channel found on every master: ${[...channelOn]}`);
      const master = await masterOf(x.store.keys.slots(`c${i}`));
      if (!channelOn.has(master)) channelOn.set(master, `c${i}`);
    }

    let subscriber: string[] = [];
    for (const [master, id] of channelOn) {
      const one = [{ id, maxConcurrency: 1 }];
      const held = await y.admission.acquire({ candidates: one });
      const waitCommands = x.store.commands.wait;
      const waiting = x.admission.acquire({ candidates: one });
      await expect.poll(() => x.admission.stats().channels[id]?.waiting ?? 0).toBeGreaterThan(0);
      // the subscription is made when the instance first waits; it stays on one node
      await expect.poll(() => subscribedAt(grants)).toHaveLength(1);
      subscriber = await subscribedAt(grants);
      await held.release();
      const ticket = await waiting;
      expect(ticket.channel.id).toBe(id);
      // one registration and no safety poll: the grant came as a message
      expect(x.store.commands.wait - waitCommands, `${id} on ${master}`).toBe(1);
      await ticket.release();
    }
    // the channels on the other two masters were granted through a node that does not hold their keys
    expect([...channelOn.keys()].filter((m) => !subscriber.includes(m))).toHaveLength(masters.size - 1);
    expect(x.admission.stats().grants).toBe(masters.size);
  });

  it("registrations of one job go out together, each standing as of its request's arrival when they go out", async () => {
    const { store } = instance();
    const id = 'lead-at-send';
    const waiter = (token: string) => ({ channelId: id, token, max: 1 });
    const opts = { maxWaiting: 5, ttlMs: 60_000, leaseTtlMs: 60_000 };
    expect(
      await store.acquireFirst([{ channelId: id, max: 1 }], {
        token: 'cl:h',
        leaseTtlMs: 60_000,
        checkCooldown: true,
      }),
    ).toEqual(['acquired']);
    const calls = store.commands.wait;
    // as on one node (test/integration/redis-store.test.ts): 'cl:1' arrives at t; 5 ms later in the same job 'cl:2'
    // registers, having arrived at t + 3, and 'cl:3', having arrived at t - 25
    const first = store.enqueue(waiter('cl:1'), opts);
    const until = performance.now() + 5;
    while (performance.now() < until) {
      // the job goes on
    }
    const second = store.enqueue(waiter('cl:2'), { ...opts, arrivedMsAgo: 2 });
    const third = store.enqueue(waiter('cl:3'), { ...opts, arrivedMsAgo: 30 });
    expect(await Promise.all([first, second, third])).toEqual(['queued', 'queued', 'queued']);
    expect(store.commands.wait - calls).toBe(3); // one call each on Cluster
    const members = await admin.zrange(store.keys.queue(id), 0, -1);
    expect(members.map((m) => m.slice(m.lastIndexOf('|') + 1))).toEqual(['cl:3', 'cl:1', 'cl:2']);
    for (const t of ['cl:1', 'cl:2', 'cl:3']) await store.leaveQueue(waiter(t), 60_000);
    expect(await store.release({ channelId: id, token: 'cl:h' }, 60_000).done).toBe(true);
  });
});
