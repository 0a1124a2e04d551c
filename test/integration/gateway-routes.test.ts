/**
 * The client API against a fake upstream and mock channels, on real sockets and a real Redis: every OpenAI
 * route and /v1/messages reach the channel's own path with the channel's own credentials and never the client's token;
 * the body arrives byte for byte as sent; GET /v1/models lists what the caller's group may use. Requests reach only
 * channels that speak their route's API (openai for OpenAI routes, anthropic for /v1/messages, mock for both), and a
 * model served only by the other API's channels is a 400 `wrong_api_type` naming the route to use.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { FakeUpstream, sseData } from '../helpers/fake-upstream.js';
import {
  CLIENT,
  SECRETS,
  call,
  chat,
  configDoc,
  eventually,
  startGateway,
  type TestGateway,
  expectNoSecretsLogged,
} from '../helpers/gateway.js';
import { useCleanups } from '../helpers/cleanups.js';

// Registered first, so it runs after the cleanups (after-hooks run in reverse) and sees their log lines too.
expectNoSecretsLogged();
const cleanups = useCleanups('all');
afterEach(() => {
  up.reset();
});

let up: FakeUpstream;
let gw: TestGateway;
const OPENAI_ROUTES = [
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/embeddings',
  '/v1/images/generations',
  '/v1/responses',
];

beforeAll(async () => {
  up = await FakeUpstream.start();
  cleanups.push(() => up.close());
  gw = await startGateway(
    configDoc({
      channels: [
        {
          id: 'oa',
          type: 'openai',
          base_url: `${up.url('oa')}/v1`, // a base URL ending in /v1 is not doubled
          key: SECRETS.channelKey,
          headers: { 'OpenAI-Organization': SECRETS.headerValue },
          models: ['gpt-x', 'emb-x', 'img-x'],
          max_concurrency: 3,
        },
        {
          id: 'an',
          type: 'anthropic',
          base_url: up.url('an'),
          key: SECRETS.anthropicKey,
          models: ['claude-x'],
          max_concurrency: 3,
        },
        // one model on both API types, and one on an anthropic and a mock channel
        {
          id: 'oa-both',
          type: 'openai',
          base_url: up.url('oa-both'),
          key: SECRETS.channelKey,
          models: ['both-x'],
        },
        {
          id: 'an-both',
          type: 'anthropic',
          base_url: up.url('an-both'),
          key: SECRETS.anthropicKey,
          models: ['both-x', 'claude-m'],
        },
        {
          id: 'mk',
          type: 'mock',
          models: ['mock-x', 'claude-m'],
          max_concurrency: 2,
          mock: { latency_ms: 0, chunks: 3, chunk_delay_ms: 0, reply: 'one two three' },
        },
        { id: 'vip-any', type: 'mock', groups: ['vip'], models: ['*'], mock: { latency_ms: 0 } },
        { id: 'vip-named', type: 'mock', groups: ['vip'], models: ['vip-x'], mock: { latency_ms: 0 } },
        { id: 'off', type: 'mock', models: ['off-x'], enabled: false },
      ],
    }),
  );
  cleanups.push(() => gw.close());
});

/** No header the upstream received carries a client-side secret. */
function expectNoClientSecrets(): void {
  for (const req of up.all()) {
    const headers = JSON.stringify(req.headers);
    for (const secret of [SECRETS.clientToken, SECRETS.vipToken, SECRETS.adminToken]) {
      expect(headers).not.toContain(secret);
    }
  }
}

