/** The config file schema: every problem in one report, secrets never echoed. */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig, parseDocument } from '../../packages/gateway/src/config.js';
import { redisConnection } from '../../packages/gateway/src/config-redis.js';
import { checkingIntervalMs, timeoutOptions } from '../../packages/gateway/src/http-options.js';

function problems(input: unknown, env: NodeJS.ProcessEnv = {}): string[] {
  try {
    parseConfig(input, 'test.yaml', env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return [...(err as ConfigError).issues];
  }
  throw new Error('expected a ConfigError');
}

describe('parseConfig', () => {
  it('reports schema problems and settings problems in the same pass', () => {
    const issues = problems({ server: { port: -1 }, settings: { wait_timeout_ms: 999999, bogus: 1 } });
    expect(issues).toHaveLength(3);
    expect(issues[0]).toMatch(/^server\.port: .*got -1$/);
    expect(issues.join('\n')).toContain('Expected `wait_timeout_ms` to be an integer in 0–60000, got 999999');
    expect(issues.join('\n')).toContain('Unknown setting `bogus`');
  });

  it('names an unset env: variable and never prints a secret, even in a wrongly shaped section', () => {
    const secret = 'sk-super-secret-value';
    const issues = problems({
      redis: { url: 'env:NOPE_REDIS_URL' },
      channels: [
        {
          id: 'a',
          type: 'openai',
          base_url: `https://user:${secret}@example.invalid`,
          key: secret,
          models: [],
        },
      ],
    });
    expect(issues.join('\n')).not.toContain(secret);
    expect(issues.join('\n')).toContain('channels[0].models');
    const envIssues = problems({ redis: { url: 'env:NOPE_REDIS_URL' } });
    expect(envIssues).toEqual([
      'redis.url: expected the environment variable NOPE_REDIS_URL to be set (from "env:NOPE_REDIS_URL"), got nothing',
    ]);
  });

  it('accepts a minimal valid config and resolves env: secrets', () => {
    const config = parseConfig(
      { tokens: [{ key: 'env:TOKEN', name: 't' }], channels: [{ id: 'm', type: 'mock', models: ['x'] }] },
      'ok.yaml',
      { TOKEN: 'resolved' },
    );
    expect(config.tokens[0]!.key).toBe('resolved');
    expect(Object.isFrozen(config)).toBe(true);
  });

  it('server time-outs: defaults that bound receiving a request, headers within the request time-out', () => {
    const { server } = parseConfig({}, 'defaults.yaml');
    expect(server).toMatchObject({
      headers_timeout_ms: 10_000,
      request_timeout_ms: 60_000,
      keep_alive_timeout_ms: 72_000,
    });
    expect(timeoutOptions(server)).toEqual({
      requestTimeout: 60_000,
      keepAliveTimeout: 72_000,
      connectionTimeout: 0, // a socket inactivity time-out would cut a silent stream
      http: { headersTimeout: 10_000, connectionsCheckingInterval: 1000 },
    });
    const small = parseConfig({ server: { headers_timeout_ms: 200, request_timeout_ms: 400 } }, 'small.yaml');
    expect(checkingIntervalMs(small.server)).toBe(50);

    expect(problems({ server: { headers_timeout_ms: 5000, request_timeout_ms: 1000 } })).toEqual([
      'server.headers_timeout_ms: expected at most server.request_timeout_ms (1000), got 5000',
    ]);
    expect(problems({ server: { request_timeout_ms: 0, keep_alive_timeout_ms: 'long' } })).toEqual([
      expect.stringMatching(/^server\.request_timeout_ms: .*got 0$/),
      expect.stringMatching(/^server\.keep_alive_timeout_ms: .*got "long"$/),
    ]);
  });

  it('the drain: no delay and 30 s by default; shutdown_timeout_ms, its old name, still read with a warning', () => {
    const defaults = parseConfig({}, 'defaults.yaml');
    expect(defaults.server).toMatchObject({ drain_delay_ms: 0, drain_timeout_ms: 30_000 });
    expect(defaults.server).not.toHaveProperty('shutdown_timeout_ms');
    expect(defaults.warnings).toEqual([]);
    const old = parseConfig({ server: { shutdown_timeout_ms: 5000 } }, 'old.yaml');
    expect(old.server.drain_timeout_ms).toBe(5000);
    expect(old.warnings).toEqual([
      expect.stringContaining('server.shutdown_timeout_ms is now server.drain_timeout_ms'),
    ]);
    const both = parseConfig({ server: { shutdown_timeout_ms: 5000, drain_timeout_ms: 7000 } }, 'both.yaml');
    expect(both.server.drain_timeout_ms).toBe(7000);
    expect(problems({ server: { drain_delay_ms: -1 } })).toEqual([
      expect.stringMatching(/^server\.drain_delay_ms: .*got -1$/),
    ]);
  });
});

describe("parseConfig: a channel's adaptive block", () => {
  const mock = (extra: Record<string, unknown>) => ({
    channels: [{ id: 'm', type: 'mock', models: ['x'], ...extra }],
  });

  it('fills the defaults and keeps max_concurrency as the ceiling', () => {
    const config = parseConfig(mock({ max_concurrency: 8, adaptive: {} }), 'ok.yaml');
    expect(config.channels[0]!.max_concurrency).toBe(8);
    expect(config.channels[0]!.adaptive).toEqual({
      enabled: true,
      min_concurrency: 1,
      enforce: true,
      probe_after: 30,
      latency_tolerance: 0,
      retry_after_cooldown_s: 10,
    });
  });

  it('needs max_concurrency > 0, and min_concurrency at most max_concurrency', () => {
    const needsMax = /^channels\[0\]\.adaptive: needs max_concurrency > 0: the limit adapts below it\b/;
    expect(problems(mock({ adaptive: {} }))).toEqual([expect.stringMatching(needsMax)]);
    expect(problems(mock({ max_concurrency: 0, adaptive: { min_concurrency: 2 } }))).toEqual([
      expect.stringMatching(needsMax),
    ]);
    expect(problems(mock({ max_concurrency: 4, adaptive: { min_concurrency: 5 } }))).toEqual([
      expect.stringMatching(/^channels\[0\]\.adaptive\.min_concurrency: above max_concurrency \(4\)/),
    ]);
    // equal is a fixed limit, and a block turned off checks nothing
    expect(() =>
      parseConfig(mock({ max_concurrency: 4, adaptive: { min_concurrency: 4 } }), 'ok.yaml'),
    ).not.toThrow();
    expect(() => parseConfig(mock({ adaptive: { enabled: false } }), 'ok.yaml')).not.toThrow();
  });
});

describe('parseConfig: redis.cluster and redis.sentinel', () => {
  const PW = 'pw-S3CRET-cluster-41';

  it('redis.tls: files read, env: PEMs taken as they are, the same options for url, cluster and sentinel', () => {
    const dir = mkdtempSync(join(tmpdir(), 'slotgate-config-tls-'));
    try {
      const ca = join(dir, 'ca.pem');
      writeFileSync(ca, '-----BEGIN CERTIFICATE-----\nCA\n');
      const env = {
        CLIENT_KEY: '-----BEGIN PRIVATE KEY-----\nKEY\n',
        CLIENT_CERT: '-----BEGIN CERTIFICATE-----\nC\n',
      };
      const tls = { ca, cert: 'env:CLIENT_CERT', key: 'env:CLIENT_KEY', servername: 'redis.internal' };
      const expected = {
        ca: '-----BEGIN CERTIFICATE-----\nCA\n',
        cert: env.CLIENT_CERT,
        key: env.CLIENT_KEY,
        servername: 'redis.internal',
        rejectUnauthorized: true,
      };
      const connection = (redis: Record<string, unknown>) =>
        redisConnection(parseConfig({ redis: { ...redis, tls } }, 'tls.yaml', env).redis!);
      expect(
        connection({ url: 'redis://10.0.0.5:6380', username: 'gw', password: 'env:CLIENT_KEY' }),
      ).toEqual({
        url: 'redis://10.0.0.5:6380',
        redisOptions: { username: 'gw', password: env.CLIENT_KEY, tls: expected },
      });
      expect(connection({ cluster: { nodes: ['10.0.0.1:7000'] } }).cluster?.tls).toEqual(expected);
      expect(
        connection({ sentinel: { sentinels: ['10.0.0.1:26379'], master_name: 'm' } }).sentinel?.tls,
      ).toEqual(expected);

      expect(problems({ redis: { url: 'redis://h:1', tls: { ca: join(dir, 'missing.pem') } } })).toEqual([
        expect.stringMatching(/^redis\.tls\.ca: cannot read the file .*missing\.pem.*: ENOENT$/),
      ]);
      expect(problems({ redis: { url: 'redis://h:1', tls: { cert: ca } } })).toEqual([
        expect.stringContaining('expected both cert and key'),
      ]);
      const misplaced = problems({ redis: { cluster: { nodes: ['h:1'] }, password: PW } });
      expect(misplaced).toEqual([
        expect.stringContaining('redis.username and redis.password go with redis.url'),
      ]);
      expect(misplaced.join()).not.toContain(PW);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a cluster: nodes, NAT map and env: secrets, mapped to the store options', () => {
    const config = parseConfig(
      {
        redis: {
          cluster: {
            nodes: ['10.0.0.1:7000', '[::1]:7001'],
            nat_map: { '10.0.0.1:7000': 'redis-0.example:17000' },
            username: 'gw',
            password: 'env:CLUSTER_PW',
            tls: true,
            max_redirections: 8,
            slots_refresh_timeout_ms: 5000,
          },
        },
      },
      'cluster.yaml',
      { CLUSTER_PW: PW },
    );
    expect(config.redis).toMatchObject({ prefix: 'slotgate', cluster: { password: PW } });
    expect(redisConnection(config.redis!)).toEqual({
      cluster: {
        nodes: ['10.0.0.1:7000', '[::1]:7001'],
        natMap: { '10.0.0.1:7000': { host: 'redis-0.example', port: 17000 } },
        username: 'gw',
        password: PW,
        tls: true,
        options: { maxRedirections: 8, slotsRefreshTimeout: 5000 },
      },
    });
  });

  it('a sentinel set: every secret resolved from env:, mapped to the store options', () => {
    const env = { A: 'a-pw', B: 'b-user', C: 'c-pw', D: 'd-user' };
    const config = parseConfig(
      {
        redis: {
          sentinel: {
            sentinels: ['s1:26379', 's2:26379'],
            master_name: 'mymaster',
            password: 'env:A',
            username: 'env:B',
            sentinel_password: 'env:C',
            sentinel_username: 'env:D',
          },
        },
      },
      'sentinel.yaml',
      env,
    );
    expect(redisConnection(config.redis!)).toEqual({
      sentinel: {
        sentinels: ['s1:26379', 's2:26379'],
        name: 'mymaster',
        password: 'a-pw',
        username: 'b-user',
        sentinelPassword: 'c-pw',
        sentinelUsername: 'd-user',
      },
    });
    // one unset variable per secret field, each named
    expect(
      problems({
        redis: {
          cluster: { nodes: ['a:1'], password: 'env:NO_PW' },
        },
      }),
    ).toEqual([
      'redis.cluster.password: expected the environment variable NO_PW to be set (from "env:NO_PW"), got nothing',
    ]);
  });

  it('redis.url stays as it was: resolved from env:, the only connection option', () => {
    const config = parseConfig({ redis: { url: 'env:URL' } }, 'url.yaml', { URL: 'redis://10.0.0.5:6379' });
    expect(redisConnection(config.redis!)).toEqual({ url: 'redis://10.0.0.5:6379' });
  });

  it('exactly one of url, cluster and sentinel, and the message names them without echoing secrets', () => {
    expect(problems({ redis: { prefix: 'p' } })).toEqual([
      'redis: expected exactly one of redis.url, redis.cluster and redis.sentinel, got none of them',
    ]);
    const both = problems({
      redis: { url: `redis://:${PW}@h:1`, cluster: { nodes: ['h:1'], password: PW } },
    });
    expect(both).toEqual([
      'redis: expected exactly one of redis.url, redis.cluster and redis.sentinel, got redis.url and redis.cluster',
    ]);
    expect(
      problems({ redis: { url: 'redis://h:1', sentinel: { sentinels: ['h:1'], master_name: 'm' } } }),
    ).toEqual([
      'redis: expected exactly one of redis.url, redis.cluster and redis.sentinel, got redis.url and redis.sentinel',
    ]);
  });

  it('bad addresses are named by path; one that may hold a password is never shown', () => {
    const issues = problems({
      redis: {
        cluster: {
          nodes: ['10.0.0.1:7000', 'no-port', `redis://:${PW}@10.0.0.2:7000`, 'h:70000'],
          nat_map: { 'bad key': 'h:1', 'h:2': 'h' },
          password: 42,
        },
      },
    });
    const text = issues.join('\n');
    expect(text).not.toContain(PW);
    expect(issues).toEqual([
      'redis.cluster.nodes[1]: expected host:port (IPv6 in brackets, port 1–65535), got "no-port"',
      'redis.cluster.nodes[2]: expected host:port (IPv6 in brackets, port 1–65535), got (not shown: it may hold a password)',
      'redis.cluster.nodes[3]: expected host:port (IPv6 in brackets, port 1–65535), got "h:70000"',
      'redis.cluster.nat_map.h:2: expected host:port (IPv6 in brackets, port 1–65535), got "h"',
      'redis.cluster.nat_map.bad key: expected host:port (IPv6 in brackets, port 1–65535) as the key, got "bad key"',
      expect.stringMatching(/^redis\.cluster\.password: .*got \(a secret, not shown\)$/),
    ]);
    // a list written as one string, a URL among the sentinels, and a section of the wrong shape
    const more = problems({
      redis: { sentinel: { sentinels: `${PW}@h:1,h:2`, master_name: '' } },
    });
    expect(more.join('\n')).not.toContain(PW);
    expect(more).toEqual([
      expect.stringMatching(/^redis\.sentinel\.sentinels: .*got \(not shown: it may hold a password\)$/),
      expect.stringMatching(/^redis\.sentinel\.master_name: .*got ""$/),
    ]);
    expect(problems({ redis: { cluster: `user:${PW}@h:1` } })).toEqual([
      expect.stringMatching(/^redis\.cluster: .*got \(a secret, not shown\)$/),
    ]);
    expect(problems({ redis: { cluster: { nodes: [] } } })).toEqual([
      expect.stringMatching(/^redis\.cluster\.nodes: .*got \[\]$/),
    ]);
  });
});

describe('parseDocument: a YAML syntax error', () => {
  function yamlProblem(text: string): string {
    try {
      parseDocument(text, 'broken.yaml');
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      const issues = (err as ConfigError).issues;
      expect(issues).toHaveLength(1);
      return issues[0]!;
    }
    throw new Error('expected a ConfigError');
  }

  it('says what is wrong and where, ending in the position (no dangling colon), quoting none of the file', () => {
    const cases: [string, RegExp][] = [
      ['server:\n  port: 1\n bad: 2\n', /at line 3, column 1$/],
      ['channels: [1, 2\n', /at line \d+, column \d+$/],
      [`admin:\n  token: "${'s3cret-in-the-file'}\n`, /at line \d+, column \d+$/],
      ['a:\n\t- b\n', /^not valid YAML\/JSON: Tabs are not allowed as indentation at line 2, column 1$/],
    ];
    for (const [text, expected] of cases) {
      const problem = yamlProblem(text);
      expect(problem).toMatch(/^not valid YAML\/JSON: \S/);
      expect(problem).toMatch(expected);
      expect(problem).not.toMatch(/[:\s]$/);
      expect(problem).not.toContain('\n');
      expect(problem).not.toContain('s3cret');
    }
  });

  it('reads as one sentence in the ConfigError message', () => {
    try {
      parseDocument('a: b: c\n', 'broken.yaml');
      expect.unreachable();
    } catch (err) {
      expect((err as Error).message).toBe(
        'invalid configuration in broken.yaml:\n' +
          '  - not valid YAML/JSON: Nested mappings are not allowed in compact mappings at line 1, column 4',
      );
    }
  });
});
