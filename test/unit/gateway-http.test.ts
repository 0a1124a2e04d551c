/**
 * The gateway's HTTP surface against a client's mistakes, through `app.inject()` on a MemoryStore: admin bodies of the
 * wrong shape, bodies nested to break a formatter, a store that fails a settings write, channel ids of every length,
 * malformed URLs, client input echoed in messages, client-chosen request ids, and the probes. Each bad input gets a
 * 4xx in slotgate's shape and changes nothing.
 */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { SettingsError, StoreUnavailableError } from 'slotgate';
import {
  ECHO_MAX_CHARS,
  MESSAGE_MAX_CHARS,
  HttpError,
  echo,
} from '../../packages/gateway/src/http-errors.js';
import { cachedReadiness, type Readiness } from '../../packages/gateway/src/readiness.js';
import {
  admin,
  anthropic,
  expectAnthropicError,
  expectOpenAIError,
  openai,
  post,
  testApp,
  type App,
} from '../helpers/app.js';

const cooldown = (app: App, id: string, payload?: string, headers = admin) =>
  app.inject({
    method: 'POST',
    url: `/admin/channels/${id}/cooldown`,
    headers: { ...headers, ...(payload !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(payload !== undefined ? { payload } : {}),
  });

/** `[[[…1…]]]`, `depth` arrays deep. */
const nested = (depth: number) => `${'['.repeat(depth)}1${']'.repeat(depth)}`;

describe('POST /admin/channels/:id/cooldown', () => {
  it('rejects a body that is not an object of `seconds` and `reason` with 400, and cools nothing', async () => {
    const { app, store } = testApp();
    const bodies: Array<[string, RegExp]> = [
      ['null', /got null/],
      ['[]', /got an array/],
      ['5', /got a number/],
      ['"x"', /got a string/],
      ['{"seconds":null}', /`seconds`.*got null/],
      ['{"seconds":"60"}', /`seconds`.*got "60"/],
      ['{"seconds":1.5}', /`seconds`.*got 1.5/],
      ['{"seconds":3601}', /`seconds`.*got 3601/],
      ['{"secs":60}', /Unknown field "secs"/],
      ['{"reason":5}', /`reason`.*got 5/],
      ['{"reason":""}', /`reason`.*got ""/],
      [JSON.stringify({ reason: 'r'.repeat(201) }), /`reason`.*1–200 characters/],
      ['{"seconds":', /not valid JSON/],
      [nested(100), /deeper than 32 levels/],
    ];
    for (const [body, message] of bodies) {
      expect(expectOpenAIError(await cooldown(app, 'mock-a', body), 400, 'invalid_request_error')).toMatch(
        message,
      );
    }
    expect((await store.readLoads(['mock-a'])).get('mock-a')!.coolingDown).toBe(false);
  });

  it('no body and `{}` mean the default length; `seconds` and `reason` are taken as given', async () => {
    const { app, store } = testApp();
    for (const body of [undefined, '', '{}']) {
      const res = await cooldown(app, 'mock-a', body);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({ channel: 'mock-a', seconds: 30, reason: 'set by admin' });
    }
    const res = await cooldown(app, 'mock-a', '{"seconds":90,"reason":"maintenance"}');
    expect(res.json()).toMatchObject({ seconds: 90, reason: 'maintenance' });
    expect((await store.readLoads(['mock-a'])).get('mock-a')!.cooldownRemainingMs).toBeGreaterThan(85_000);
  });
});

describe('PUT /admin/settings', () => {
  const put = (app: App, payload: string) =>
    app.inject({
      method: 'PUT',
      url: '/admin/settings',
      headers: { ...admin, 'content-type': 'application/json' },
      payload,
    });

  it('a deeply nested body is 400 with a short message, never reaching the settings writer', async () => {
    let writes = 0;
    const { app } = testApp({
      bodyLimit: 1024 * 1024,
      putSettings: async () => Promise.reject(new Error(`write ${++writes}`)),
    });
    for (const body of [nested(20_000), `{"retry_times":${nested(20_000)}}`, `{"a":${nested(40)}}`]) {
      const message = expectOpenAIError(await put(app, body), 400, 'invalid_request_error');
      expect(message).toMatch(/deeper than 32 levels/);
    }
    // nested, but not too deep: the settings' own message, bounded
    const flat = expectOpenAIError(
      await put(app, JSON.stringify({ retry_times: Array(5000).fill(1) })),
      400,
      'invalid_settings',
    );
    expect(flat.length).toBeLessThanOrEqual(MESSAGE_MAX_CHARS + 60);
    expect(writes).toBe(0);
  });

  it('a store that fails the write is 503 admission_store_unavailable; a settings error stays 400', async () => {
    const failures: unknown[] = [
      new Error('Connection is closed.'),
      new StoreUnavailableError('settings', 'timed out'),
    ];
    for (const failure of failures) {
      const { app } = testApp({ putSettings: async () => Promise.reject(failure) });
      const res = await put(app, '{"retry_times":2}');
      expect(expectOpenAIError(res, 503, 'admission_store_unavailable')).toMatch(/not applied/);
      expect(res.headers['retry-after']).toBe('1');
    }
    const { app } = testApp({
      putSettings: async () => Promise.reject(new SettingsError(['a bad combination'])),
    });
    expect(expectOpenAIError(await put(app, '{"retry_times":2}'), 400, 'invalid_settings')).toMatch(
      /a bad combination/,
    );
  });
});

describe('channel ids and URLs', () => {
  const longest = 'c'.repeat(128);
  const slashed = 'team/a.b:c@d';

  it('every id the config accepts is addressable, up to 128 characters and with / encoded', async () => {
    const mock = (id: string) => ({ id, type: 'mock', models: ['m'], max_concurrency: 1 });
    const { app, store } = testApp({ channels: [mock(longest), mock(slashed)] });
    for (const id of [longest, slashed]) {
      const res = await cooldown(app, encodeURIComponent(id), '{"seconds":60}');
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({ channel: id });
      expect((await store.readLoads([id])).get(id)!.coolingDown).toBe(true);
      const cleared = await app.inject({
        method: 'DELETE',
        url: `/admin/channels/${encodeURIComponent(id)}/cooldown`,
        headers: admin,
      });
      expect(cleared.statusCode).toBe(200);
      expect((await store.readLoads([id])).get(id)!.coolingDown).toBe(false);
    }
  });

  it('a longer id is 404 in slotgate shape with the id cut short, after the admin token check', async () => {
    const { app } = testApp();
    for (const id of ['c'.repeat(129), 'c'.repeat(5000)]) {
      const res = await cooldown(app, id, '{}');
      const message = expectOpenAIError(res, 404, 'not_found');
      expect(message.length).toBeLessThan(ECHO_MAX_CHARS + 60);
      expect(res.headers['x-request-id']).toEqual(expect.any(String));
      expectOpenAIError(await cooldown(app, id, '{}', {} as typeof admin), 401, 'unauthorized_admin');
    }
  });

  it('a malformed percent-encoding is 400 in slotgate shape, in either API', async () => {
    const { app } = testApp();
    const res = await app.inject({
      method: 'DELETE',
      url: '/admin/channels/%E0%A4%A/cooldown',
      headers: admin,
    });
    expectOpenAIError(res, 400, 'invalid_request_error');
    expect(res.headers['x-request-id']).toEqual(expect.any(String));
    expectAnthropicError(await post(app, '/v1/messages/%zz', anthropic, {}), 400, 'invalid_request_error');
  });
});

describe('client input in error messages', () => {
  it('echo() shows short input whole and cuts long input at ECHO_MAX_CHARS, saying how long it was', () => {
    expect(echo('gpt-4o')).toBe('"gpt-4o"');
    expect(echo(null)).toBe('null');
    expect(echo('a\u0000b')).toBe('"a\\u0000b"');
    const long = echo('x'.repeat(100_000));
    expect(long).toBe(`"${'x'.repeat(ECHO_MAX_CHARS - 1)}… (100002 characters)`);
  });

  it('no message is longer than MESSAGE_MAX_CHARS, and a cut one keeps its start and its end', () => {
    const message = new HttpError('model_not_found', `start ${'x'.repeat(50_000)} end`).message;
    expect(message.length).toBeLessThanOrEqual(MESSAGE_MAX_CHARS + 40);
    expect(message).toMatch(/^start x+ …\(\d+ characters cut\)… x+ end$/);
  });

  it('a 100 KB model name gets a short model_not_found in both shapes', async () => {
    const { app } = testApp({ bodyLimit: 1024 * 1024 });
    const model = 'm'.repeat(100_000);
    const res = await post(app, '/v1/chat/completions', openai, { model });
    expect(expectOpenAIError(res, 404, 'model_not_found')).toMatch(/for this API key's group$/);
    expect(res.body.length).toBeLessThan(2 * MESSAGE_MAX_CHARS);
    const message = await post(app, '/v1/messages', anthropic, { model });
    expectAnthropicError(message, 404, 'not_found_error');
    expect(message.body.length).toBeLessThan(2 * MESSAGE_MAX_CHARS);
  });

  it('an unknown route echoes its path cut short', async () => {
    const { app } = testApp();
    const res = await app.inject({ method: 'GET', url: `/v1/${'p'.repeat(10_000)}?q=1` });
    expect(expectOpenAIError(res, 404, 'not_found').length).toBeLessThan(ECHO_MAX_CHARS + 60);
  });
});

describe('x-request-id', () => {
  it("keeps a client's id of a safe shape, replaces any other, and logs the one it answers with", async () => {
    const lines: string[] = [];
    const logStream = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        lines.push(...chunk.toString().split('\n').filter(Boolean));
        callback();
      },
    });
    const { app } = testApp({ logStream });
    const kept = ['abc-123', 'Root:1.5f_e-9', 'x'.repeat(128)];
    for (const id of kept) {
      const res = await app.inject({ method: 'GET', url: '/livez', headers: { 'x-request-id': id } });
      expect(res.headers['x-request-id']).toBe(id);
    }
    const replaced = ['', 'a b', 'x'.repeat(129), 'id"}{"admin":true', 'ünïcode', '../../etc'];
    for (const id of replaced) {
      const res = await app.inject({ method: 'GET', url: '/livez', headers: { 'x-request-id': id } });
      expect(res.headers['x-request-id']).toMatch(
        /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
      );
    }
    const none = await app.inject({ method: 'GET', url: '/livez' });
    expect(none.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    const logged = new Set(lines.map((l) => (JSON.parse(l) as { reqId?: string }).reqId));
    for (const id of kept) expect(logged).toContain(id);
    for (const id of replaced.filter((id) => id.length > 3)) expect(logged).not.toContain(id);
    for (const id of [none.headers['x-request-id']]) expect(logged).toContain(id);
  });
});

describe('probes', () => {
  it('/livez and /healthz answer 200 whatever readiness says; /readyz follows the readiness check', async () => {
    let readiness: Readiness = { ready: true };
    const { app } = testApp({ ready: async () => readiness });
    const get = (url: string) => app.inject({ method: 'GET', url });
    expect((await get('/readyz')).json()).toEqual({ ready: true });
    readiness = { ready: false, reason: 'the admission store (redis) does not answer: ping timed out' };
    const res = await get('/readyz');
    expect(expectOpenAIError(res, 503, 'not_ready')).toBe(
      'slotgate: not ready: the admission store (redis) does not answer: ping timed out',
    );
    for (const url of ['/livez', '/healthz']) {
      const alive = await get(url);
      expect(alive.statusCode).toBe(200);
      expect(alive.json()).toEqual({ ok: true });
    }
  });

  it('cachedReadiness: concurrent probes share one check, its answer is kept for the TTL, a throw is not ready', async () => {
    let now = 0;
    let calls = 0;
    let answer: () => Promise<Readiness> = async () => ({ ready: true });
    const ready = cachedReadiness(
      () => {
        calls++;
        return answer();
      },
      1000,
      () => now,
    );
    const [a, b] = await Promise.all([ready(), ready()]);
    expect([a, b, calls]).toEqual([{ ready: true }, { ready: true }, 1]);
    now = 999;
    await ready();
    expect(calls).toBe(1);
    now = 1000;
    answer = async () => Promise.reject(new Error('boom'));
    expect(await ready()).toEqual({ ready: false, reason: 'readiness check failed: Error: boom' });
    expect(calls).toBe(2);
    // a check still running is shared however long it takes
    let finish!: (r: Readiness) => void;
    answer = () => new Promise<Readiness>((resolve) => (finish = resolve));
    now = 5000;
    const slow = ready();
    now = 9000;
    const same = ready();
    finish({ ready: true });
    expect(await Promise.all([slow, same])).toEqual([{ ready: true }, { ready: true }]);
    expect(calls).toBe(3);
  });
});
