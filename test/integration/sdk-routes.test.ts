/**
 * The gateway driven by the official SDKs, `openai` and `@anthropic-ai/sdk`, unchanged (baseURL `<gateway>/v1` for
 * openai, `<gateway>` for anthropic; no retries), against mock channels on the embedded store: `models.retrieve`
 * answers a model the caller's group can use in OpenAI's shape and a NotFoundError otherwise; every answer, the
 * gateway's own errors included, carries the request id as `request-id` (which the Anthropic SDK reads) beside
 * `x-request-id`; and a client route called without its `/v1` (or with it twice) is a 404 naming the path to use.
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CLIENT,
  SECRETS,
  call,
  chat,
  configDoc,
  eventually,
  expectNoSecretsLogged,
  startGateway,
  streamingCall,
  type TestGateway,
} from '../helpers/gateway.js';
import { anthropicOf, openaiOf } from '../helpers/sdk.js';

expectNoSecretsLogged();

let gw: TestGateway;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  gw = await startGateway(
    configDoc({
      redis: false,
      channels: [
        {
          id: 'mk',
          type: 'mock',
          models: ['mock-x', 'org/slashed-x'],
          max_concurrency: 2,
          mock: { latency_ms: 0, chunk_delay_ms: 0 },
        },
        // one slot and no waiting: a second request while one holds it is a 429 of the gateway's own
        {
          id: 'one',
          type: 'mock',
          models: ['busy-x'],
          max_concurrency: 1,
          mock: { latency_ms: 800, chunk_delay_ms: 0 },
        },
        { id: 'vip-any', type: 'mock', groups: ['vip'], models: ['*'], mock: { latency_ms: 0 } },
        { id: 'off', type: 'mock', models: ['off-x'], enabled: false },
      ],
      settings: { wait_enabled: false },
    }),
  );
  openai = openaiOf(gw.url);
  anthropic = anthropicOf(gw.url);
});
afterAll(() => gw?.close());

/** The error a call throws (it must throw). */
async function thrown(call: Promise<unknown>): Promise<unknown> {
  try {
    await call;
  } catch (err) {
    return err;
  }
  throw new Error('expected the call to fail');
}

