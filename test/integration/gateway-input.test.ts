/**
 * What the gateway does with bad input, on a real Redis: malformed or incomplete bodies,
 * unknown models, missing or wrong tokens (OpenAI and Anthropic error shapes), oversized bodies, invalid settings
 * updates (rejected whole), admin routes without the admin token, and config files that turn invalid on reload.
 */
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { loadConfigFile } from '../../packages/gateway/src/config.js';
import type { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import {
  ADMIN,
  CLIENT,
  SECRETS,
  call,
  chat,
  configDoc,
  startGateway,
  type TestGateway,
  expectNoSecretsLogged,
} from '../helpers/gateway.js';
import { redisUrl } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

const mock = (id: string, models: string[], extra: Record<string, unknown> = {}) => ({
  id,
  type: 'mock',
  models,
  max_concurrency: 2,
  mock: { latency_ms: 0, chunks: 2, chunk_delay_ms: 0 },
  ...extra,
});

async function gateway(
  extra: Record<string, unknown> = {},
  options: Parameters<typeof startGateway>[1] = {},
): Promise<TestGateway> {
  const gw = await startGateway(
    configDoc({
      channels: [mock('m1', ['gpt-x', 'claude-x']), mock('vip-only', ['vip-model'], { groups: ['vip'] })],
      ...extra,
    }),
    { listen: false, ...options },
  );
  cleanups.push(() => gw.close());
  return gw;
}

interface Sent {
  method?: 'GET' | 'POST' | 'PUT' | 'DELETE';
  url: string;
  headers?: Record<string, string>;
  body?: string | Buffer | object;
}

async function inject(gw: TestGateway, sent: Sent) {
  const payload =
    sent.body === undefined || typeof sent.body === 'string' || Buffer.isBuffer(sent.body)
      ? sent.body
      : JSON.stringify(sent.body);
  const res = await gw.gateway.app.inject({
    method: sent.method ?? (payload === undefined ? 'GET' : 'POST'),
    url: sent.url,
    headers: { ...(payload !== undefined ? { 'content-type': 'application/json' } : {}), ...sent.headers },
    ...(payload !== undefined ? { payload } : {}),
  });
  return { status: res.statusCode, headers: res.headers, body: res.json() as Record<string, unknown> };
}

/** The OpenAI error body: `{"error":{"message","type","code"}}`. */
function openaiError(
  res: { status: number; body: Record<string, unknown> },
  status: number,
  code: string,
  type: string,
) {
  expect(res.status).toBe(status);
  const error = (res.body as { error: { code: string; type: string; message: string } }).error;
  expect(error).toMatchObject({ code, type });
  expect(typeof error.message).toBe('string');
  return error.message;
}

/** The Anthropic error body: `{"type":"error","error":{"type","message"}}`. */
function anthropicError(
  res: { status: number; body: Record<string, unknown> },
  status: number,
  type: string,
) {
  expect(res.status).toBe(status);
  expect(res.body.type).toBe('error');
  const error = (res.body as { error: { type: string; message: string } }).error;
  expect(error.type).toBe(type);
  expect(typeof error.message).toBe('string');
  return error.message;
}

describe('client input', () => {
  it('malformed JSON, a non-object body, a missing or non-string model → 400 invalid_request_error', async () => {
    const gw = await gateway();
    const url = '/v1/chat/completions';
    for (const body of ['{"model": "gpt-x", ', 'not json at all', '']) {
      const message = openaiError(
        await inject(gw, { url, headers: CLIENT, body }),
        400,
        'invalid_request_error',
        'invalid_request_error',
      );
      expect(message).toMatch(/not valid JSON/);
    }
    expect(
      openaiError(
        await inject(gw, { url, headers: CLIENT, body: '[1,2]' }),
        400,
        'invalid_request_error',
        'invalid_request_error',
      ),
    ).toMatch(/JSON object/);
    for (const body of [{ messages: [] }, { model: 42 }, { model: '' }]) {
      expect(
        openaiError(
          await inject(gw, { url, headers: CLIENT, body }),
          400,
          'invalid_request_error',
          'invalid_request_error',
        ),
      ).toMatch(/`model`/);
    }
    // the Anthropic route answers in the Anthropic shape
    anthropicError(
      await inject(gw, {
        url: '/v1/messages',
        headers: { 'x-api-key': SECRETS.clientToken },
        body: '{"model":',
      }),
      400,
      'invalid_request_error',
    );
    anthropicError(
      await inject(gw, { url: '/v1/messages', headers: { 'x-api-key': SECRETS.clientToken }, body: {} }),
      400,
      'invalid_request_error',
    );
  });

  it('an unknown model, or one of another group → 404 model_not_found', async () => {
    const gw = await gateway();
    const message = openaiError(
      await inject(gw, { url: '/v1/chat/completions', headers: CLIENT, body: chat('no-such-model') }),
      404,
      'model_not_found',
      'invalid_request_error',
    );
    expect(message).toContain('no-such-model');
    openaiError(
      await inject(gw, { url: '/v1/embeddings', headers: CLIENT, body: chat('vip-model') }),
      404,
      'model_not_found',
      'invalid_request_error',
    );
    // the vip token may use it
    const vip = await inject(gw, {
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${SECRETS.vipToken}` },
      body: chat('vip-model'),
    });
    expect(vip.status).toBe(200);
    anthropicError(
      await inject(gw, {
        url: '/v1/messages',
        headers: { 'x-api-key': SECRETS.clientToken },
        body: chat('nope'),
      }),
      404,
      'not_found_error',
    );
  });

  it('a missing or invalid token → 401 invalid_api_key (Anthropic shape on /v1/messages with x-api-key)', async () => {
    const gw = await gateway();
    for (const headers of [
      {} as Record<string, string>,
      { authorization: 'Bearer sk-wrong' },
      { authorization: SECRETS.clientToken },
    ]) {
      openaiError(
        await inject(gw, { url: '/v1/chat/completions', headers, body: chat('gpt-x') }),
        401,
        'invalid_api_key',
        'invalid_request_error',
      );
    }
    for (const url of ['/v1/completions', '/v1/embeddings', '/v1/images/generations', '/v1/responses']) {
      openaiError(
        await inject(gw, { url, headers: { authorization: 'Bearer nope' }, body: chat('gpt-x') }),
        401,
        'invalid_api_key',
        'invalid_request_error',
      );
    }
    openaiError(await inject(gw, { url: '/v1/models' }), 401, 'invalid_api_key', 'invalid_request_error');
    anthropicError(
      await inject(gw, {
        url: '/v1/messages',
        headers: { 'x-api-key': 'sk-ant-wrong' },
        body: chat('claude-x'),
      }),
      401,
      'authentication_error',
    );
    anthropicError(
      await inject(gw, { url: '/v1/messages', body: chat('claude-x') }),
      401,
      'authentication_error',
    );
    // the right x-api-key is accepted on /v1/messages
    const ok = await inject(gw, {
      url: '/v1/messages',
      headers: { 'x-api-key': SECRETS.clientToken },
      body: chat('claude-x'),
    });
    expect(ok.status).toBe(200);
    expect(ok.body.type).toBe('message');
  });

  it('a body over server.body_limit_bytes → 413 request_too_large, by inject and on a real socket', async () => {
    const gw = await gateway(
      { server: { host: '127.0.0.1', port: 0, body_limit_bytes: 1024 } },
      { listen: true },
    );
    const big = JSON.stringify(chat('gpt-x', { padding: 'x'.repeat(2048) }));
    const message = openaiError(
      await inject(gw, { url: '/v1/chat/completions', headers: CLIENT, body: big }),
      413,
      'request_too_large',
      'invalid_request_error',
    );
    expect(message).toContain('1024');
    anthropicError(
      await inject(gw, { url: '/v1/messages', headers: { 'x-api-key': SECRETS.clientToken }, body: big }),
      413,
      'request_too_large',
    );
    const res = await call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: big });
    expect(res.status).toBe(413);
    expect((res.json() as { error: { code: string } }).error.code).toBe('request_too_large');
    // just under the limit is fine
    const small = await inject(gw, { url: '/v1/chat/completions', headers: CLIENT, body: chat('gpt-x') });
    expect(small.status).toBe(200);
  });
});

describe('admin input', () => {
  const routes: Sent[] = [
    { url: '/admin/settings' },
    { method: 'PUT', url: '/admin/settings', body: { retry_times: 3 } },
    { url: '/admin/channels' },
    { method: 'POST', url: '/admin/channels/m1/cooldown', body: { seconds: 60 } },
    { method: 'DELETE', url: '/admin/channels/m1/cooldown' },
    { url: '/admin/status' },
    { url: '/admin/stats' },
  ];

  it('every admin route without the admin token, or with a wrong one, → 401 and changes nothing', async () => {
    const gw = await gateway();
    const wrong: Record<string, string>[] = [
      {},
      { authorization: 'Bearer adm-wrong' },
      { authorization: SECRETS.adminToken }, // not a bearer
      { authorization: `Bearer ${SECRETS.clientToken}` }, // a client token is not an admin token
      { authorization: `Bearer ${SECRETS.adminToken}x` },
    ];
    for (const route of routes) {
      for (const headers of wrong) {
        openaiError(
          await inject(gw, { ...route, headers }),
          401,
          'unauthorized_admin',
          'invalid_request_error',
        );
      }
    }
    expect(gw.gateway.settings.retry_times).toBe(1);
    expect(await (gw.gateway.store as RedisStore).readCooldown('m1')).toBeNull();
    // and the right one works
    for (const route of routes) expect((await inject(gw, { ...route, headers: ADMIN })).status).toBe(200);
    expect(gw.gateway.settings.retry_times).toBe(3);
  });

  it('with no admin token configured, the admin API is closed', async () => {
    const gw = await gateway({ admin: {} });
    for (const route of routes) {
      for (const headers of [{}, { authorization: 'Bearer ' }, ADMIN]) {
        openaiError(
          await inject(gw, { ...route, headers }),
          401,
          'unauthorized_admin',
          'invalid_request_error',
        );
      }
    }
  });

  it('an invalid settings PUT → 400 naming each key, its range and the value; nothing changes anywhere', async () => {
    const gw = await gateway({ settings: { wait_timeout_ms: 1234 } });
    const before = await inject(gw, { url: '/admin/settings', headers: ADMIN });
    expect(before.status).toBe(200);

    const res = await inject(gw, {
      method: 'PUT',
      url: '/admin/settings',
      headers: ADMIN,
      body: { load_cache_ttl_ms: 9000, retry_times: 2, wait_enabled: 'yes', bogus_key: 1 },
    });
    const message = openaiError(res, 400, 'invalid_settings', 'invalid_request_error');
    expect(message).toContain('Expected `load_cache_ttl_ms` to be an integer in 1–5000, got 9000');
    expect(message).toContain('Expected `wait_enabled` to be a boolean, got "yes"');
    expect(message).toMatch(/Unknown setting `bogus_key`.*got 1/);
    expect(message).not.toMatch(/`retry_times` to be/); // the valid key is not blamed…

    const after = await inject(gw, { url: '/admin/settings', headers: ADMIN });
    expect(after.body).toEqual(before.body); // …and not applied either
    expect((after.body.settings as { retry_times: number; wait_timeout_ms: number }).retry_times).toBe(1);
    expect((after.body.settings as { wait_timeout_ms: number }).wait_timeout_ms).toBe(1234);
    const status = await inject(gw, { url: '/admin/status', headers: ADMIN });
    expect(status.body.settings_overrides).toEqual({});
    // nothing was written to the shared settings hash
    const redis = new Redis(redisUrl());
    cleanups.push(() => redis.disconnect());
    const store = gw.gateway.store as RedisStore;
    expect(await redis.hgetall(store.keys.settings())).toEqual({});

    for (const body of ['{"retry_times": 2', '[]', '"x"']) {
      const bad = await inject(gw, { method: 'PUT', url: '/admin/settings', headers: ADMIN, body });
      expect(bad.status).toBe(400);
    }
    expect(await inject(gw, { url: '/admin/settings', headers: ADMIN })).toMatchObject({ body: before.body });

    // a valid update is applied and stored
    const ok = await inject(gw, {
      method: 'PUT',
      url: '/admin/settings',
      headers: ADMIN,
      body: { retry_times: 2 },
    });
    expect(ok.status).toBe(200);
    expect((ok.body.settings as { retry_times: number }).retry_times).toBe(2);
    expect(await redis.hgetall(store.keys.settings())).toEqual({ retry_times: '2' });
  });

  it('a manual cooldown with a bad body or bad seconds → 400 naming the value; an unknown channel → 404; nothing cools', async () => {
    const gw = await gateway();
    const res = await inject(gw, {
      method: 'POST',
      url: '/admin/channels/m1/cooldown',
      headers: ADMIN,
      body: { seconds: 0 },
    });
    expect(openaiError(res, 400, 'invalid_request_error', 'invalid_request_error')).toMatch(
      /`seconds`.*got 0/,
    );
    // bodies that once cooled the channel for the default 30 s (or failed with a 500)
    for (const body of ['null', '[]', '5', '{"seconds":null}']) {
      openaiError(
        await inject(gw, { method: 'POST', url: '/admin/channels/m1/cooldown', headers: ADMIN, body }),
        400,
        'invalid_request_error',
        'invalid_request_error',
      );
    }
    openaiError(
      await inject(gw, { method: 'POST', url: '/admin/channels/nope/cooldown', headers: ADMIN, body: {} }),
      404,
      'not_found',
      'invalid_request_error',
    );
    expect(await (gw.gateway.store as RedisStore).readCooldown('m1')).toBeNull();
  });
});

describe('config reload', () => {
  async function configFile(): Promise<{ path: string; write: (doc: unknown) => Promise<void> }> {
    const dir = await mkdtemp(join(tmpdir(), 'slotgate-reload-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const path = join(dir, 'slotgate.yaml');
    let n = 0;
    return {
      path,
      // replace the file in one step, as deploy tools do: the watcher never sees half a file
      write: async (doc) => {
        const tmp = join(dir, `.next-${++n}`);
        await writeFile(tmp, typeof doc === 'string' ? doc : JSON.stringify(doc, null, 2));
        await rename(tmp, path);
      },
    };
  }

  const oldDoc = () => configDoc({ channels: [mock('old', ['old-model'])] });
  const ask = (gw: TestGateway, model: string) =>
    inject(gw, { url: '/v1/chat/completions', headers: CLIENT, body: chat(model) });
  const status = async (gw: TestGateway) =>
    (await inject(gw, { url: '/admin/status', headers: ADMIN })).body.config as {
      version: number;
      last_error: string | null;
    };

  async function reloadingGateway(doc: Record<string, unknown>) {
    const file = await configFile();
    await file.write(doc);
    const gw = await startGateway(await loadConfigFile(file.path), { listen: false, configPath: file.path });
    cleanups.push(() => gw.close());
    return { gw, file };
  }

  it('an invalid file is rejected: the old config keeps serving and /admin/status shows the error; a valid one takes over', async () => {
    const doc = oldDoc();
    const { gw, file } = await reloadingGateway(doc);
    expect((await ask(gw, 'old-model')).status).toBe(200);
    expect(await gw.gateway.reload()).toBeUndefined();
    expect(await status(gw)).toMatchObject({ version: 1, last_error: null });

    await file.write({ ...doc, channels: [mock('broken', ['new-model'], { max_concurrency: -1 })] });
    const error = await gw.gateway.reload();
    expect(error?.message).toContain('channels[0].max_concurrency');
    expect((await ask(gw, 'old-model')).status).toBe(200);
    expect((await ask(gw, 'new-model')).status).toBe(404);
    const shown = await status(gw);
    expect(shown.version).toBe(1);
    expect(shown.last_error).toContain('channels[0].max_concurrency');
    expect(shown.last_error).toContain(file.path);

    await file.write('channels: [\n  - id: x\n');
    expect((await gw.gateway.reload())?.message).toMatch(/not valid YAML/);
    expect((await status(gw)).last_error).toMatch(/not valid YAML/);
    expect((await ask(gw, 'old-model')).status).toBe(200);

    await file.write({ ...doc, channels: [mock('new', ['new-model']), mock('newer', ['new-model'])] });
    expect(await gw.gateway.reload()).toBeUndefined();
    expect(await status(gw)).toMatchObject({ version: 2, last_error: null });
    expect((await ask(gw, 'new-model')).status).toBe(200);
    expect((await ask(gw, 'old-model')).status).toBe(404);
    const channels = await inject(gw, { url: '/admin/channels', headers: ADMIN });
    expect((channels.body.channels as { id: string }[]).map((c) => c.id)).toEqual(['new', 'newer']);
  });

  it('an empty file is rejected, not read as a config with no channels and no tokens', async () => {
    const { gw, file } = await reloadingGateway(oldDoc());
    await file.write('');
    expect(await gw.gateway.reload()).toBeDefined();
    expect((await status(gw)).last_error).toMatch(/empty/);
    expect((await ask(gw, 'old-model')).status).toBe(200);
    // auth is still on
    expect((await inject(gw, { url: '/v1/chat/completions', body: chat('old-model') })).status).toBe(401);
  });

  it('fixing the file back to the configuration in force clears the error', async () => {
    const doc = oldDoc();
    const { gw, file } = await reloadingGateway(doc);
    await file.write({ ...doc, server: { port: 'eighty' } });
    expect(await gw.gateway.reload()).toBeDefined();
    expect((await status(gw)).last_error).toContain('server.port');
    await file.write(doc);
    expect(await gw.gateway.reload()).toBeUndefined();
    expect(await status(gw)).toMatchObject({ version: 1, last_error: null });
  });

  it('the file watcher reloads a changed file by itself', async () => {
    const doc = oldDoc();
    const { gw, file } = await reloadingGateway(doc);
    await file.write({ ...doc, channels: [mock('watched', ['watched-model'])] });
    const deadline = Date.now() + 5000;
    while ((await ask(gw, 'watched-model')).status !== 200 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    expect((await ask(gw, 'watched-model')).status).toBe(200);
    expect((await status(gw)).version).toBe(2);
  });
});