describe('client routes', () => {
  it('every OpenAI route reaches the channel path with the channel key, the body byte for byte', async () => {
    for (const [i, route] of OPENAI_ROUTES.entries()) {
      up.on('oa', { json: { route, ok: true }, headers: { 'x-upstream': 'yes' } }, route);
      // unusual spacing, key order, escapes and non-ASCII text: a re-serialised body would differ
      const raw = `{ "input" : "h\\u00e9llo é ☃ ${i}",\n  "model":"gpt-x", "n": 1.50, "z": [ ] ,"e":1e3}`;
      const res = await call(`${gw.url}${route}`, { headers: CLIENT, body: raw });
      expect(res.status).toBe(200);
      expect(res.json()).toEqual({ route, ok: true });
      expect(res.headers['x-upstream']).toBe('yes');
      expect(res.headers['x-slotgate-channel']).toBe('oa');
      const [received] = up.requests('oa').filter((r) => r.path === route);
      expect(received).toBeDefined();
      expect(received!.method).toBe('POST');
      expect(received!.body.equals(Buffer.from(raw))).toBe(true);
      expect(received!.headers.authorization).toBe(`Bearer ${SECRETS.channelKey}`);
      expect(received!.headers['openai-organization']).toBe(SECRETS.headerValue);
      expect(received!.headers['content-type']).toBe('application/json');
      expect(received!.headers['x-api-key']).toBeUndefined();
    }
    expect(up.requests('oa')).toHaveLength(OPENAI_ROUTES.length);
    expectNoClientSecrets();
  });

  it('a client sending x-api-key to an OpenAI route is authenticated, and the key is not forwarded', async () => {
    up.on('oa', { json: { ok: true } });
    const res = await call(`${gw.url}/v1/chat/completions`, {
      headers: { 'x-api-key': SECRETS.clientToken, 'user-agent': 'test-agent/1' },
      body: chat('gpt-x'),
    });
    expect(res.status).toBe(200);
    const [received] = up.requests('oa');
    expect(received!.headers.authorization).toBe(`Bearer ${SECRETS.channelKey}`);
    expect(received!.headers['x-api-key']).toBeUndefined();
    expect(received!.headers['user-agent']).toBe('test-agent/1');
    expectNoClientSecrets();
  });

  it('/v1/messages reaches an anthropic channel with x-api-key and anthropic-version, never the client token', async () => {
    up.on('an', { json: { type: 'message', content: [] } });
    const body = '{"model":"claude-x","max_tokens":5,  "messages":[{"role":"user","content":"hé"}]}';
    const res = await call(`${gw.url}/v1/messages`, { headers: { 'x-api-key': SECRETS.clientToken }, body });
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ type: 'message', content: [] });
    const [first] = up.requests('an');
    expect(first!.path).toBe('/v1/messages');
    expect(first!.body.toString()).toBe(body);
    expect(first!.headers['x-api-key']).toBe(SECRETS.anthropicKey);
    expect(first!.headers['anthropic-version']).toBe('2023-06-01');
    expect(first!.headers.authorization).toBeUndefined();

    // a client's own anthropic-version and anthropic-beta travel on; a Bearer token works on /v1/messages too
    const again = await call(`${gw.url}/v1/messages`, {
      headers: { ...CLIENT, 'anthropic-version': '2024-10-22', 'anthropic-beta': 'tools-2024' },
      body,
    });
    expect(again.status).toBe(200);
    const second = up.requests('an')[1]!;
    expect(second.headers['x-api-key']).toBe(SECRETS.anthropicKey);
    expect(second.headers['anthropic-version']).toBe('2024-10-22');
    expect(second.headers['anthropic-beta']).toBe('tools-2024');
    expect(second.headers.authorization).toBeUndefined();
    expectNoClientSecrets();
  });

  it('an anthropic SSE stream passes through whole', async () => {
    const events = [
      'event: message_start\ndata: {"type":"message_start"}\n\n',
      'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"text":"hi"}}\n\n',
      'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    ];
    up.on('an', { sse: events, chunkDelayMs: 10 });
    const res = await call(`${gw.url}/v1/messages`, {
      headers: { 'x-api-key': SECRETS.clientToken },
      body: chat('claude-x', { stream: true }),
    });
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(res.text).toBe(events.join(''));
  });

  it('mock channels answer every OpenAI route and /v1/messages in the right shape', async () => {
    const ask = (route: string, body: Record<string, unknown>, headers: Record<string, string> = CLIENT) =>
      call(`${gw.url}${route}`, { headers, body: { model: 'mock-x', ...body } });

    const chatRes = await ask('/v1/chat/completions', { messages: [] });
    expect(chatRes.json()).toMatchObject({
      object: 'chat.completion',
      model: 'mock-x',
      choices: [{ message: { role: 'assistant', content: 'one two three' } }],
    });
    expect((await ask('/v1/completions', { prompt: 'x' })).json()).toMatchObject({
      object: 'text_completion',
      choices: [{ text: 'one two three' }],
    });
    const emb = (await ask('/v1/embeddings', { input: ['a', 'b'] })).json() as {
      object: string;
      data: { embedding: number[] }[];
    };
    expect(emb.object).toBe('list');
    expect(emb.data).toHaveLength(2);
    expect(emb.data[0]!.embedding.length).toBeGreaterThan(0);
    const img = (await ask('/v1/images/generations', { prompt: 'a cat' })).json() as {
      data: { url: string }[];
    };
    expect(img.data[0]!.url).toMatch(/^https:\/\//);
    expect((await ask('/v1/responses', { input: 'x' })).json()).toMatchObject({
      object: 'response',
      status: 'completed',
    });
    expect(
      (await ask('/v1/messages', { max_tokens: 5 }, { 'x-api-key': SECRETS.clientToken })).json(),
    ).toMatchObject({ type: 'message', content: [{ type: 'text', text: 'one two three' }] });

    const stream = await ask('/v1/completions', { prompt: 'x', stream: true });
    expect(stream.headers['content-type']).toMatch(/^text\/event-stream/);
    const data = stream.text.split('\n\n').filter(Boolean);
    expect(data.at(-1)).toBe('data: [DONE]');
    expect(data.length).toBe(4); // three chunks and [DONE]
    // mock channels hold slots like real ones: all of them are back
    expect(
      await eventually(async () => (await gw.gateway.store.readLoads(['mk'])).get('mk')!.active === 0),
    ).toBe(true);
  });

  it('GET /v1/models lists the models of the caller group, named models only, enabled channels only', async () => {
    const res = await call(`${gw.url}/v1/models`, { headers: CLIENT });
    expect(res.status).toBe(200);
    const body = res.json() as { object: string; data: { id: string; object: string; owned_by: string }[] };
    expect(body.object).toBe('list');
    // every model of the group, whichever API serves it (the list is the same on both)
    expect(body.data.map((m) => m.id)).toEqual([
      'both-x',
      'claude-m',
      'claude-x',
      'emb-x',
      'gpt-x',
      'img-x',
      'mock-x',
    ]);
    for (const m of body.data) expect(m).toMatchObject({ object: 'model', owned_by: 'slotgate' });

    const vip = await call(`${gw.url}/v1/models`, {
      headers: { authorization: `Bearer ${SECRETS.vipToken}` },
    });
    expect((vip.json() as { data: { id: string }[] }).data.map((m) => m.id)).toEqual(['vip-x']);
    // the vip group's wildcard channel serves any model; the default group has none
    const any = await call(`${gw.url}/v1/chat/completions`, {
      headers: { authorization: `Bearer ${SECRETS.vipToken}` },
      body: chat('whatever-model'),
    });
    expect(any.status).toBe(200);
    expect(any.headers['x-slotgate-channel']).toBe('vip-any');
    const none = await call(`${gw.url}/v1/chat/completions`, {
      headers: CLIENT,
      body: chat('whatever-model'),
    });
    expect(none.status).toBe(404);
    // a disabled channel serves nothing
    const off = await call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('off-x') });
    expect(off.status).toBe(404);
  });

  it('an OpenAI SSE stream with many small chunks arrives whole and in order', async () => {
    const parts = Array.from({ length: 200 }, (_, i) => sseData({ i }));
    up.on('oa', { sse: [...parts, 'data: [DONE]\n\n'] });
    const res = await call(`${gw.url}/v1/chat/completions`, {
      headers: CLIENT,
      body: chat('gpt-x', { stream: true }),
    });
    expect(res.text).toBe(parts.join('') + 'data: [DONE]\n\n');
  });
});

