/**
 * Secrets never leave the gateway: after a run through every kind of request — served, streamed, dropped,
 * retried, cooled down, refused for every reason, every admin route, /metrics, /dashboard, and config reloads that
 * fail on a file full of secrets in the wrong places — no channel key, client token, admin token, channel header value
 * or base_url credential appears in any response (status line, headers, body) or in any log line at trace level.
 */
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfigFile } from '../../packages/gateway/src/config.js';
import { FakeUpstream, gate, sseData } from '../helpers/fake-upstream.js';
import {
  ADMIN,
  CLIENT,
  LOG_LINES,
  SECRETS,
  SECRET_VALUES,
  call,
  chat,
  configDoc,
  secretsIn,
  startGateway,
  streamingCall,
  within,
  type Answer,
} from '../helpers/gateway.js';
import { freePort } from '../helpers/redis-server.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups('all');

describe('secrets', () => {
  it('no secret appears in any response, admin output or log line', async () => {
    const up = await FakeUpstream.start();
    cleanups.push(() => up.close());
    const dir = await mkdtemp(join(tmpdir(), 'slotgate-secrets-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const path = join(dir, 'slotgate.yaml');
    const write = async (text: string) => {
      await writeFile(`${path}.next`, text);
      await rename(`${path}.next`, path);
    };
    const deadPort = await freePort();
    const openai = (id: string, extra: Record<string, unknown> = {}) => ({
      id,
      type: 'openai',
      base_url: up.url(id),
      key: SECRETS.channelKey,
      headers: { 'OpenAI-Organization': SECRETS.headerValue },
      models: ['gpt-x'],
      max_concurrency: 2,
      ...extra,
    });
    const doc = configDoc({
      channels: [
        openai('limited', { priority: 30 }),
        openai('dead', { priority: 20, base_url: `http://127.0.0.1:${deadPort}` }),
        openai('main', { priority: 10 }),
        openai('only', { models: ['only-x'], max_concurrency: 1 }),
        openai('timeout', { models: ['timeout-x'] }),
        {
          id: 'anthropic',
          type: 'anthropic',
          base_url: up.url('anthropic'),
          key: SECRETS.anthropicKey,
          models: ['claude-x'],
          max_concurrency: 2,
        },
        {
          id: 'creds-in-url',
          type: 'openai',
          base_url: `http://user:${SECRETS.urlPassword}@127.0.0.1:${deadPort}/v1?api_key=${SECRETS.urlKey}`,
          key: SECRETS.channelKey,
          models: ['never'],
          enabled: false,
        },
        { id: 'mock', type: 'mock', models: ['mock-x'], max_concurrency: 1, mock: { latency_ms: 0 } },
      ],
      settings: { wait_timeout_ms: 300, retry_times: 3 },
      server: { host: '127.0.0.1', port: 0, log_level: 'trace', body_limit_bytes: 2048 },
    });
    await write(JSON.stringify(doc));
    const gw = await startGateway(await loadConfigFile(path), { configPath: path });
    cleanups.push(() => gw.close());

    const hold = gate();
    cleanups.push(() => hold.open());
    up.on('limited', { status: 429, headers: { 'retry-after': '30' }, json: { error: { message: 'slow' } } });
    up.on('main', (req) =>
      JSON.parse(req.body.toString()).stream
        ? { sse: [sseData({ n: 1 }), sseData({ n: 2 }), 'data: [DONE]\n\n'], chunkDelayMs: 5 }
        : { json: { id: 'ok' } },
    );
    up.on('only', { sse: [sseData({ n: 1 }), () => hold.promise, 'data: [DONE]\n\n'] });
    up.on('timeout', { status: 504, json: { error: { message: 'upstream timed out' } } });
    up.on('anthropic', { json: { type: 'message' } });

    const answers: Answer[] = [];
    const record = async (p: Promise<Answer>) => {
      const a = await p;
      answers.push(a);
      return a;
    };
    const client = (route: string, body: unknown, headers: Record<string, string> = CLIENT) =>
      record(call(`${gw.url}${route}`, { headers, body }));
    const admin = (
      route: string,
      init: { method?: string; body?: unknown; headers?: Record<string, string> } = {},
    ) => record(call(`${gw.url}${route}`, { headers: ADMIN, ...init }));

    // served: the 429 channel cools down, the dead one is skipped, main answers (JSON and SSE)
    expect((await client('/v1/chat/completions', chat('gpt-x'))).status).toBe(200);
    expect((await client('/v1/chat/completions', chat('gpt-x', { stream: true }))).status).toBe(200);
    expect(
      (await client('/v1/messages', chat('claude-x'), { 'x-api-key': SECRETS.clientToken })).status,
    ).toBe(200);
    expect((await client('/v1/embeddings', chat('mock-x'))).status).toBe(200);
    expect((await client('/v1/chat/completions', chat('timeout-x'))).status).toBe(504);
    // refused for every reason
    expect((await client('/v1/chat/completions', chat('gpt-x'), {})).status).toBe(401);
    expect(
      (await client('/v1/chat/completions', chat('gpt-x'), { authorization: 'Bearer wrong' })).status,
    ).toBe(401);
    expect((await client('/v1/messages', chat('claude-x'), { 'x-api-key': 'wrong' })).status).toBe(401);
    expect((await client('/v1/chat/completions', '{"model":')).status).toBe(400);
    expect((await client('/v1/chat/completions', {})).status).toBe(400);
    expect((await client('/v1/chat/completions', chat('nope'))).status).toBe(404);
    expect((await client('/v1/chat/completions', chat('gpt-x', { pad: 'x'.repeat(4096) }))).status).toBe(413);
    expect((await client('/v1/nothing-here', chat('gpt-x'))).status).toBe(404);
    expect((await record(call(`${gw.url}/v1/models`, { headers: CLIENT }))).status).toBe(200);
    // a capacity 429 (the only slot held by a stream), and a client that drops its stream
    const holder = streamingCall(`${gw.url}/v1/chat/completions`, chat('only-x', { stream: true }));
    await within(holder.firstChunk, 5000, 'holder');
    expect((await client('/v1/chat/completions', chat('only-x'))).status).toBe(429);
    holder.destroy();

    // every admin route, right and wrong
    for (const route of ['/admin/settings', '/admin/channels', '/admin/status', '/admin/stats']) {
      expect((await admin(route)).status).toBe(200);
      expect((await admin(route, { headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    }
    expect((await admin('/admin/settings', { method: 'PUT', body: { retry_times: 2 } })).status).toBe(200);
    expect((await admin('/admin/settings', { method: 'PUT', body: { retry_times: 99 } })).status).toBe(400);
    expect(
      (await admin('/admin/channels/main/cooldown', { method: 'POST', body: { seconds: 5 } })).status,
    ).toBe(200);
    expect((await admin('/admin/channels/main/cooldown', { method: 'DELETE' })).status).toBe(200);
    expect((await record(call(`${gw.url}/metrics`))).status).toBe(200);
    expect((await record(call(`${gw.url}/dashboard`))).status).toBe(200);

    // the admin view lists channels without their secrets but does show what is safe
    const channels = (await admin('/admin/channels')).json() as { channels: Record<string, unknown>[] };
    const creds = channels.channels.find((c) => c.id === 'creds-in-url')!;
    expect(creds.has_key).toBe(true);
    expect(String(creds.base_url)).toContain('127.0.0.1');

    // reloads of files with secrets in the wrong places: the errors name the paths, never the values
    const leaky = [
      'channels:',
      '  id: leaky',
      '  type: openai',
      `  key: ${SECRETS.channelKey}`,
      `tokens: ${SECRETS.clientToken}`,
      `admin: ${SECRETS.adminToken}`,
      `redis: "redis://:${SECRETS.urlPassword}@127.0.0.1:6379"`,
    ].join('\n');
    await write(leaky);
    const error = await gw.gateway.reload();
    expect(error?.message).toMatch(/channels:.*expected array/);
    expect(error?.message).toMatch(/tokens:/);
    await write(
      JSON.stringify({
        ...doc,
        tokens: [SECRETS.clientToken, { key: SECRETS.vipToken, name: 'vip', group: 'vip', extra: 1 }],
        channels: [{ ...(doc.channels as object[])[0], headers: SECRETS.headerValue }],
      }),
    );
    expect(await gw.gateway.reload()).toBeDefined();
    const status = await admin('/admin/status');
    expect((status.json() as { config: { last_error: string } }).config.last_error).toMatch(/tokens\[0\]/);
    await write(JSON.stringify(doc));
    expect(await gw.gateway.reload()).toBeUndefined();
    expect((await admin('/admin/status')).status).toBe(200);

    await gw.close();

    // what was checked is real: the answers and the trace-level log of this run
    expect(answers.length).toBeGreaterThan(30);
    expect(LOG_LINES.filter((l) => l.includes('"msg":"access"')).length).toBeGreaterThan(30);
    expect(LOG_LINES.some((l) => l.includes('configuration reload rejected'))).toBe(true);
    expect(LOG_LINES.some((l) => l.includes('upstream unreachable'))).toBe(true);
    expect(LOG_LINES.some((l) => l.includes('channel cooling down'))).toBe(true);
    for (const a of answers) {
      const seen = secretsIn(`${a.status} ${JSON.stringify(a.headers)} ${a.text}`);
      expect(seen, `${a.status} ${a.text.slice(0, 200)}`).toEqual([]);
    }
    const leaked = LOG_LINES.filter((line) => secretsIn(line).length > 0);
    expect(leaked).toEqual([]);
    // and the upstream did get the channel's credentials (the secrets exist in this run; they just stay inside)
    expect(up.requests('main')[0]!.headers.authorization).toBe(`Bearer ${SECRETS.channelKey}`);
    expect(SECRET_VALUES.length).toBeGreaterThan(5);
  });
});
