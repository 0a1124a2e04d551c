/**
 * A `slotgate serve` process configured with `redis.cluster` (one seed node of the shared test cluster): a stream on
 * a bounded channel holds its slot in the cluster while it runs and gives it back when the client goes away; the
 * admin status reports the Redis store healthy.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { StoreUnavailableError } from '../../packages/slotgate/src/core/errors.js';
import { useCleanups } from '../helpers/cleanups.js';
import { ADMIN, CLIENT, SECRETS, call, chat, eventually, streamingCall } from '../helpers/gateway.js';
import { killAllGateways, runCli, spawnGateway, tempDir, writeConfig } from '../helpers/gw-gateway.js';
import { clearCluster, clusterClient, clusterNodes, redisUrl, uniquePrefix } from '../helpers/redis.js';

const cleanups = useCleanups();
afterEach(killAllGateways);

describe('a gateway process on a Redis Cluster', () => {
  it('serves a bounded channel with its slot held in the cluster', async () => {
    const prefix = uniquePrefix('gw-cluster');
    cleanups.push(() => clearCluster(`${prefix}:*`));
    const dir = await tempDir();
    cleanups.push(() => dir.remove());
    const path = await writeConfig(dir.dir, 'cluster.yaml', {
      server: { host: '127.0.0.1' },
      redis: { cluster: { nodes: [clusterNodes()[2]], slots_refresh_timeout_ms: 5000 }, prefix },
      admin: { token: SECRETS.adminToken },
      tokens: [{ key: SECRETS.clientToken, name: 'tester' }],
      channels: [
        {
          id: 'bounded',
          type: 'mock',
          models: ['gpt-x'],
          max_concurrency: 1,
          // a stream of 100 × 100 ms: it is still running when the test looks, and the test ends it
          mock: { latency_ms: 0, chunks: 100, chunk_delay_ms: 100 },
        },
      ],
    });
    const gw = await spawnGateway({ configPath: path });
    await gw.ready;

    const redis = clusterClient();
    cleanups.push(() => void redis.disconnect());
    const slots = new KeyBuilder(prefix).slots('bounded');
    const stream = streamingCall(`${gw.url}/v1/chat/completions`, chat('gpt-x', { stream: true }), CLIENT);
    expect(await stream.status).toBe(200);
    await stream.firstChunk;
    expect(await redis.zcard(slots)).toBe(1);

    stream.destroy();
    expect(await eventually(async () => (await redis.zcard(slots)) === 0, 15_000)).toBe(true);

    const status = await call(`${gw.url}/admin/status`, { headers: ADMIN });
    expect(status.status, status.text).toBe(200);
    expect(status.json()).toMatchObject({ store: 'redis', redis: { healthy: true } });
    expect(gw.output()).not.toContain(SECRETS.clientToken);
  });

  it('a URL at a Cluster node, or a Cluster at a plain node, fails at start: one line naming the right option, exit 2', async () => {
    const wrongWay = await runCli(['serve', '--redis', `redis://${clusterNodes()[0]}`, '--port', '0']);
    expect(wrongWay.code, wrongWay.stderr).toBe(2);
    expect(wrongWay.stderr.trimEnd().split('\n')).toEqual([
      `slotgate serve: ${clusterNodes()[0]} is a Redis Cluster node: connect to it as a Cluster (the gateway: --cluster or redis.cluster), not as a single node`,
    ]);
    const plain = new URL(redisUrl()).host;
    const otherWay = await runCli(['serve', '--cluster', plain, '--port', '0']);
    expect(otherWay.code, otherWay.stderr).toBe(2);
    expect(otherWay.stderr.trimEnd().split('\n')).toEqual([
      `slotgate serve: ${plain} is not a Redis Cluster node (cluster support disabled): connect to it as a single node (the gateway: --redis or redis.url) or through Sentinel`,
    ]);
  });

  it('a library store given a URL of a Cluster node fails its acquires naming the mistake, not with MOVED', async () => {
    const prefix = uniquePrefix('wrong-topology');
    const redis = clusterClient();
    cleanups.push(() => void redis.disconnect());
    const epochKey = new KeyBuilder(prefix).epoch();
    const slot = Number(await redis.cluster('KEYSLOT', epochKey));
    // a node that does not serve the epoch key's slot answers the store's first script MOVED
    const elsewhere = clusterNodes().find((n) => !redis.slots[slot]!.includes(n))!;
    const store = new RedisStore({ url: `redis://${elsewhere}`, prefix });
    cleanups.push(() => store.close());
    const acquire = store.acquireFirst([{ channelId: 'c', max: 1 }], {
      token: 'x:1',
      leaseTtlMs: 10_000,
      checkCooldown: true,
    });
    await expect(acquire).rejects.toThrow(StoreUnavailableError);
    await expect(acquire).rejects.toThrow(`${elsewhere} is a Redis Cluster node`);
    expect(await store.topologyMismatch()).toMatch(/is a Redis Cluster node/);
  });
});
