/**
 * The `redis` section of the config file: exactly one of one node (`url`), a Redis Cluster or a Sentinel-managed
 * primary, plus what applies to all three; and the RedisStore connection options it makes, for the gateway and doctor.
 */
import type { ConnectionOptions as TlsOptions } from 'node:tls';
import { z } from 'zod';
import { parseAddress, type RedisStoreOptions } from 'slotgate';

/** `host:port`, IPv6 in brackets, as the library's parseAddress reads it (no surrounding spaces here). */
export function isAddress(text: string): boolean {
  if (text.trim() !== text) return false;
  try {
    parseAddress(text);
    return true;
  } catch {
    return false;
  }
}

export const ADDRESS_EXPECTED = 'expected host:port (IPv6 in brackets, port 1–65535)';

export const ADDRESS_HIDDEN = '(not shown: it may hold a password)';

/** A bad address as it may be printed: one with `@` is likely a URL with a password in it, never echoed. */
export function showAddress(text: string): string {
  return text.includes('@') ? ADDRESS_HIDDEN : JSON.stringify(text);
}

export const REDIS_URL_EXPECTED =
  'expected redis://[user:password@]host[:port][/db] (or rediss:// for TLS, or host:port)';

/** A Redis URL as ioredis reads it: a bare `host:port` is a redis:// URL; a path is a Unix socket. */
function parseRedisUrl(url: string): URL | undefined {
  try {
    const u = new URL(url.includes('://') ? url : `redis://${url}`);
    return (u.protocol === 'redis:' || u.protocol === 'rediss:') && u.hostname !== '' && u.port !== '0'
      ? u
      : undefined;
  } catch {
    return undefined;
  }
}

/** A Redis URL as it may be printed: without its user name and password. */
export function showRedisUrl(url: string): string {
  const u = url.startsWith('/') ? undefined : parseRedisUrl(url);
  if (!u) return url.includes('@') ? ADDRESS_HIDDEN : url;
  u.username = '';
  u.password = '';
  return u.toString();
}

/** Why `url` is not a Redis URL (its password never echoed), or undefined when it is one. */
export function redisUrlProblem(url: string): string | undefined {
  if (url.startsWith('/') || parseRedisUrl(url)) return undefined;
  return `${REDIS_URL_EXPECTED}, got ${showAddress(url)}`;
}

const secret = z.string().min(1);
const address = z.string().refine(isAddress, ADDRESS_EXPECTED);
const addresses = z.array(address).min(1);

const clusterSchema = z.strictObject({
  /** Seed nodes: any reachable subset of the cluster; the rest is discovered. */
  nodes: addresses,
  /** Address a node announces → the address this gateway reaches it at (NAT, containers). */
  nat_map: z
    .record(z.string(), address)
    .superRefine((map, ctx) => {
      for (const key of Object.keys(map)) {
        if (!isAddress(key)) {
          ctx.addIssue({
            code: 'custom',
            path: [key],
            message: `${ADDRESS_EXPECTED} as the key`,
            params: { got: showAddress(key) },
          });
        }
      }
    })
    .optional(),
  username: secret.optional(),
  password: secret.optional(),
  tls: z.boolean().optional(),
  /** MOVED/ASK redirections one command follows (resharding) before it fails. */
  max_redirections: z.int().min(1).max(1000).optional(),
  /** How long one refresh of the slot map may take; a slow or distant cluster may need more. */
  slots_refresh_timeout_ms: z.int().min(100).max(60_000).optional(),
});

const sentinelSchema = z.strictObject({
  sentinels: addresses,
  /** The name the sentinels monitor the primary under. */
  master_name: z.string().min(1),
  username: secret.optional(),
  password: secret.optional(),
  sentinel_username: secret.optional(),
  sentinel_password: secret.optional(),
  tls: z.boolean().optional(),
});

/**
 * TLS to Redis, for url, cluster and sentinel alike. `ca`, `cert` and `key` are each a PEM file's path or `env:NAME`
 * (the PEM itself), read when the config loads (config.ts).
 */
const tlsSchema = z
  .strictObject({
    ca: secret.optional(),
    cert: secret.optional(),
    key: secret.optional(),
    /** The name the server's certificate must carry, when the address is not it (an IP, a tunnel). */
    servername: z.string().min(1).optional(),
    /** false accepts any certificate: a test setup only. */
    reject_unauthorized: z.boolean().default(true),
  })
  .refine((tls) => (tls.cert === undefined) === (tls.key === undefined), {
    message: 'expected both cert and key (a client certificate) or neither',
    params: { got: 'one of them' },
  });

export type RedisTlsConfig = z.infer<typeof tlsSchema>;

const CONNECTIONS = ['url', 'cluster', 'sentinel'] as const;

