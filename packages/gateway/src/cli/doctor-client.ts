/** The library's Redis client for `slotgate doctor`, made to fail at once when Redis cannot be reached (exit 2). */
import type { Cluster, Redis, RedisOptions } from 'ioredis';
import { createRedisClient } from 'slotgate';
import type { RedisConnection } from '../config-redis.js';

const FAIL_FAST: RedisOptions = { maxRetriesPerRequest: 1, connectTimeout: 3000, retryStrategy: () => null };

/** The client, and the last connection error it saw (the reason a command then fails with "Connection is closed"). */
export function doctorClient(c: RedisConnection): {
  client: Redis | Cluster;
  lastError: () => Error | undefined;
} {
  const client = createRedisClient({
    ...(c.url !== undefined && { url: c.url }),
    ...(c.cluster && {
      cluster: { ...c.cluster, options: { ...c.cluster.options, clusterRetryStrategy: () => null } },
    }),
    ...(c.sentinel && {
      sentinel: { ...c.sentinel, options: { ...c.sentinel.options, sentinelRetryStrategy: () => null } },
    }),
    redisOptions: FAIL_FAST,
  });
  let last: Error | undefined;
  client.on('error', (err: Error) => (last = err)); // the failed command's message names no cause: this does
  return { client, lastError: () => last };
}
