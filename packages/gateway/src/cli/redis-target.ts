/**
 * The Redis a command line names, from its flags or else the environment (one node, a Cluster or a Sentinel set): it
 * replaces the connection of the config file's `redis` section and keeps the rest (prefix, time-outs, passwords).
 */
import { ADDRESS_EXPECTED, isAddress, redisUrlProblem, showAddress } from '../config-redis.js';

export interface RedisFlags {
  redis?: string;
  cluster?: string;
  sentinel?: string;
  master?: string;
}

/** A command line or environment that names no usable Redis: printed as is, exit 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

export type RedisTarget = { url: string } | { cluster: string[] } | { sentinels: string[] };

export interface TargetChoice {
  target?: RedisTarget;
  /** The Sentinel primary's name, and where it came from (for messages). */
  master?: { name: string; from: string };
  /** Where the target came from: a flag or an environment variable. */
  from?: string;
}

/** `host:port[,host:port...]`, each entry checked; a bad one is named without echoing a possible password. */
function addressList(text: string, from: string): string[] {
  const list = text
    .split(',')
    .map((a) => a.trim())
    .filter((a) => a !== '');
  if (list.length === 0) throw new UsageError(`${from}: expected host:port[,host:port...], got nothing`);
  for (const a of list) {
    if (!isAddress(a)) throw new UsageError(`${from}: ${ADDRESS_EXPECTED}, got ${showAddress(a)}`);
  }
  return list;
}

function only(given: [string, string | undefined][], what: string): [string, string] | undefined {
  const set = given.filter((g): g is [string, string] => g[1] !== undefined && g[1] !== '');
  if (set.length > 1) {
    throw new UsageError(
      `${what}: give one of ${given.map((g) => g[0]).join(', ')}, not ${set.map((g) => g[0]).join(' and ')}`,
    );
  }
  return set[0];
}

/** Flags first; the environment only when no flag names a Redis. Throws UsageError on a conflict or a bad list. */
export function redisTarget(flags: RedisFlags, env: NodeJS.ProcessEnv): TargetChoice {
  const chosen =
    only(
      [
        ['--redis', flags.redis],
        ['--cluster', flags.cluster],
        ['--sentinel', flags.sentinel],
      ],
      'the command line',
    ) ??
    only(
      [
        ['REDIS_URL', env.REDIS_URL],
        ['REDIS_CLUSTER_NODES', env.REDIS_CLUSTER_NODES],
        ['REDIS_SENTINELS', env.REDIS_SENTINELS],
      ],
      'the environment',
    );
  const master =
    flags.master !== undefined
      ? { name: flags.master, from: '--master' }
      : env.REDIS_SENTINEL_MASTER
        ? { name: env.REDIS_SENTINEL_MASTER, from: 'REDIS_SENTINEL_MASTER' }
        : undefined;
  if (master?.name === '') throw new UsageError('--master: expected a name, got nothing');
  if (!chosen) return { ...(master && { master }) };
  const [from, value] = chosen;
  const isUrl = from === '--redis' || from === 'REDIS_URL';
  const problem = isUrl ? redisUrlProblem(value) : undefined;
  if (problem) throw new UsageError(`${from}: ${problem}`);
  const target: RedisTarget = isUrl
    ? { url: value }
    : from === '--cluster' || from === 'REDIS_CLUSTER_NODES'
      ? { cluster: addressList(value, from) }
      : { sentinels: addressList(value, from) };
  return { target, from, ...(master && { master }) };
}

/** The config's `redis` section with the connection the command line names; undefined when neither exists. */
export function withTarget(
  section: Record<string, unknown> | undefined,
  choice: TargetChoice,
): Record<string, unknown> | undefined {
  const { target, master } = choice;
  const { url, cluster, sentinel, ...rest } = section ?? {};
  let next: Record<string, unknown>;
  if (!target) next = { ...rest, url, cluster, sentinel };
  else if ('url' in target) next = { ...rest, url: target.url };
  else if ('cluster' in target) next = { ...rest, cluster: { ...asObject(cluster), nodes: target.cluster } };
  else next = { ...rest, sentinel: { ...asObject(sentinel), sentinels: target.sentinels } };
  if (next.sentinel === undefined) {
    // REDIS_SENTINEL_MASTER alone is ignored off Sentinel (a shared environment may set it); --master is not
    if (master?.from === '--master')
      throw new UsageError('--master goes with --sentinel (or REDIS_SENTINELS)');
  } else {
    const s = asObject(next.sentinel);
    if (master) next.sentinel = { ...s, master_name: master.name };
    else if (s.master_name === undefined) {
      throw new UsageError(
        `${choice.from ?? 'redis.sentinel'} needs the primary's name: --master NAME (or REDIS_SENTINEL_MASTER)`,
      );
    }
  }
  if (!target && !section) return undefined;
  for (const key of ['url', 'cluster', 'sentinel']) if (next[key] === undefined) delete next[key];
  return next;
}

function asObject(value: unknown): Record<string, unknown> {
  return value !== null && typeof value === 'object' ? (value as Record<string, unknown>) : {};
}
