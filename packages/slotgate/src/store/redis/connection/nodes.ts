/** The store's Redis topology and the health of each node it writes to. Addresses only, never credentials. */
import { Redis, type Cluster } from 'ioredis';
import { within, type Clock } from '../../../core/clock.js';
import { isCluster } from './connection.js';

export type TopologyKind = 'single' | 'cluster' | 'sentinel';

export interface NodeHealth {
  /** host:port (IPv6 in brackets); a Sentinel connection not on a node yet: the primary's name. */
  address: string;
  /** 'master' (a Cluster master, a Sentinel primary), 'replica', or 'standalone' (a single node). */
  role: 'master' | 'replica' | 'standalone';
  healthy: boolean;
  latencyMs?: number;
  error?: string;
}

export function topologyKindOf(client: Redis | Cluster): TopologyKind {
  if (isCluster(client)) return 'cluster';
  return client.options.sentinels?.length ? 'sentinel' : 'single';
}

const hostPort = (host: string | undefined, port: number | undefined) =>
  `${host?.includes(':') ? `[${host}]` : (host ?? '?')}:${port ?? '?'}`;

/** Its socket's peer once connected (a Sentinel's primary), else the address it was given. */
function addressOf(client: Redis): string {
  const stream = (client as unknown as { stream?: { remoteAddress?: string; remotePort?: number } }).stream;
  if (stream?.remoteAddress) return hostPort(stream.remoteAddress, stream.remotePort);
  if (client.options.sentinels?.length) return client.options.name ?? '?';
  return hostPort(client.options.host, client.options.port);
}

/** PING under a time-out: on a Redis that is down it can take seconds to fail otherwise. */
export async function ping(
  client: Redis | Cluster,
  clock: Clock,
  timeoutMs: number,
): Promise<Pick<NodeHealth, 'healthy' | 'latencyMs' | 'error'>> {
  const t0 = performance.now();
  try {
    const answered = await within(clock, client.ping(), timeoutMs);
    if (answered === undefined) return { healthy: false, error: 'ping timed out' };
    return { healthy: true, latencyMs: Number((performance.now() - t0).toFixed(2)) };
  } catch (err) {
    return { healthy: false, error: (err as Error).message };
  }
}

/** Every master of a Cluster (its seed nodes, unhealthy, before it knows any), or the one node. */
export async function nodeHealth(
  client: Redis | Cluster,
  clock: Clock,
  timeoutMs: number,
): Promise<NodeHealth[]> {
  if (isCluster(client)) {
    const masters = client.nodes('master');
    if (masters.length === 0) {
      const seeds = (client as unknown as { startupNodes: { host?: string; port?: number }[] }).startupNodes;
      return seeds.map(({ host, port }) => ({
        address: hostPort(host, port),
        role: 'master' as const,
        healthy: false,
        error: 'no cluster slots known',
      }));
    }
    const healths = await Promise.all(
      masters.map(async (node) => ({
        address: hostPort(node.options.host, node.options.port),
        role: 'master' as const,
        ...(await ping(node, clock, timeoutMs)),
      })),
    );
    // a master that went down leaves the node list but still owns its slots: report it down
    const listed = new Set(masters.map((n) => `${n.options.host}:${n.options.port}`));
    const owners = new Set<string>();
    for (const owner of client.slots) if (owner?.[0] && !listed.has(owner[0])) owners.add(owner[0]);
    for (const key of owners) {
      const cut = key.lastIndexOf(':');
      healths.push({
        address: hostPort(key.slice(0, cut), Number(key.slice(cut + 1))),
        role: 'master',
        healthy: false,
        error: 'no connection to a master that serves slots',
      });
    }
    return healths;
  }
  const kind = topologyKindOf(client);
  const role = kind === 'single' ? 'standalone' : client.options.role === 'slave' ? 'replica' : 'master';
  const health = await ping(client, clock, timeoutMs);
  return [{ address: addressOf(client), role, ...health }];
}

/** The one seed node of a Cluster client the check asks, with the options (auth, TLS) its nodes are reached with. */
function firstSeed(client: Cluster): Redis {
  const seeds = (client as unknown as { startupNodes: { host?: string; port?: number }[] }).startupNodes;
  const { host, port } = seeds[0] ?? {};
  return new Redis({
    ...client.options.redisOptions,
    ...(host !== undefined && { host }),
    ...(port !== undefined && { port }),
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
}

/**
 * What is wrong with how the client reaches Redis: a single-node or Sentinel client at a Cluster node (every acquire
 * would fail with MOVED), or a Cluster client whose seed node has no cluster support (it never finds a slot map).
 * Undefined when the topology matches, or when Redis cannot be asked within `timeoutMs`.
 */
export async function topologyMismatch(
  client: Redis | Cluster,
  clock: Clock,
  timeoutMs: number,
): Promise<string | undefined> {
  const cluster = isCluster(client);
  if (cluster && client.nodes('master').length > 0) return undefined; // it found a slot map: a Cluster
  const node = cluster ? firstSeed(client) : client;
  try {
    if (cluster) await within(clock, node.connect(), timeoutMs);
    const info = await within(clock, node.info('cluster'), timeoutMs);
    if (info === undefined) return undefined;
    const enabled = /^cluster_enabled:1\s*$/m.test(info);
    const where = addressOf(node);
    if (!cluster && enabled)
      return `${where} is a Redis Cluster node: connect to it as a Cluster (the gateway: --cluster or redis.cluster), not as a single node`;
    if (cluster && !enabled)
      return `${where} is not a Redis Cluster node (cluster support disabled): connect to it as a single node (the gateway: --redis or redis.url) or through Sentinel`;
    return undefined;
  } catch {
    return undefined; // unreachable or refused: the health checks say so
  } finally {
    if (cluster) node.disconnect();
  }
}
