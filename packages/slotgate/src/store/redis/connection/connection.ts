/** The store's Redis client, from a URL, a Cluster or a Sentinel set: it fails fast and auto-pipelines. */
import { Cluster, Redis } from 'ioredis';
import type { ConnectionOptions as TlsOptions } from 'node:tls';
import type { ClusterOptions, NatMap, RedisOptions, SentinelAddress } from 'ioredis';
import { NodeSubscriber } from './node-subscriber.js';

export interface ClusterConnection {
  /** Seed nodes, `host:port` or `{ host, port }`: any reachable subset; the rest is discovered. */
  nodes: readonly (string | { host: string; port: number })[];
  /** Addresses the nodes announce → addresses this process reaches them at (NAT, containers). */
  natMap?: Record<string, { host: string; port: number }>;
  /** Of every node. */
  password?: string;
  username?: string;
  /** TLS to every node: true, or Node's TLS options (a private CA, a client certificate, the server name). */
  tls?: boolean | TlsOptions;
  /** Further ioredis ClusterOptions (they win over the store's defaults). */
  options?: ClusterOptions;
}

export interface SentinelConnection {
  /** The sentinels, `host:port` or `{ host, port }`. */
  sentinels: readonly (string | { host: string; port: number })[];
  /** The name the sentinels know the primary by (`sentinel monitor <name> ...`). */
  name: string;
  /** Of the primary and replicas. */
  password?: string;
  username?: string;
  /** Of the sentinels themselves. */
  sentinelPassword?: string;
  sentinelUsername?: string;
  /** TLS to the data nodes and the sentinels: true, or Node's TLS options. */
  tls?: boolean | TlsOptions;
  /** Further ioredis options (they win over the store's defaults). */
  options?: RedisOptions;
}

export function isCluster(client: Redis | Cluster): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}

/** ioredis options that make a Redis outage fail fast instead of queueing commands forever. */
export function defaultRedisOptions(): RedisOptions {
  return {
    enableAutoPipelining: true,
    maxRetriesPerRequest: 1,
    retryStrategy: (times) => Math.min(50 * 2 ** Math.min(times, 6), 2000),
    connectTimeout: 2000,
  };
}

const tlsOf = (tls: true | TlsOptions): TlsOptions => (tls === true ? {} : tls);

/** `host:port` (IPv6 in brackets) or an object; a host with `@` or `/` is refused: a URL belongs in `url`. */
export function parseAddress(address: string | { host: string; port: number }): {
  host: string;
  port: number;
} {
  if (typeof address !== 'string') return { host: address.host, port: address.port };
  const m = /^(?:\[([^\]\s]+)\]|([^:\s[\]@/]+)):(\d{1,5})$/.exec(address.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || port < 1 || port > 65535) {
    throw new TypeError(`Expected an address as host:port, got ${JSON.stringify(address)}`);
  }
  return { host: m[1] ?? m[2]!, port };
}

export function clusterClient(c: ClusterConnection, redisOptions: RedisOptions = {}): Cluster {
  if (!Array.isArray(c?.nodes) || c.nodes.length === 0) {
    throw new TypeError('Expected `cluster.nodes` to be a non-empty list of seed nodes (host:port)');
  }
  const { enableAutoPipelining: _pipelined, ...nodeOptions } = { ...defaultRedisOptions(), ...redisOptions };
  return new Cluster(c.nodes.map(parseAddress), {
    enableAutoPipelining: true,
    redisOptions: {
      ...nodeOptions,
      ...(c.password !== undefined && { password: c.password }),
      ...(c.username !== undefined && { username: c.username }),
      ...(c.tls && { tls: tlsOf(c.tls) }),
    },
    scaleReads: 'master',
    maxRedirections: 16,
    retryDelayOnMoved: 0,
    retryDelayOnFailover: 100,
    retryDelayOnClusterDown: 100,
    retryDelayOnTryAgain: 100,
    slotsRefreshTimeout: 2000,
    clusterRetryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 5), 2000),
    ...(c.natMap && { natMap: c.natMap as NatMap }),
    ...c.options,
  });
}

function sentinelClient(s: SentinelConnection, redisOptions: RedisOptions = {}): Redis {
  if (!Array.isArray(s?.sentinels) || s.sentinels.length === 0) {
    throw new TypeError('Expected `sentinel.sentinels` to be a non-empty list of sentinels (host:port)');
  }
  if (typeof s.name !== 'string' || s.name === '') {
    throw new TypeError("Expected `sentinel.name` to be the primary's name the sentinels monitor");
  }
  return new Redis({
    ...defaultRedisOptions(),
    ...redisOptions,
    sentinels: s.sentinels.map(parseAddress) as Partial<SentinelAddress>[],
    name: s.name,
    ...(s.password !== undefined && { password: s.password }),
    ...(s.username !== undefined && { username: s.username }),
    ...(s.sentinelPassword !== undefined && { sentinelPassword: s.sentinelPassword }),
    ...(s.sentinelUsername !== undefined && { sentinelUsername: s.sentinelUsername }),
    ...(s.tls && { tls: tlsOf(s.tls), sentinelTLS: tlsOf(s.tls), enableTLSForSentinelMode: true }),
    // a connection left on a demoted primary goes to the new one
    failoverDetector: true,
    ...s.options,
  });
}

export interface Subscriber {
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  on(event: 'ready' | 'close', listener: () => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  subscribe(...channels: string[]): Promise<unknown>;
  disconnect(): void;
}

/**
 * A pub/sub connection of its own, which waits through an outage. Its user subscribes again on each 'ready': ioredis's
 * own resubscription handles no rejection, so a connection closed right after a reconnect (a shutdown, a Cluster
 * node replaced) made it an unhandled rejection, which ends a Node process.
 */
export function subscriberOf(client: Redis | Cluster): Subscriber {
  const waitThrough: RedisOptions = {
    enableOfflineQueue: true,
    maxRetriesPerRequest: null,
    autoResubscribe: false,
  };
  if (isCluster(client)) {
    return new NodeSubscriber(client, {
      ...client.options.redisOptions,
      ...waitThrough,
      enableAutoPipelining: false,
    });
  }
  return (client as Redis).duplicate({ ...waitThrough, enableAutoPipelining: false });
}

/** Where a store's own client connects: exactly one of the three. */
export interface ConnectionOptions {
  url?: string;
  cluster?: ClusterConnection;
  sentinel?: SentinelConnection;
  redisOptions?: RedisOptions;
}

/** The client a store creates (exported as `createRedisClient`, for `slotgate doctor`). */
export function createClient(options: ConnectionOptions): Redis | Cluster {
  const given = (['url', 'cluster', 'sentinel'] as const).filter((k) => options[k] !== undefined);
  if (given.length !== 1) {
    throw new TypeError(
      given.length === 0
        ? 'RedisStore needs one of `url`, `cluster`, `sentinel` or `client`'
        : `RedisStore takes one of \`url\`, \`cluster\` and \`sentinel\`, got ${given.join(' and ')}`,
    );
  }
  if (options.cluster) return clusterClient(options.cluster, options.redisOptions);
  if (options.sentinel) return sentinelClient(options.sentinel, options.redisOptions);
  return new Redis(options.url!, { ...defaultRedisOptions(), ...options.redisOptions });
}
