/**
 * A `slotgate serve` process configured with `redis.cluster` (one seed node of the shared test cluster): a stream on
 * a bounded channel holds its slot in the cluster while it runs and gives it back when the client goes away; the
 * admin status reports the Redis store healthy.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { useCleanups } from '../helpers/cleanups.js';
import { ADMIN, CLIENT, SECRETS, call, chat, eventually, streamingCall } from '../helpers/gateway.js';
import { killAllGateways, spawnGateway, tempDir, writeConfig } from '../helpers/gw-gateway.js';
import { clearCluster, clusterClient, clusterNodes, uniquePrefix } from '../helpers/redis.js';

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
});
