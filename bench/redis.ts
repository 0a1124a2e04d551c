/**
 * The Redis the bench measures (a private redis-server, or one given by URL) and its instruments: INFO deltas on the
 * server (commandstats counts commands inside Lua scripts), round trips and socket writes on the contenders' clients.
 */
import { Redis, type Cluster } from 'ioredis';
// Internal: every contender's clients get the options slotgate's RedisStore gives its own (not public API).
import {
  clusterClient,
  defaultRedisOptions,
} from '../packages/slotgate/src/store/redis/connection/connection.js';
import { parseCommandstats, RedisServer } from '../test/helpers/redis-server.js';
import { addCounts, deltaOf, sum, type ProcessFigures } from './records.js';
import type { Session } from './types.js';

export interface NodeSnapshot {
  /** host:port */
  node: string;
  /** calls per command name (INFO commandstats) */
  commands: Record<string, number>;
  /** used_cpu_user + used_cpu_sys */
  cpuSeconds: number;
}

export interface ServerSnapshot extends Omit<NodeSnapshot, 'node'> {
  at: number;
  /** On a cluster: each master's own figures (the sums above are over them). */
  perNode?: NodeSnapshot[];
}

/** The memory of a run's keys (MEMORY USAGE), by kind: the last part of a key's name (`slots`, `peak`, `loads:…`). */
export type Footprint = Record<string, { keys: number; bytes: number }>;

/** The kind a footprint counts a key under: a channel key's suffix, else its name after the namespace's `v1:`. */
const kindOf = (key: string): string =>
  /\}:(\w+)$/.exec(key)?.[1] ?? /:v1:([a-z]+(?::[a-z]+)?)/.exec(key)?.[1] ?? 'other';

/** Every key of `namespace` on one node, with MEMORY USAGE (outside any measurement window). */
export async function footprintOf(client: Redis, namespace: string): Promise<Footprint> {
  const out: Footprint = {};
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `*${namespace}*`, 'COUNT', 1000);
    cursor = next;
    const bytes = await Promise.all(keys.map((k) => client.memory('USAGE', k)));
    keys.forEach((k, i) => {
      const entry = (out[kindOf(k)] ??= { keys: 0, bytes: 0 });
      entry.keys++;
      entry.bytes += Number(bytes[i] ?? 0);
    });
  } while (cursor !== '0');
  return out;
}

export interface RedisUnderTest {
  /** A redis:// URL, or on a cluster `redis-cluster://host:port,…`: what benchClient connects to. */
  url: string;
  topology: 'single' | 'cluster';
  label: string;
  snapshot(): Promise<ServerSnapshot>;
  /** The memory of a run's keys, on a single node (undefined on a cluster). */
  footprint?(namespace: string): Promise<Footprint>;
  /** Deletes the keys a run left behind (outside any measurement window). */
  cleanup(namespace: string): Promise<void>;
  close(): Promise<void>;
}

export async function nodeSnapshot(client: Redis, node: string): Promise<NodeSnapshot> {
  const [stats, cpu] = await Promise.all([client.info('commandstats'), client.info('cpu')]);
  const user = Number(/used_cpu_user:([\d.]+)/.exec(cpu)?.[1] ?? 0);
  const sys = Number(/used_cpu_sys:([\d.]+)/.exec(cpu)?.[1] ?? 0);
  return { node, commands: parseCommandstats(stats), cpuSeconds: user + sys };
}

export const versionOf = async (client: Redis): Promise<string> =>
  /redis_version:(\S+)/.exec(await client.info('server'))?.[1] ?? '?';

/** Deletes the keys of `namespace` on a shared server, one at a time (a cluster master holds many slots). */
export async function deleteNamespace(client: Redis, namespace: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `*${namespace}*`, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) await client.del(key);
  } while (cursor !== '0');
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
  const version = await versionOf(admin);
  return {
    url,
    topology: 'single',
    label: own
      ? `private redis-server ${version} on 127.0.0.1 (same machine)`
      : `redis ${version} at ${new URL(url).hostname} (given URL; other clients' traffic would count too)`,
    snapshot: async () => ({ ...(await nodeSnapshot(admin, url)), at: performance.now() }),
    footprint: (namespace) => footprintOf(admin, namespace),
    cleanup: (namespace) => (own ? admin.flushall().then(() => {}) : deleteNamespace(admin, namespace)),
    async close() {
      admin.disconnect();
      await own?.stop();
    },
  };
}

