/** The config file schema: every problem in one report, secrets never echoed. */
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../packages/gateway/src/config.js';
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
});
