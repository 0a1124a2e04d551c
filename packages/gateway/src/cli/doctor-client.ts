/**
 * The client `slotgate doctor` checks with, for one node, a Cluster or a Sentinel set. Unlike the store's own, it
 * fails at once when Redis cannot be reached (no reconnect loop): a one-shot check exits 2 instead of waiting.
 */
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { RedisConnection } from '../config-redis.js';
import { splitAddress } from '../config-redis.js';

const FAIL_FAST: RedisOptions = { maxRetriesPerRequest: 1, connectTimeout: 3000, retryStrategy: () => null };

const address = (a: string | { host: string; port: number }) => (typeof a === 'string' ? splitAddress(a) : a);

export function doctorClient(c: RedisConnection): Redis | Cluster {
  const client = c.cluster
    ? new Cluster(c.cluster.nodes.map(address), {
        redisOptions: {
          ...FAIL_FAST,
          ...(c.cluster.username !== undefined && { username: c.cluster.username }),
          ...(c.cluster.password !== undefined && { password: c.cluster.password }),
          ...(c.cluster.tls && { tls: {} }),
        },
        ...(c.cluster.natMap && { natMap: c.cluster.natMap }),
        clusterRetryStrategy: () => null,
        ...c.cluster.options,
      })
    : c.sentinel
      ? new Redis({
          ...FAIL_FAST,
          sentinels: c.sentinel.sentinels.map(address),
          name: c.sentinel.name,
          sentinelRetryStrategy: () => null,
          ...(c.sentinel.username !== undefined && { username: c.sentinel.username }),
          ...(c.sentinel.password !== undefined && { password: c.sentinel.password }),
          ...(c.sentinel.sentinelUsername !== undefined && { sentinelUsername: c.sentinel.sentinelUsername }),
          ...(c.sentinel.sentinelPassword !== undefined && { sentinelPassword: c.sentinel.sentinelPassword }),
          ...(c.sentinel.tls && { tls: {}, enableTLSForSentinelMode: true }),
        })
      : new Redis(c.url!, FAIL_FAST);
  client.on('error', () => {}); // each failed command says why
  return client;
}
