/**
 * The Redis the benchmark measures — a private redis-server (the tests' launcher, test/helpers/redis-server.ts), or
 * one given by URL — and the two instruments on it: server-side deltas from INFO (commandstats, which counts the
 * commands run inside Lua scripts too, and used_cpu_user + used_cpu_sys), and client-side round trips (socket
 * writes of every ioredis client the contenders open).
 */
import { Redis, type Cluster } from 'ioredis';
// Internal: every contender's clients get the options slotgate's RedisStore gives its own (not public API).
import { clusterClient, defaultRedisOptions } from '../packages/slotgate/src/store/redis/connection/connection.js';
import { parseCommandstats, RedisServer } from '../test/helpers/redis-server.js';

export interface ServerSnapshot {
  /** calls per command name (INFO commandstats) */
  commands: Record<string, number>;
  /** used_cpu_user + used_cpu_sys, seconds */
  cpuSeconds: number;
  at: number;
  /** On a cluster: each master's own figures (the sums above are over them). */
  perNode?: NodeSnapshot[];
}

export interface NodeSnapshot {
  /** host:port */
  node: string;
  commands: Record<string, number>;
  cpuSeconds: number;
}

export interface RedisUnderTest {
  /** A redis:// URL, or on a cluster `redis-cluster://host:port,…` (clusterTarget): what benchClient connects to. */
  url: string;
  topology: 'single' | 'cluster';
  /** e.g. "private redis-server 7.0.15 on 127.0.0.1 (this machine)" */
  label: string;
  version: string;
  /** A private server: nothing else talks to it, so INFO deltas are the contenders' alone. */
  isPrivate: boolean;
  snapshot(): Promise<ServerSnapshot>;
  /** Deletes the keys a run left behind (outside any measurement window). */
  cleanup(namespace: string): Promise<void>;
  close(): Promise<void>;
}

/** The Redis at `url`, or a private redis-server started for the run. */
export async function openRedis(url?: string): Promise<RedisUnderTest> {
  let own: RedisServer | undefined;
  if (!url) {
    try {
      own = await RedisServer.start();
    } catch (err) {
      throw new Error(`${(err as Error).message} The benchmark also takes --redis URL.`, { cause: err });
    }
    url = own.url;
  }
  const admin = new Redis(url, { maxRetriesPerRequest: 1 });
  const server = await admin.info('server');
  const version = /redis_version:(\S+)/.exec(server)?.[1] ?? '?';
  const host = new URL(url).hostname;
  return {
    url,
    topology: 'single',
    version,
    isPrivate: own !== undefined,
    label: own
      ? `private redis-server ${version} on 127.0.0.1 (same machine)`
      : `redis ${version} at ${host} (given URL; other clients' traffic would count too)`,
    async snapshot() {
      const [stats, cpu] = await Promise.all([admin.info('commandstats'), admin.info('cpu')]);
      const user = Number(/used_cpu_user:([\d.]+)/.exec(cpu)?.[1] ?? 0);
      const sys = Number(/used_cpu_sys:([\d.]+)/.exec(cpu)?.[1] ?? 0);
      return { commands: parseCommandstats(stats), cpuSeconds: user + sys, at: performance.now() };
    },
    async cleanup(namespace) {
      if (own) {
        await admin.flushall();
        return;
      }
      let cursor = '0';
      do {
        const [next, keys] = await admin.scan(cursor, 'MATCH', `*${namespace}*`, 'COUNT', 1000);
        cursor = next;
        if (keys.length) await admin.del(...keys);
      } while (cursor !== '0');
    },
    async close() {
      admin.disconnect();
      await own?.stop();
    },
  };
}

/** Server-side commands between two snapshots, without the INFO calls the measurement itself made. */
export function commandDelta(before: ServerSnapshot, after: ServerSnapshot): Record<string, number> {
  const delta: Record<string, number> = {};
  for (const [name, calls] of Object.entries(after.commands)) {
    const d = calls - (before.commands[name] ?? 0);
    if (d > 0 && name !== 'info') delta[name] = d;
  }
  return delta;
}

const CLUSTER_SCHEME = 'redis-cluster://';

/** The target string of a cluster: its seed nodes (host:port) behind a scheme of the benchmark's own. */
export const clusterTarget = (nodes: readonly string[]): string => `${CLUSTER_SCHEME}${nodes.join(',')}`;