/** Server-side commands between two snapshots, without the INFO calls the measurement itself made. */
export function commandDelta(before: Pick<NodeSnapshot, 'commands'>, after: Pick<NodeSnapshot, 'commands'>) {
  const delta: Record<string, number> = {};
  for (const [name, calls] of Object.entries(after.commands)) {
    const d = calls - (before.commands[name] ?? 0);
    if (d > 0 && name !== 'info') delta[name] = d;
  }
  return delta;
}

/** On a cluster: each master's commands and CPU ms between two snapshots. */
export function perNodeDelta(before: ServerSnapshot, after: ServerSnapshot) {
  return after.perNode?.map((n) => {
    const b = before.perNode?.find((x) => x.node === n.node);
    const commands = sum(Object.values(commandDelta(b ?? { commands: {} }, n)));
    return { node: n.node, commands, cpuMs: (n.cpuSeconds - (b?.cpuSeconds ?? 0)) * 1000 };
  });
}

const CLUSTER_SCHEME = 'redis-cluster://';

/** The target string of a cluster: its seed nodes (host:port) behind a scheme of the bench's own. */
export const clusterTarget = (nodes: readonly string[]): string => `${CLUSTER_SCHEME}${nodes.join(',')}`;

/** A client on `url` with slotgate's RedisStore options: on a cluster target, the store's own Cluster client. */
export function benchClient(url: string): Redis | Cluster {
  return url.startsWith(CLUSTER_SCHEME)
    ? clusterClient({ nodes: url.slice(CLUSTER_SCHEME.length).split(',') })
    : new Redis(url, defaultRedisOptions());
}

/**
 * Counts, on every client a contender opens (and their `duplicate()`s), the round trips its code asks for (each
 * command call 1, a Lua script 1, an explicit pipeline or MULTI 1 however many commands it carries; ioredis's own
 * ready checks, NOSCRIPT retries and auto-pipeline flushes not) and the socket writes, where auto-pipelining merges
 * the concurrent requests of many acquirers into one.
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

  /** A new client with slotgate's RedisStore options, counted. */
  client(url: string): Redis | Cluster {
    const client = benchClient(url);
    client.on('error', () => {}); // surfaced per command
    return this.watch(client);
  }
}

/** What one process measures on its side of a window, and its sessions' counters one by one (in their order). */
export interface MeterFigures extends ProcessFigures {
  counters?: Record<string, number>[];
}

/** Takes the process figures of `sessions` (whose clients `counter` watches) between start() and end(). */
export function clientMeter(counter: RoundTripCounter, sessions: readonly Session[]) {
  let rt = { requests: 0, writes: 0 };
  let cpu = process.cpuUsage();
  let before: (Record<string, number> | undefined)[] = [];
  let after: (Record<string, number> | undefined)[] = [];
  return {
    start(): void {
      rt = { requests: counter.requests, writes: counter.writes };
      cpu = process.cpuUsage();
      before = sessions.map((s) => s.counters?.());
    },
    end(): void {
      rt = { requests: counter.requests - rt.requests, writes: counter.writes - rt.writes };
      cpu = process.cpuUsage(cpu);
      after = sessions.map((s) => s.counters?.());
    },
    figures(): MeterFigures {
      const counters = sessions.flatMap((_, k) => {
        const d = deltaOf(before[k], after[k]);
        return d ? [d] : [];
      });
      return {
        roundTrips: rt.requests,
        socketWrites: rt.writes,
        clientCpuMs: (cpu.user + cpu.system) / 1000,
        ...(counters.length ? { purposes: addCounts({}, ...counters), counters } : {}),
      };
    },
  };
}
