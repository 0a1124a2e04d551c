/**
 * examples/slotgate.yaml, the config file the README sends a newcomer to: it loads with the gateway's own loader
 * (its `env:` secrets set to stand-ins), and `slotgate serve --config` runs it as written against a private
 * redis-server and a fake upstream standing in for OpenAI and Anthropic (only the channels' base URLs are replaced):
 * each provider's route reaches its channel with that channel's key, and the admin token opens /admin/status. Its
 * commented `mock` channel, uncommented, serves both APIs with no provider keys.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfigText } from '../../packages/gateway/src/config.js';
import { FakeUpstream } from '../helpers/fake-upstream.js';
import {
  cleanEnv,
  killAllGateways,
  ROOT,
  spawnGateway,
  tempDir,
  writeConfig,
} from '../helpers/gw-gateway.js';
import { RedisServer } from '../helpers/redis-server.js';

const EXAMPLE = 'examples/slotgate.yaml';
const TEXT = readFileSync(join(ROOT, EXAMPLE), 'utf8');

/** The id of the example's commented `mock` channel, for trying the file without provider keys. */
const MOCK_ID = 'try-without-keys';

/** The example with its mock channel uncommented (the `  # ` of each of its lines removed), as a newcomer would. */
function withMock(text = TEXT): string {
  const block = new RegExp(`^  # - id: ${MOCK_ID}\\n(?:  # {3}.*\\n)+`, 'm');
  const found = block.exec(text);
  expect(found, `a commented channel "${MOCK_ID}" in ${EXAMPLE}`).not.toBeNull();
  return text.replace(block, found![0].replace(/^ {2}# /gm, '  '));
}

/** The variables the example reads (`env:NAME` outside comments), each set to a stand-in value. */
const ENV_NAMES = [...TEXT.matchAll(/^[^#\n]*?\benv:([A-Za-z_][A-Za-z0-9_]*)/gm)].map((m) => m[1]!);
const ENV = Object.fromEntries(ENV_NAMES.map((name) => [name, `stand-in-${name}`]));

describe(`${EXAMPLE}`, () => {
  it('loads with the gateway loader: OpenAI and Anthropic channels, secrets from the environment', () => {
    expect(ENV_NAMES.sort()).toEqual([
      'ANTHROPIC_API_KEY',
      'OPENAI_API_KEY',
      'SLOTGATE_ADMIN_TOKEN',
      'SLOTGATE_CLIENT_KEY',
    ]);
    const config = parseConfigText(TEXT, EXAMPLE, ENV);
    expect(config.channels.map((c) => [c.id, c.type, c.key])).toEqual([
      ['openai-main', 'openai', ENV.OPENAI_API_KEY],
      ['anthropic-main', 'anthropic', ENV.ANTHROPIC_API_KEY],
    ]);
    expect(config.channels.every((c) => c.max_concurrency > 0 && c.base_url?.startsWith('https://'))).toBe(
      true,
    );
    expect(config.tokens).toEqual([
      { key: ENV.SLOTGATE_CLIENT_KEY, name: 'my-app', group: 'default', max_concurrency: 0, weight: 1 },
    ]);
    expect(config.admin.token).toBe(ENV.SLOTGATE_ADMIN_TOKEN);
    expect(config.redis?.url).toBe('redis://127.0.0.1:6379');
    expect(config.settings).toMatchObject({ wait_timeout_ms: 5000, max_waiting_per_channel: 32 });
  });

  it('has a commented mock channel that, uncommented, serves its models without provider keys', () => {
    expect(parseConfigText(TEXT, EXAMPLE, ENV).channels.map((c) => c.id)).not.toContain(MOCK_ID);
    const config = parseConfigText(withMock(), EXAMPLE, ENV);
    const mock = config.channels.find((c) => c.id === MOCK_ID);
    expect(mock).toMatchObject({
      type: 'mock',
      models: ['gpt-4o-mini', 'claude-sonnet-4'],
      max_concurrency: 2,
    });
    // it comes first for its models: above every other channel's priority
    expect(config.channels.every((c) => c === mock || c.priority < mock!.priority)).toBe(true);
    expect(config.channels.filter((c) => c.type !== 'mock').flatMap((c) => c.models)).toEqual(
      expect.arrayContaining(mock!.models),
    );
  });

  it('stops with an error naming the variable when one is unset', () => {
    const { OPENAI_API_KEY: _unset, ...rest } = ENV;
    expect(() => parseConfigText(TEXT, EXAMPLE, rest)).toThrow(/OPENAI_API_KEY to be set/);
  });

  describe('served by `slotgate serve --config`', () => {
    let redis: RedisServer;
    let upstream: FakeUpstream;
    let dir: Awaited<ReturnType<typeof tempDir>>;
    beforeAll(async () => {
      [redis, upstream, dir] = await Promise.all([RedisServer.start(), FakeUpstream.start(), tempDir()]);
    });
    afterAll(async () => {
      await killAllGateways();
      await Promise.all([redis?.stop(), upstream?.close(), dir?.remove()]);
    });

    it('forwards each provider route to its channel with its key, and opens the admin API', async () => {
      const text = TEXT.replace('https://api.openai.com/v1', upstream.url('openai-main')).replace(
        'https://api.anthropic.com',
        upstream.url('anthropic-main'),
      );
      expect(text).not.toBe(TEXT);
      const path = await writeConfig(dir.dir, 'slotgate.yaml', text);
      const gw = await spawnGateway({ configPath: path, args: ['--redis', redis.url], env: cleanEnv(ENV) });
      await gw.ready;

      const post = (route: string, body: unknown) =>
        fetch(`${gw.url}${route}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${ENV.SLOTGATE_CLIENT_KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const chat = await post('/v1/chat/completions', {
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(chat.status).toBe(200);
      expect(await chat.json()).toEqual({ channel: 'openai-main' });
      const messages = await post('/v1/messages', {
        model: 'claude-sonnet-4',
        max_tokens: 16,
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(messages.status).toBe(200);
      expect(await messages.json()).toEqual({ channel: 'anthropic-main' });

      const [toOpenAI] = upstream.requests('openai-main');
      expect(toOpenAI!.headers.authorization).toBe(`Bearer ${ENV.OPENAI_API_KEY}`);
      const [toAnthropic] = upstream.requests('anthropic-main');
      expect(toAnthropic!.headers['x-api-key']).toBe(ENV.ANTHROPIC_API_KEY);
      expect(toAnthropic!.headers['anthropic-version']).toBe('2023-06-01');

      const status = await fetch(`${gw.url}/admin/status`, {
        headers: { authorization: `Bearer ${ENV.SLOTGATE_ADMIN_TOKEN}` },
      });
      expect(status.status).toBe(200);
      expect(await status.json()).toMatchObject({ store: 'redis' });
      for (const secret of Object.values(ENV)) expect(gw.output()).not.toContain(secret);
    });

    it('serves both APIs from the uncommented mock channel, with no request reaching a provider', async () => {
      // the providers' base URLs on the fake upstream, to see that nothing reaches them
      const text = withMock(
        TEXT.replace('https://api.openai.com/v1', upstream.url('openai-main')).replace(
          'https://api.anthropic.com',
          upstream.url('anthropic-main'),
        ),
      );
      const before = upstream.requests('openai-main').length + upstream.requests('anthropic-main').length;
      const path = await writeConfig(dir.dir, 'with-mock.yaml', text);
      const gw = await spawnGateway({ configPath: path, args: ['--redis', redis.url], env: cleanEnv(ENV) });
      await gw.ready;
      const post = (route: string, body: unknown) =>
        fetch(`${gw.url}${route}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${ENV.SLOTGATE_CLIENT_KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const chat = await post('/v1/chat/completions', {
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(chat.status).toBe(200);
      expect(chat.headers.get('x-slotgate-channel')).toBe(MOCK_ID);
      expect(await chat.json()).toMatchObject({ object: 'chat.completion' });
      const messages = await post('/v1/messages', {
        model: 'claude-sonnet-4',
        max_tokens: 16,
        messages: [{ role: 'user', content: 'hi' }],
      });
      expect(messages.status).toBe(200);
      expect(messages.headers.get('x-slotgate-channel')).toBe(MOCK_ID);
      expect(await messages.json()).toMatchObject({ type: 'message', role: 'assistant' });
      expect(upstream.requests('openai-main').length + upstream.requests('anthropic-main').length).toBe(
        before,
      );
    });

    it('starts with --redis over a file that uses a deprecated setting, and warns of it', async () => {
      const text = TEXT.replace('settings:\n', 'settings:\n  wait_interval_ms: 100\n');
      expect(text).not.toBe(TEXT);
      const path = await writeConfig(dir.dir, 'deprecated.yaml', text);
      const gw = await spawnGateway({ configPath: path, args: ['--redis', redis.url], env: cleanEnv(ENV) });
      await gw.ready;
      expect(gw.output()).toMatch(/wait_interval_ms/);
    });
  });
});
