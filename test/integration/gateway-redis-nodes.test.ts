/**
 * The store's topology and per-node health in operations: /metrics (slotgate_redis_node_up, _latency_seconds) and
 * /admin/status, for a gateway on the shared 3-master cluster (every master, up) and on one password-protected node
 * (the one node, up then down; its password nowhere in either answer).
 */
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { createGateway, type Gateway } from '../../packages/gateway/src/server.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { useCleanups } from '../helpers/cleanups.js';
import { parsePrometheusText, select, valueOf } from '../helpers/prom-text.js';
import { clearCluster, clusterNodes, redisUrl, uniquePrefix } from '../helpers/redis.js';
import { RedisServer } from '../helpers/redis-server.js';

const ADMIN_TOKEN = 'adm-nodes-S3CRET-5e1f';
const PASSWORD = 'redis-pw-S3CRET-77aa';
const cleanups = useCleanups();

function configFor(url: string, prefix: string) {
  return parseConfig(
    {
      redis: { url, prefix, timeout_ms: 300 },
      admin: { token: ADMIN_TOKEN },
      tokens: [{ key: 'tok-nodes', name: 'nodes-test' }],
      channels: [{ id: 'c', type: 'mock', models: ['m'], max_concurrency: 2, mock: { latency_ms: 1 } }],
    },
    'nodes-test',
    {},
  );
}

async function read(gw: Gateway) {
  const metrics = await gw.app.inject({ method: 'GET', url: '/metrics' });
  const status = await gw.app.inject({
    method: 'GET',
    url: '/admin/status',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  expect([metrics.statusCode, status.statusCode]).toEqual([200, 200]);
  const redis = (status.json() as { redis: Record<string, unknown> }).redis as {
    healthy: boolean;
    topology: string;
    nodes: { address: string; role: string; healthy: boolean; latency_ms?: number; error?: string }[];
  };
  return { text: metrics.body, exp: parsePrometheusText(metrics.body), redis, raw: status.body };
}

describe('Redis topology and node health in /metrics and /admin/status', () => {
  it('a gateway on the 3-master cluster reports every master up, with its PING time', async () => {
    const prefix = uniquePrefix('nodes-cluster');
    const store = new RedisStore({ cluster: { nodes: clusterNodes() }, prefix });
    // the config's URL is not used: the gateway runs on the store it is given
    const gw = await createGateway({ config: configFor(redisUrl(), prefix), store, logger: false });
    cleanups.push(async () => {
      await gw.close();
      await store.close();
      await clearCluster(`${prefix}:*`);
    });
    expect(store.topologyKind).toBe('cluster');
    const { exp, redis } = await read(gw);
    const up = select(exp, 'slotgate_redis_node_up');
    expect(up.map((s) => s.labels.node).sort()).toEqual([...clusterNodes()].sort());
    expect(up.every((s) => s.labels.role === 'master' && s.value === 1)).toBe(true);
    const latency = select(exp, 'slotgate_redis_node_latency_seconds');
    expect(latency.map((s) => s.labels.node).sort()).toEqual([...clusterNodes()].sort());
    expect(latency.every((s) => s.value >= 0 && s.value < 1)).toBe(true);
    expect(redis.topology).toBe('cluster');
    expect(redis.nodes.map((n) => n.address).sort()).toEqual([...clusterNodes()].sort());
    expect(redis.nodes.every((n) => n.healthy && n.role === 'master' && n.latency_ms! >= 0)).toBe(true);
  });

  it('a gateway on one password-protected node reports it up, then down, and never its password', async () => {
    const server = await RedisServer.start();
    cleanups.push(() => server.stop());
    const admin = new Redis(server.url);
    await admin.config('SET', 'requirepass', PASSWORD);
    admin.disconnect();
    const url = `redis://:${PASSWORD}@127.0.0.1:${server.port}`;
    const gw = await createGateway({ config: configFor(url, uniquePrefix('nodes-single')), logger: false });
    cleanups.push(() => gw.close());
    const address = `127.0.0.1:${server.port}`;

    const before = await read(gw);
    expect(valueOf(before.exp, 'slotgate_redis_node_up', { node: address, role: 'standalone' })).toBe(1);
    expect(select(before.exp, 'slotgate_redis_node_latency_seconds', { node: address })).toHaveLength(1);
    expect(before.redis).toMatchObject({ healthy: true, topology: 'single' });
    expect(before.redis.nodes).toEqual([
      { address, role: 'standalone', healthy: true, latency_ms: expect.any(Number) },
    ]);

    await server.stop();
    const after = await read(gw);
    expect(valueOf(after.exp, 'slotgate_redis_node_up', { node: address, role: 'standalone' })).toBe(0);
    expect(select(after.exp, 'slotgate_redis_node_latency_seconds')).toEqual([]);
    expect(after.redis.healthy).toBe(false);
    expect(after.redis.nodes).toMatchObject([{ address, role: 'standalone', healthy: false }]);
    for (const answer of [before.text, before.raw, after.text, after.raw])
      expect(answer).not.toContain(PASSWORD);
  });
});