export const redisSchema = z
  .strictObject({
    url: secret.optional(),
    /** With url: its user and password, instead of in the URL (so the password can be env:). */
    username: secret.optional(),
    password: secret.optional(),
    tls: tlsSchema.optional(),
    cluster: clusterSchema.optional(),
    sentinel: sentinelSchema.optional(),
    prefix: z
      .string()
      .min(1)
      .regex(/^[^{}\s]+$/, 'no braces or spaces')
      .default('slotgate'),
    /** Longest time one Redis operation may take before it fails closed. */
    timeout_ms: z.int().min(10).max(60_000).default(1000),
    /** While Redis is unreachable: admit nothing (fail_closed) or up to max ÷ live instances each (local_share). */
    store_failure_mode: z.enum(['fail_closed', 'local_share']).default('fail_closed'),
    /** After Redis restarted empty, how long every instance admits nothing while the others restore leases. */
    restart_grace_ms: z.int().min(0).max(60_000).default(3000),
  })
  .superRefine((redis, ctx) => {
    const given = CONNECTIONS.filter((k) => redis[k] !== undefined);
    if (given.length === 1 && given[0] !== 'url' && (redis.username ?? redis.password) !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: [redis.username !== undefined ? 'username' : 'password'],
        message: `expected redis.${given[0]}.username and .password: redis.username and redis.password go with redis.url`,
        params: { got: 'a value (not shown)' },
      });
    }
    if (given.length === 1) return;
    ctx.addIssue({
      code: 'custom',
      message: 'expected exactly one of redis.url, redis.cluster and redis.sentinel',
      // config.ts prints `got` instead of the section's value (which holds secrets)
      params: { got: given.length === 0 ? 'none of them' : given.map((k) => `redis.${k}`).join(' and ') },
    });
  });

export type RedisConfig = z.infer<typeof redisSchema>;

/** The connection part of RedisStoreOptions: exactly one of url, cluster and sentinel. */
export type RedisConnection = Pick<RedisStoreOptions, 'url' | 'cluster' | 'sentinel' | 'redisOptions'>;

/** Node's TLS options for a section's `tls`, its files already read (config.ts). */
function tlsOptions(tls: RedisTlsConfig): TlsOptions {
  const { ca, cert, key, servername, reject_unauthorized } = tls;
  return { ...defined({ ca, cert, key, servername }), rejectUnauthorized: reject_unauthorized };
}

/** `fields` without its undefined ones: a key given as undefined would override the client's default. */
function defined<T extends object>(fields: T): Partial<T> {
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** The library's connection options for a validated section (the schema guarantees exactly one). */
export function redisConnection(redis: RedisConfig): RedisConnection {
  const { cluster, sentinel } = redis;
  const tls = redis.tls && tlsOptions(redis.tls);
  if (cluster) {
    const { nat_map, max_redirections, slots_refresh_timeout_ms } = cluster;
    const options = defined({
      maxRedirections: max_redirections,
      slotsRefreshTimeout: slots_refresh_timeout_ms,
    });
    const natMap =
      nat_map && Object.fromEntries(Object.entries(nat_map).map(([from, to]) => [from, parseAddress(to)]));
    const { username, password } = cluster;
    return {
      cluster: {
        nodes: cluster.nodes,
        ...defined({ natMap, username, password, tls: tls ?? (cluster.tls || undefined) }),
        ...(Object.keys(options).length > 0 && { options }),
      },
    };
  }
  if (sentinel) {
    const { username, password, sentinel_username, sentinel_password } = sentinel;
    return {
      sentinel: {
        sentinels: sentinel.sentinels,
        name: sentinel.master_name,
        ...defined({
          username,
          password,
          sentinelUsername: sentinel_username,
          sentinelPassword: sentinel_password,
          tls: tls ?? (sentinel.tls || undefined),
        }),
      },
    };
  }
  const redisOptions = defined({ username: redis.username, password: redis.password, tls });
  return { url: redis.url!, ...(Object.keys(redisOptions).length > 0 && { redisOptions }) };
}

/** The Redis a section names, for a log line or a message: never a password. */
export function describeRedis(redis: RedisConfig): string {
  if (redis.cluster) {
    const n = redis.cluster.nodes.length;
    return `Redis Cluster (${n} seed node${n === 1 ? '' : 's'}: ${redis.cluster.nodes.join(', ')})`;
  }
  if (redis.sentinel) {
    const n = redis.sentinel.sentinels.length;
    return `Redis Sentinel master "${redis.sentinel.master_name}" (${n} sentinel${n === 1 ? '' : 's'}: ${redis.sentinel.sentinels.join(', ')})`;
  }
  return `Redis ${showRedisUrl(redis.url!)}`;
}
