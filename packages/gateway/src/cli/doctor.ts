/**
 * `slotgate doctor`: checks a Redis for leftover keys; exit 1 when it finds some, 2 when it cannot run. Slots of
 * owners whose heartbeat is late are reported but, like the notes, are no finding (nothing to fix yet): exit 0. Given
 * a config, it also prints each adaptive channel's stored limit.
 */
import type { RedisOptions } from 'ioredis';
import { checkLeftovers, createRedisClient, formatLeftoverReport as formatReport } from 'slotgate';
import { ConfigError, parseConfig, parseDocument, readConfigText } from '../config.js';
import { describeRedis, redisConnection, type RedisConfig, type RedisConnection } from '../config-redis.js';
import { redisTarget, UsageError, withTarget, type RedisFlags } from './redis-target.js';

export interface DoctorOptions extends RedisFlags {
  /** A gateway config file whose `redis` section names the Redis (and the prefix). */
  config?: string;
  /** @default the config's redis.prefix, else 'slotgate' */
  prefix?: string;
  fix?: boolean;
  json?: boolean;
}

const NO_REDIS =
  'give --redis URL, --cluster host:port[,...], --sentinel host:port[,...] --master NAME or --config FILE ' +
  '(or set REDIS_URL, REDIS_CLUSTER_NODES or REDIS_SENTINELS)';

type Document = { redis?: unknown; channels?: unknown; settings?: unknown };
type AdaptiveChannel = NonNullable<NonNullable<Parameters<typeof checkLeftovers>[3]>['adaptive']>[number];

/** A config file as written: the doctor needs no channel key, so their variables may be unset. */
async function fileDocument(path: string): Promise<Document | undefined> {
  return parseDocument(await readConfigText(path), path) as Document | undefined;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/** The config's channels that have a max (id → max_concurrency), for the high-water marks; none without a config. */
function channelMaxes(doc: { channels?: unknown } | undefined): Map<string, number> {
  const maxes = new Map<string, number>();
  for (const c of Array.isArray(doc?.channels) ? doc.channels : []) {
    if (
      isObject(c) &&
      typeof c.id === 'string' &&
      typeof c.max_concurrency === 'number' &&
      c.max_concurrency > 0
    )
      maxes.set(c.id, c.max_concurrency);
  }
  return maxes;
}

/** The config's channels with an adaptive limit (`adaptive:` not disabled, and a max); none without a config. */
function adaptiveChannels(doc: Document | undefined, maxes: ReadonlyMap<string, number>): AdaptiveChannel[] {
  const out: AdaptiveChannel[] = [];
  for (const c of Array.isArray(doc?.channels) ? doc.channels : []) {
    const max = isObject(c) && typeof c.id === 'string' ? maxes.get(c.id) : undefined;
    if (max === undefined || !isObject(c.adaptive) || c.adaptive.enabled === false) continue;
    const { min_concurrency: min, enforce } = c.adaptive;
    out.push({
      id: c.id as string,
      maxConcurrency: max,
      ...(typeof min === 'number' && { minConcurrency: min }),
      ...(enforce === false && { enforce: false }),
    });
  }
  return out;
}

/** The validated `redis` section to check: the config file's, with what the flags and environment name instead. */
async function redisSection(
  opts: DoctorOptions,
  env: NodeJS.ProcessEnv,
  doc: { redis?: unknown } | undefined,
): Promise<RedisConfig> {
  const choice = redisTarget(opts, env);
  const raw = doc?.redis;
  // a section of the wrong shape goes to the schema as it is, for its error
  const section = isObject(raw) || raw === undefined ? withTarget(raw, choice) : raw;
  if (section === undefined) {
    throw new UsageError(opts.config ? `${opts.config} has no redis section; ${NO_REDIS}` : NO_REDIS);
  }
  if (opts.prefix !== undefined && isObject(section)) section.prefix = opts.prefix;
  return parseConfig({ redis: section }, opts.config ?? 'the command line', env).redis!;
}

const FAIL_FAST: RedisOptions = { maxRetriesPerRequest: 1, connectTimeout: 3000, retryStrategy: () => null };

/**
 * The library's client, made to fail at once when Redis cannot be reached (a one-shot check exits 2, never waits), and
 * the last connection error it saw (the reason a command then fails with "Connection is closed").
 */
function doctorClient(c: RedisConnection) {
  const client = createRedisClient({
    ...(c.url !== undefined && { url: c.url }),
    ...(c.cluster && {
      cluster: { ...c.cluster, options: { ...c.cluster.options, clusterRetryStrategy: () => null } },
    }),
    ...(c.sentinel && {
      sentinel: { ...c.sentinel, options: { ...c.sentinel.options, sentinelRetryStrategy: () => null } },
    }),
    redisOptions: { ...c.redisOptions, ...FAIL_FAST },
  });
  let last: Error | undefined;
  client.on('error', (err: Error) => (last = err)); // the failed command's message names no cause: this does
  return { client, lastError: () => last };
}

export async function doctor(opts: DoctorOptions, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let redis: RedisConfig;
  let maxes: Map<string, number>;
  let adaptive: AdaptiveChannel[];
  let adaptiveEnabled: boolean;
  try {
    const doc = opts.config ? await fileDocument(opts.config) : undefined;
    maxes = channelMaxes(doc);
    adaptive = adaptiveChannels(doc, maxes);
    adaptiveEnabled = !(isObject(doc?.settings) && doc.settings.adaptive_enabled === false);
    redis = await redisSection(opts, env, doc);
  } catch (err) {
    if (!(err instanceof UsageError || err instanceof ConfigError)) throw err;
    console.error(`slotgate doctor: ${err.message}`);
    return 2;
  }
  const { client, lastError } = doctorClient(redisConnection(redis));
  let connected = false;
  client.once('ready', () => (connected = true));
  try {
    const report = await checkLeftovers(client, redis.prefix, opts.fix === true, {
      adaptive,
      adaptiveEnabled,
    });
    console.log(opts.json ? JSON.stringify(report, null, 2) : formatReport(report, opts.fix === true, maxes));
    if (report.denied?.length) return 1;
    return report.findings.length > 0 && !opts.fix ? 1 : 0;
  } catch (err) {
    const cause = lastError();
    console.error(
      connected || !cause
        ? `slotgate doctor: ${(err as Error).message}`
        : `slotgate doctor: cannot reach ${describeRedis(redis)}: ${cause.message} — check the address and that Redis is running`,
    );
    return 2;
  } finally {
    client.disconnect();
  }
}