describe('routing by API type', () => {
  const anthropicClient = { 'x-api-key': SECRETS.clientToken };

  it('an OpenAI route with a model only anthropic channels serve: 400 wrong_api_type naming /v1/messages', async () => {
    for (const route of ['/v1/chat/completions', '/v1/embeddings']) {
      const res = await call(`${gw.url}${route}`, { headers: CLIENT, body: chat('claude-x') });
      expect(res.status).toBe(400);
      const { error } = res.json() as { error: Record<string, string> };
      expect(error).toEqual({
        code: 'wrong_api_type',
        type: 'invalid_request_error',
        message: expect.any(String),
      });
      expect(error.message).toBe(
        `model "claude-x" is served for this API key's group only by anthropic channels, and POST ${route} ` +
          '(the OpenAI API) needs an openai channel: send the request to POST /v1/messages',
      );
    }
    expect(up.total()).toBe(0);
  });

  it('/v1/messages with a model only openai channels serve: 400 in the Anthropic shape naming the OpenAI route', async () => {
    const res = await call(`${gw.url}/v1/messages`, { headers: anthropicClient, body: chat('gpt-x') });
    expect(res.status).toBe(400);
    expect(res.json()).toEqual({
      type: 'error',
      error: {
        type: 'invalid_request_error',
        message:
          'model "gpt-x" is served for this API key\'s group only by openai channels, and POST /v1/messages ' +
          '(the Anthropic Messages API) needs an anthropic channel: send the request to POST /v1/chat/completions ' +
          '(or another OpenAI route)',
      },
    });
    expect(up.total()).toBe(0);
    // a model no channel serves at all is still 404 model_not_found
    const none = await call(`${gw.url}/v1/messages`, { headers: anthropicClient, body: chat('nobody-x') });
    expect(none.status).toBe(404);
    expect(none.json()).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
  });

  it('a model on both API types: each route reaches only the channel of its own type, with its headers', async () => {
    up.on('oa-both', { json: { object: 'chat.completion' } });
    up.on('an-both', { json: { type: 'message' } });
    const n = 8; // both channels are equal candidates by priority and weight: a route-blind pick sends half astray
    for (let i = 0; i < n; i++) {
      const oa = await call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('both-x') });
      expect(oa.status).toBe(200);
      expect(oa.headers['x-slotgate-channel']).toBe('oa-both');
      const an = await call(`${gw.url}/v1/messages`, { headers: anthropicClient, body: chat('both-x') });
      expect(an.status).toBe(200);
      expect(an.headers['x-slotgate-channel']).toBe('an-both');
    }
    const openaiSide = up.requests('oa-both');
    const anthropicSide = up.requests('an-both');
    expect(openaiSide.map((r) => r.path)).toEqual(Array(n).fill('/v1/chat/completions'));
    expect(anthropicSide.map((r) => r.path)).toEqual(Array(n).fill('/v1/messages'));
    for (const r of openaiSide) {
      expect(r.headers.authorization).toBe(`Bearer ${SECRETS.channelKey}`);
      expect(r.headers['anthropic-version']).toBeUndefined();
      expect(r.headers['x-api-key']).toBeUndefined();
    }
    for (const r of anthropicSide) {
      expect(r.headers['x-api-key']).toBe(SECRETS.anthropicKey);
      expect(r.headers['anthropic-version']).toBe('2023-06-01');
      expect(r.headers.authorization).toBeUndefined();
    }
    expect(up.channels().sort()).toEqual(['an-both', 'oa-both']);
    expectNoClientSecrets();
  });

  it('a mock channel serves both routes: an OpenAI route reaches it, not the anthropic channel beside it', async () => {
    up.on('an-both', { json: { type: 'message' } });
    for (let i = 0; i < 6; i++) {
      const oa = await call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('claude-m') });
      expect(oa.status).toBe(200);
      expect(oa.headers['x-slotgate-channel']).toBe('mk');
      expect(oa.json()).toMatchObject({ object: 'chat.completion' });
    }
    expect(up.total()).toBe(0);
    // on /v1/messages both are candidates, and either answers in the Anthropic shape
    for (let i = 0; i < 4; i++) {
      const an = await call(`${gw.url}/v1/messages`, { headers: anthropicClient, body: chat('claude-m') });
      expect(an.status).toBe(200);
      expect(['mk', 'an-both']).toContain(an.headers['x-slotgate-channel']);
      expect(an.json()).toMatchObject({ type: 'message' });
    }
  });
});
