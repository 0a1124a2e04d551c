/**
 * Redis clients for tests: the shared server's URL, a unique key prefix per test (so files run in parallel on one
 * server), and a counting client that records every command it sends and the size of every pipeline it executes.
 */
import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { defaultRedisOptions } from '../../packages/slotgate/src/store/redis/redis-store.js';

export function redisUrl(): string {
  return inject('redisUrl');
}

/** Seed nodes of the shared private cluster, `host:port`. */
export function clusterNodes(): string[] {
  return inject('redisClusterNodes');
}

/** A Cluster client on the shared cluster (the caller disconnects it). */
export function clusterClient(options: ClusterOptions = {}): Cluster {
  const client = new Cluster(
    clusterNodes().map((a) => ({ host: a.split(':')[0]!, port: Number(a.split(':')[1]) })),
    options,
  );
  client.on('error', () => {});
  return client;
}

/** Deletes every key matching `pattern` on every master of the shared cluster. */
export async function clearCluster(pattern: string): Promise<void> {
  const client = clusterClient();
  try {
    await Promise.all(
      client.nodes('master').map(async (node) => {
        const keys = await node.keys(pattern);
        for (const key of keys) await client.del(key);
      }),
    );
  } finally {
    client.disconnect();
  }
}

export function uniquePrefix(name = 't'): string {
  return `${name}-${randomBytes(5).toString('hex')}`;
}

export interface CountingClient {
  client: Redis;
  /** Command names sent since the last reset, lower case, in order (EVALSHA/EVAL for scripts). */
  readonly sent: string[];
  /** Sizes of every pipeline run through client.pipeline().exec(), ioredis auto-pipelines included. */
  readonly pipelines: number[];
  count(name?: string): number;
  reset(): void;
  close(): Promise<void>;
}

/** An ioredis client (ready) whose sendCommand is wrapped to record what it sends. */
export async function countingClient(url = redisUrl(), options: RedisOptions = {}): Promise<CountingClient> {
  const client = new Redis(url, { ...defaultRedisOptions(), ...options, lazyConnect: true });
  client.on('error', () => {});
  await client.connect();
  const sent: string[] = [];
  const pipelines: number[] = [];
  const send = client.sendCommand.bind(client);
  client.sendCommand = ((command: { name: string }, ...rest: unknown[]) => {
    sent.push(command.name.toLowerCase());
    return (send as (...a: unknown[]) => unknown)(command, ...rest);
  }) as typeof client.sendCommand;
  const makePipeline = client.pipeline.bind(client);
  client.pipeline = ((...args: Parameters<typeof client.pipeline>) => {
    const p = makePipeline(...args);
    const exec = p.exec.bind(p);
    p.exec = ((...a: Parameters<typeof p.exec>) => {
      pipelines.push(p.length);
      return exec(...a);
    }) as typeof p.exec;
    return p;
  }) as typeof client.pipeline;
  return {
    client,
    sent,
    pipelines,
    count: (name) => (name ? sent.filter((n) => n === name).length : sent.length),
    reset() {
      sent.length = 0;
      pipelines.length = 0;
    },
    async close() {
      client.disconnect();
    },
  };
}