describe('openai models.retrieve (GET /v1/models/{id})', () => {
  it("answers a model of the caller's group in OpenAI's model shape, as models.list lists it", async () => {
    const model = await openai.models.retrieve('mock-x');
    expect(model).toEqual({ id: 'mock-x', object: 'model', created: 0, owned_by: 'slotgate' });
    const listed = [];
    for await (const m of openai.models.list()) listed.push(m);
    expect(listed).toContainEqual(model);
    // an id with a slash: the SDK sends it percent-encoded, curl may not
    expect((await openai.models.retrieve('org/slashed-x')).id).toBe('org/slashed-x');
    const raw = await call(`${gw.url}/v1/models/org/slashed-x`, { headers: CLIENT });
    expect(raw.status).toBe(200);
    expect(raw.json()).toMatchObject({ id: 'org/slashed-x', object: 'model' });
    // a `*` channel serves any model to its group (models.list cannot name them)
    const vip = openaiOf(gw.url, { apiKey: SECRETS.vipToken });
    expect(await vip.models.retrieve('anything-x')).toMatchObject({ id: 'anything-x', object: 'model' });
  });

  it('is a NotFoundError (404 model_not_found) for a model no enabled channel of the group serves', async () => {
    for (const id of ['unknown-x', 'off-x']) {
      const err = await thrown(openai.models.retrieve(id));
      expect(err).toBeInstanceOf(OpenAI.NotFoundError);
      const e = err as InstanceType<typeof OpenAI.NotFoundError>;
      expect(e.status).toBe(404);
      expect(e.code).toBe('model_not_found');
      expect(e.type).toBe('invalid_request_error');
      expect(e.message).toContain(JSON.stringify(id));
    }
    // the default group does not see the vip group's models
    const vipOnly = await thrown(openai.models.retrieve('anything-x'));
    expect(vipOnly).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('needs the same API key as models.list', async () => {
    const stranger = openaiOf(gw.url, { apiKey: 'not-a-key' });
    const err = await thrown(stranger.models.retrieve('mock-x'));
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((err as InstanceType<typeof OpenAI.AuthenticationError>).code).toBe('invalid_api_key');
  });
});

describe('request-id', () => {
  it("the Anthropic SDK's err.requestID on the gateway's own 401 is the answer's x-request-id", async () => {
    const stranger = anthropicOf(gw.url, { apiKey: 'not-a-key' });
    const err = await thrown(
      stranger.messages.create({
        model: 'mock-x',
        max_tokens: 8,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    );
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    const e = err as InstanceType<typeof Anthropic.AuthenticationError>;
    expect(e.requestID).toBeTruthy();
    expect(e.requestID).toBe(e.headers?.get('x-request-id'));
  });

  it("the Anthropic SDK's err.requestID on the gateway's own 429 is its x-request-id; the openai SDK's is its request-id", async () => {
    const holder = streamingCall(`${gw.url}/v1/chat/completions`, chat('busy-x'), CLIENT);
    expect(
      await eventually(async () => (await gw.gateway.store.readLoads(['one'])).get('one')!.active === 1),
    ).toBe(true);
    const err = await thrown(
      anthropic.messages.create({
        model: 'busy-x',
        max_tokens: 8,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    );
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    const e = err as InstanceType<typeof Anthropic.RateLimitError>;
    expect(e.requestID).toMatch(/^[0-9a-f-]{36}$/);
    expect(e.requestID).toBe(e.headers?.get('x-request-id'));
    expect(e.headers?.get('retry-after')).toBeTruthy();

    const oaErr = await thrown(openai.chat.completions.create(chat('busy-x') as never));
    expect(oaErr).toBeInstanceOf(OpenAI.RateLimitError);
    const o = oaErr as InstanceType<typeof OpenAI.RateLimitError>;
    expect(o.requestID).toBe(o.headers.get('request-id'));
    expect(o.requestID).not.toBe(e.requestID);
    expect(await holder.status).toBe(200);
    await holder.body;
  });

  it("a success carries it too: the Anthropic SDK's _request_id, and a 404 of no route", async () => {
    const params = { model: 'mock-x', max_tokens: 8, messages: [{ role: 'user' as const, content: 'hi' }] };
    const { response, request_id } = await anthropic.messages.create(params).withResponse();
    expect(request_id).toBeTruthy();
    expect(request_id).toBe(response.headers.get('x-request-id'));
    const message = await anthropic.messages.create(params);
    expect(message._request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(message._request_id).not.toBe(request_id);
    const notFound = await fetch(`${gw.url}/nowhere`);
    expect(notFound.status).toBe(404);
    expect(notFound.headers.get('request-id')).toBe(notFound.headers.get('x-request-id'));
    expect(notFound.headers.get('request-id')).toBeTruthy();
  });

  it("follows a client's valid x-request-id; a client's request-id is not read", async () => {
    const chosen = await fetch(`${gw.url}/v1/models`, {
      headers: { ...CLIENT, 'x-request-id': 'trace-42.a:b' },
    });
    expect(chosen.headers.get('x-request-id')).toBe('trace-42.a:b');
    expect(chosen.headers.get('request-id')).toBe('trace-42.a:b');
    const ignored = await fetch(`${gw.url}/v1/models`, { headers: { ...CLIENT, 'request-id': 'mine-1' } });
    expect(ignored.headers.get('request-id')).not.toBe('mine-1');
    expect(ignored.headers.get('request-id')).toBe(ignored.headers.get('x-request-id'));
    const invalid = await fetch(`${gw.url}/v1/models`, { headers: { ...CLIENT, 'x-request-id': 'bad id!' } });
    expect(invalid.headers.get('request-id')).toMatch(/^[0-9a-f-]{36}$/);
    expect(invalid.headers.get('request-id')).toBe(invalid.headers.get('x-request-id'));
  });
});

describe('a client route without its /v1', () => {
  const post = (path: string, body: unknown = chat('mock-x')) =>
    fetch(`${gw.url}${path}`, {
      method: 'POST',
      headers: { ...CLIENT, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });

  it('is a 404 whose message names the /v1 path to use', async () => {
    for (const [method, path] of [
      ['POST', '/chat/completions'],
      ['POST', '/completions'],
      ['POST', '/embeddings'],
      ['POST', '/images/generations'],
      ['POST', '/responses'],
      ['GET', '/models'],
      ['GET', '/models/mock-x'],
    ] as const) {
      const res = method === 'POST' ? await post(path) : await fetch(`${gw.url}${path}`, { headers: CLIENT });
      expect(res.status).toBe(404);
      const body = (await res.json()) as { error: { message: string; code: string } };
      expect(body.error.code).toBe('not_found');
      expect(body.error.message).toContain(`did you mean "/v1${path}"?`);
      expect(body.error.message).toContain('base URL ends in /v1');
    }
    // no hint for a path that is no client route either way
    const other = await post('/nowhere');
    expect(((await other.json()) as { error: { message: string } }).error.message).toBe(
      'no route POST "/nowhere"',
    );
  });

  it('is a NotFoundError naming the path for an openai SDK whose base URL lacks /v1', async () => {
    const noV1 = openaiOf(gw.url, { base: '' });
    const err = await thrown(noV1.chat.completions.create(chat('mock-x') as never));
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as Error).message).toContain('"/v1/chat/completions"');
  });

  it('is a NotFoundError in the Anthropic shape for an Anthropic SDK whose base URL has /v1', async () => {
    const res = await post('/messages', { model: 'mock-x', max_tokens: 8, messages: [] });
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain('"/v1/messages"');
    const doubled = anthropicOf(gw.url, { base: '/v1' });
    const err = await thrown(
      doubled.messages.create({
        model: 'mock-x',
        max_tokens: 8,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    );
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    const e = err as InstanceType<typeof Anthropic.NotFoundError>;
    expect(e.error).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    expect(e.message).toContain('did you mean "/v1/messages"?');
    expect(e.message).toContain("an Anthropic SDK's does not");
    expect(e.requestID).toBe(e.headers?.get('x-request-id'));
  });
});