/** A client on `url` with slotgate's RedisStore options: on a cluster target, the store's own Cluster client. */
export function benchClient(url: string): Redis | Cluster {
  return url.startsWith(CLUSTER_SCHEME)
    ? clusterClient({ nodes: url.slice(CLUSTER_SCHEME.length).split(',') })
    : new Redis(url, defaultRedisOptions());
}

/**
 * Counts, on every ioredis client a contender opens, two things:
 *
 * - `requests` (the round trips the contender's code asks for): each command method it calls counts 1 (a Lua script
 *   defined with defineCommand too), and each explicit pipeline or MULTI counts 1 when it is executed, however many
 *   commands it carries. What the client does by itself (ready check, NOSCRIPT → EVAL retry, auto-pipeline flushes)
 *   is not counted. This is independent of how the event loop happens to batch concurrent requests.
 * - `writes` (socket writes): ioredis writes each command, pipeline and auto-pipelined batch with one `write`, so this
 *   is the number of request flights actually sent; with auto-pipelining, concurrent requests of many acquirers share
 *   one write, so writes per admission falls as concurrency rises.
 *
 * The hooks sit on the client instance (and on every socket it opens) and on clients made with `duplicate()`
 * (Bottleneck's subscriber, slotgate's settings subscriber).
 */
export class RoundTripCounter {
  requests = 0;
  writes = 0;
  private readonly wrapped = new WeakSet<object>();
  /** > 0 while a counted command method runs: pipelines created then are ioredis's own auto-pipelines. */
  private depth = 0;

  watch<C extends Redis | Cluster>(client: C): C {
    const wrapSocket = (connection: Redis) => {
      const stream = (connection as unknown as { stream?: { write: (...args: unknown[]) => boolean } })
        .stream;
      if (!stream || this.wrapped.has(stream)) return;
      this.wrapped.add(stream);
      const write = stream.write.bind(stream);
      stream.write = (...args: unknown[]) => {
        this.writes++;
        return write(...args);
      };
    };
    const watchSockets = (connection: Redis) => {
      connection.on('connect', () => wrapSocket(connection));
      wrapSocket(connection);
    };
    // A Cluster writes through one connection per node, made as the cluster is discovered.
    if ((client as { isCluster?: boolean }).isCluster) {
      const cluster = client as Cluster;
      cluster.on('+node', watchSockets);
      cluster.nodes().forEach(watchSockets);
    } else watchSockets(client as Redis);

    // Arrow functions keep the counter's `this`; the wrappers below are plain functions so they keep the caller's.
    const enter = () => {
      if (this.depth === 0) this.requests++; // nested: ioredis running the same command on its pipeline
      this.depth++;
    };
    const leave = () => void this.depth--;
    const executed = () => void this.requests++;
    const topLevel = () => this.depth === 0;
    const methods = client as unknown as Record<string, (...args: unknown[]) => unknown>;
    const count = (name: string) => {
      const original = methods[name];
      if (typeof original !== 'function') return;
      methods[name] = function (this: unknown, ...args: unknown[]) {
        enter();
        try {
          return original.apply(this, args);
        } finally {
          leave();
        }
      };
    };
    // Not sendCommand: the command methods call it, so counting it would count twice.
    for (const name of [...client.getBuiltinCommands(), 'call']) {
      if (name === 'multi' || name === 'exec') continue; // counted once per transaction, below
      count(name);
      count(`${name}Buffer`);
    }
    for (const name of ['pipeline', 'multi'] as const) {
      const original = methods[name]!;
      methods[name] = function (this: unknown, ...args: unknown[]) {
        const pipeline = original.apply(this, args) as { exec: (...a: unknown[]) => unknown };
        if (topLevel()) {
          const exec = pipeline.exec;
          pipeline.exec = function (this: unknown, ...a: unknown[]) {
            executed();
            return exec.apply(this, a);
          };
        }
        return pipeline;
      };
    }
    const defineCommand = client.defineCommand.bind(client);
    client.defineCommand = (name, definition) => {
      defineCommand(name, definition);
      count(name);
      count(`${name}Buffer`);
    };
    const duplicate = client.duplicate.bind(client) as (...args: unknown[]) => C;
    (client as { duplicate: unknown }).duplicate = (...args: unknown[]) => this.watch(duplicate(...args));
    return client;
  }

  snapshot(): { requests: number; writes: number } {
    return { requests: this.requests, writes: this.writes };
  }

  /** A new client with slotgate's RedisStore options (a Cluster client on a cluster target), counted. */
  client(url: string): Redis | Cluster {
    const client = benchClient(url);
    client.on('error', () => {}); // surfaced per command
    return this.watch(client);
  }
}
