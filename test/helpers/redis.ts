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
    await client.ping(); // nodes() is empty until the client has its slots map
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

/**
 * Where a store connects, as RedisStore options that survive JSON (a child process takes them on its command line):
 * the shared single node or the shared cluster.
 */
export type StoreTarget = { url: string } | { cluster: { nodes: string[] } };

/** The two topologies every multi-instance test runs on, named for describe.each's `$name`. */
export function topologies(): { name: string; target: StoreTarget }[] {
  return [
    { name: 'one Redis node', target: { url: redisUrl() } },
    { name: 'a 3-master Redis Cluster', target: { cluster: { nodes: clusterNodes() } } },
  ];
}

export interface KeyReader {
  /** Every key matching `pattern` (on a cluster, on every master). */
  keys(pattern: string): Promise<string[]>;
  /** One hash, wherever it lives. */
  hgetall(key: string): Promise<Record<string, string>>;
  close(): void;
}

/** A reader of the target's keys on one connection (one client per node on a cluster), for polling. */
export function keyReader(target: StoreTarget): KeyReader {
  const client = 'url' in target ? new Redis(target.url) : clusterClient();
  client.on('error', () => {});
  return {
    async keys(pattern) {
      if (!(client instanceof Cluster)) return client.keys(pattern);
      await client.ping(); // nodes() is empty until the client has its slots map
      const all = await Promise.all(client.nodes('master').map((node) => node.keys(pattern)));
      return all.flat();
    },
    hgetall: (key) => client.hgetall(key),
    close: () => client.disconnect(),
  };
}

/** Every key matching `pattern` on the target (on a cluster, on every master). */
export async function keysOn(target: StoreTarget, pattern: string): Promise<string[]> {
  const reader = keyReader(target);
  try {
    return await reader.keys(pattern);
  } finally {
    reader.close();
  }
}

/** Deletes every key matching `pattern` on the target. */
export async function clearOn(target: StoreTarget, pattern: string): Promise<void> {
  if ('cluster' in target) return clearCluster(pattern);
  const keys = await keysOn(target, pattern);
  if (keys.length === 0) return;
  const client = new Redis(target.url);
  client.on('error', () => {});
  try {
    await client.del(...keys);
  } finally {
    client.disconnect();
  }
}

export function uniquePrefix(name = 't'): string {
  return `${name}-${randomBytes(5).toString('hex')}`;
}

/** A unique prefix whose keys on the shared server (and those of `<prefix>:...` lookalikes) `cleanups` deletes. */
export function prefixCleanedAfter(name: string, cleanups: Array<() => unknown>): string {
  const prefix = uniquePrefix(name);
  cleanups.push(async () => {
    const redis = new Redis(redisUrl());
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });
  return prefix;
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
