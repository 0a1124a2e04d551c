/**
 * Starts one private redis-server for the whole run (or uses REDIS_URL) and a private 3-master Redis Cluster (or uses
 * REDIS_CLUSTER_NODES, `host:port` separated by commas), and hands their addresses to the tests.
 * A missing redis-server fails the run with an install hint; Redis tests are never skipped silently.
 */
import type { TestProject } from 'vitest/node';
import { RedisCluster } from './redis-cluster.js';
import { RedisServer } from './redis-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
    /** Seed nodes of the shared cluster, `host:port`. */
    redisClusterNodes: string[];
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const stops: (() => Promise<void>)[] = [];
  if (process.env.REDIS_URL) {
    project.provide('redisUrl', process.env.REDIS_URL);
  } else {
    const server = await RedisServer.start();
    stops.push(() => server.stop());
    project.provide('redisUrl', server.url);
  }
  if (process.env.REDIS_CLUSTER_NODES) {
    project.provide('redisClusterNodes', process.env.REDIS_CLUSTER_NODES.split(','));
  } else {
    const cluster = await RedisCluster.start();
    stops.push(() => cluster.stop());
    project.provide('redisClusterNodes', cluster.addresses);
  }
  return async () => {
    await Promise.all(stops.map((stop) => stop()));
  };
}
