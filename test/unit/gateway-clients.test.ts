/**
 * Client limits in the gateway, on a MemoryStore through `app.inject()`: the config keys and their checks, the 429
 * `client_concurrency_exceeded` in both API shapes with Retry-After, a client's limit leaving other clients alone,
 * GET /admin/clients (token names, never keys) and the per-client metrics.
 */
import { describe, expect, it } from 'vitest';
import { ChannelRegistry } from '../../packages/gateway/src/channels.js';
import { ConfigError, parseConfig } from '../../packages/gateway/src/config.js';
import { admin, expectAnthropicError, expectOpenAIError, post, testApp } from '../helpers/app.js';

const HEAVY_KEYS = ['sk-heavy-one-secret', 'sk-heavy-two-secret'];
const LIGHT_KEY = 'sk-light-secret';

/** mock-a (max 1) and a slow mock channel of max 10 that holds each request until the test lets go. */
function setup() {
  return testApp({
    channels: [
      {
        id: 'slow',
        type: 'mock',
        models: ['slow-model'],
        max_concurrency: 10,
        mock: { latency_ms: 400, chunks: 1, chunk_delay_ms: 0 },
      },
    ],
    tokens: [
      { key: HEAVY_KEYS[0], name: 'heavy-1', client: 'heavy', max_concurrency: 1 },
      { key: HEAVY_KEYS[1], name: 'heavy-2', client: 'heavy', max_concurrency: 1 },
      { key: LIGHT_KEY, name: 'light', max_concurrency: 2, weight: 2 },
    ],
  });
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 2000 && !check(); i++) await new Promise((r) => setTimeout(r, 2));
  expect(check()).toBe(true);
}

describe('client limits in the gateway', () => {
  it('a client at its limit gets 429 client_concurrency_exceeded with Retry-After, in both shapes; others are served', async () => {
    const { app, admission } = setup();
    const first = post(app, '/v1/chat/completions', bearer(HEAVY_KEYS[0]!), { model: 'slow-model' });
    await until(() => admission.stats().clients.heavy?.active === 1);

    // the other token of the same client shares the limit
    const refused = await post(app, '/v1/chat/completions', bearer(HEAVY_KEYS[1]!), { model: 'slow-model' });
    const message = expectOpenAIError(refused, 429, 'client_concurrency_exceeded');
    expect(message).toContain('"heavy"');
    expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(refused.body).not.toContain('sk-heavy');
    const anthropic = await post(
      app,
      '/v1/messages',
      { 'x-api-key': HEAVY_KEYS[0]! },
      { model: 'slow-model' },
    );
    expectAnthropicError(anthropic, 429, 'rate_limit_error');
    expect(anthropic.headers['retry-after']).toBeDefined();

    // another client is not held back by heavy's slots
    const light = await post(app, '/v1/chat/completions', bearer(LIGHT_KEY), { model: 'slow-model' });
    expect(light.statusCode).toBe(200);
    expect((await first).statusCode).toBe(200);
    expect(admission.stats().outcomes.client_limit).toBe(2);
    expect(admission.stats().clients).toEqual({});
  });

  it('GET /admin/clients lists clients with token names, limits and slots across the fleet, never a key', async () => {
    const { app, admission } = setup();
    const inFlight = post(app, '/v1/chat/completions', bearer(HEAVY_KEYS[1]!), { model: 'slow-model' });
    await until(() => admission.stats().clients.heavy?.active === 1);
    const res = await app.inject({ method: 'GET', url: '/admin/clients', headers: admin });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual({
      clients: [
        {
          client: 'unit',
          tokens: ['unit'],
          max_concurrency: 0,
          weight: 1,
          active: null,
          waiting: null,
          this_instance: null,
        },
        {
          client: 'heavy',
          tokens: ['heavy-1', 'heavy-2'],
          max_concurrency: 1,
          weight: 1,
          active: 1,
          waiting: 0,
          this_instance: { active: 1, waiting: 0 },
        },
        {
          client: 'light',
          tokens: ['light'],
          max_concurrency: 2,
          weight: 2,
          active: 0,
          waiting: 0,
          this_instance: { active: 0, waiting: 0 },
        },
      ],
    });
    expect(res.body).not.toMatch(/sk-/);
    expect((await app.inject({ method: 'GET', url: '/admin/clients' })).statusCode).toBe(401);

    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toMatch(/^slotgate_client_in_flight\{client="heavy"\} 1$/m);
    expect(metrics).toMatch(/^slotgate_client_in_flight\{client="light"\} 0$/m);
    expect(metrics).toMatch(/^slotgate_client_max_concurrency\{client="light"\} 2$/m);
    expect(metrics).not.toMatch(/client="unit"/); // no limit: not a metric series
    await inFlight;
  });

  it('config: tokens of one client must agree on its limit and weight; the client defaults to the token name', () => {
    const base = { channels: [{ id: 'm', type: 'mock', models: ['x'] }] };
    const issuesOf = (tokens: unknown[]) => {
      try {
        parseConfig({ ...base, tokens }, 'test.yaml');
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        return (err as ConfigError).issues.join('\n');
      }
      throw new Error('expected a ConfigError');
    };
    const issues = issuesOf([
      { key: 'k1', name: 'a', client: 'team', max_concurrency: 2 },
      { key: 'k2', name: 'b', client: 'team', max_concurrency: 3, weight: 2 },
    ]);
    expect(issues).toContain(
      'tokens[1].max_concurrency: tokens of client "team" must give it the same max_concurrency (0 when left out): tokens[0] gives 2',
    );
    expect(issues).toContain(
      'tokens[1].weight: tokens of client "team" must give it the same weight (1 when left out): tokens[0] gives 1',
    );
    // a token naming no client is the client of its name
    expect(
      issuesOf([
        { key: 'k1', name: 'shared' },
        { key: 'k2', name: 'x', client: 'shared', max_concurrency: 2 },
      ]),
    ).toContain('tokens[0] gives 0 (it names no client: its name is its client)');
    expect(issues).not.toMatch(/k1|k2/);
    expect(issuesOf([{ key: 'k3', name: 'c', max_concurrency: -1 }])).toContain('tokens[0].max_concurrency');
    expect(issuesOf([{ key: 'k3', name: 'c', weight: 0 }])).toContain('tokens[0].weight');

    const config = parseConfig(
      {
        ...base,
        tokens: [
          { key: 'k1', name: 'solo', max_concurrency: 4 },
          { key: 'k2', name: 'free' },
        ],
      },
      'test.yaml',
    );
    const registry = new ChannelRegistry(config.channels, config.tokens);
    expect(registry.authenticate('k1')?.client).toEqual({ id: 'solo', maxConcurrency: 4, weight: 1 });
    expect(registry.authenticate('k2')?.client).toEqual({ id: 'free', maxConcurrency: 0, weight: 1 });
  });
});
