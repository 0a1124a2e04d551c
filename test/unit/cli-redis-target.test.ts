/**
 * Which Redis `slotgate serve` and `slotgate doctor` use: flags first, then the environment, then the config file's
 * `redis` section, whose other keys (prefix, passwords) stay; conflicts and bad lists are clear errors.
 */
import { describe, expect, it } from 'vitest';
import {
  redisTarget,
  UsageError,
  withTarget,
  type RedisFlags,
} from '../../packages/gateway/src/cli/redis-target.js';
import { redisUrlProblem, showRedisUrl } from '../../packages/gateway/src/config-redis.js';
import { parseConfig, type ConfigError } from '../../packages/gateway/src/config.js';

const usage = (flags: RedisFlags, env: NodeJS.ProcessEnv = {}, section?: Record<string, unknown>) => {
  try {
    withTarget(section, redisTarget(flags, env));
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return (err as Error).message;
  }
  throw new Error('expected a UsageError');
};

describe('the Redis a command line names', () => {
  const fileCluster = { prefix: 'p', cluster: { nodes: ['old:1'], password: 'env:PW' } };

  it('flags win over the environment, which wins over the file; the section keeps its other keys', () => {
    const env = { REDIS_URL: 'redis://env:6379' };
    expect(withTarget(fileCluster, redisTarget({ cluster: 'a:1, b:2,' }, env))).toEqual({
      prefix: 'p',
      cluster: { nodes: ['a:1', 'b:2'], password: 'env:PW' },
    });
    expect(withTarget(fileCluster, redisTarget({}, env))).toEqual({ prefix: 'p', url: 'redis://env:6379' });
    expect(withTarget(fileCluster, redisTarget({}, {}))).toEqual(fileCluster);
    expect(withTarget(undefined, redisTarget({}, {}))).toBeUndefined();
    expect(withTarget(undefined, redisTarget({}, { REDIS_CLUSTER_NODES: 'c:3' }))).toEqual({
      cluster: { nodes: ['c:3'] },
    });
  });

  it('a Sentinel set takes the primary from --master, else REDIS_SENTINEL_MASTER, else the file', () => {
    const file = { sentinel: { sentinels: ['s:1'], master_name: 'from-file', password: 'env:PW' } };
    expect(withTarget(file, redisTarget({ sentinel: 's:2', master: 'flag' }, {}))).toEqual({
      sentinel: { sentinels: ['s:2'], master_name: 'flag', password: 'env:PW' },
    });
    expect(withTarget(file, redisTarget({}, { REDIS_SENTINEL_MASTER: 'env' }))).toEqual({
      sentinel: { sentinels: ['s:1'], master_name: 'env', password: 'env:PW' },
    });
    expect(withTarget(file, redisTarget({ sentinel: 's:2' }, {}))).toEqual({
      sentinel: { sentinels: ['s:2'], master_name: 'from-file', password: 'env:PW' },
    });
    // REDIS_SENTINEL_MASTER set for other tools does not bother a non-Sentinel section
    expect(withTarget({ url: 'redis://h:1' }, redisTarget({}, { REDIS_SENTINEL_MASTER: 'm' }))).toEqual({
      url: 'redis://h:1',
    });
  });

  it('conflicts, a missing primary and bad lists are clear errors that never echo a password', () => {
    expect(usage({ redis: 'redis://h:1', cluster: 'a:1' })).toBe(
      'the command line: give one of --redis, --cluster, --sentinel, not --redis and --cluster',
    );
    expect(usage({}, { REDIS_URL: 'redis://h:1', REDIS_SENTINELS: 's:1' })).toBe(
      'the environment: give one of REDIS_URL, REDIS_CLUSTER_NODES, REDIS_SENTINELS, not REDIS_URL and REDIS_SENTINELS',
    );
    expect(usage({ sentinel: 's:1' })).toBe(
      "--sentinel needs the primary's name: --master NAME (or REDIS_SENTINEL_MASTER)",
    );
    expect(usage({ master: 'm' }, {}, { url: 'redis://h:1' })).toBe(
      '--master goes with --sentinel (or REDIS_SENTINELS)',
    );
    expect(usage({ cluster: ' , ' })).toBe('--cluster: expected host:port[,host:port...], got nothing');
    expect(usage({ cluster: 'a:1,b' })).toBe(
      '--cluster: expected host:port (IPv6 in brackets, port 1–65535), got "b"',
    );
    const secret = 'pw-S3CRET-9';
    const message = usage({}, { REDIS_CLUSTER_NODES: `a:1,redis://:${secret}@b:2` });
    expect(message).toBe(
      'REDIS_CLUSTER_NODES: expected host:port (IPv6 in brackets, port 1–65535), got (not shown: it may hold a password)',
    );
  });
});

describe('Redis URLs: flags, environment and the config file', () => {
  it('accepts redis://, rediss://, host:port and a socket path; refuses the rest without echoing a password', () => {
    for (const url of [
      'redis://h:6379/0',
      'rediss://u:pw@h',
      'localhost:6379',
      '127.0.0.1',
      '/run/redis.sock',
    ])
      expect(redisUrlProblem(url), url).toBeUndefined();
    expect(redisUrlProblem('localhost:6399x')).toMatch(/^expected redis:\/\/.*, got "localhost:6399x"$/);
    expect(redisUrlProblem('http://h:6379')).toContain('got "http://h:6379"');
    expect(redisUrlProblem('redis://h:0')).toBeDefined();
    const secret = redisUrlProblem('redis://u:s3cret@h:99999');
    expect(secret).toContain('(not shown');
    expect(secret).not.toContain('s3cret');
    expect(showRedisUrl('redis://u:s3cret@h:6379/2')).toBe('redis://h:6379/2');
  });

  it('a bad --redis or REDIS_URL is a usage error naming where it came from', () => {
    expect(usage({ redis: 'localhost:6399x' })).toMatch(/^--redis: expected redis:\/\//);
    expect(usage({}, { REDIS_URL: 'redis://:pw@h:x' })).toMatch(/^REDIS_URL: expected .*\(not shown/);
  });

  it("the config file's redis.url is checked once its env: reference is resolved", () => {
    const problems = (url: string, env: NodeJS.ProcessEnv = {}) => {
      try {
        parseConfig({ redis: { url } }, 'test.yaml', env);
        return [];
      } catch (err) {
        return (err as ConfigError).issues;
      }
    };
    expect(problems('redis://h:6379')).toEqual([]);
    expect(problems('env:R', { R: 'h:6379' })).toEqual([]);
    expect(problems('env:R', { R: 'redis://u:s3cret@h:nope' })).toEqual([
      'redis.url: expected redis://[user:password@]host[:port][/db] (or rediss:// for TLS, or host:port), got (not shown: it may hold a password)',
    ]);
    expect(problems('env:R')).toEqual([
      'redis.url: expected the environment variable R to be set (from "env:R"), got nothing',
    ]);
  });
});
