/**
 * The gateway's HTTP app alone: buildApp on a MemoryStore with mock channels (no latency), driven through
 * `app.inject()`. No Redis, no open port. JSON and SSE answers, the error shapes of both APIs, the capacity 429's
 * Retry-After, and whose token each route reads.
 */
import { describe, expect, it } from 'vitest';
import type { Ticket } from 'slotgate';
import type { GatewayChannel } from '../../packages/gateway/src/channels.js';
import {
  ADMIN_TOKEN,
  BODY_LIMIT,
  REPLY,
  TOKEN,
  anthropic,
  expectAnthropicError,
  expectOpenAIError,
  openai,
  post,
  testApp as setup,
} from '../helpers/app.js';

describe('buildApp through inject', () => {
  it('passes a JSON answer through with the channel and request id headers', async () => {
    const { app } = setup();
    const res = await post(app, '/v1/chat/completions', openai, { model: 'gpt-mock', messages: [] });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.headers['x-slotgate-channel']).toBe('mock-a');
    expect(res.headers['x-request-id']).toEqual(expect.any(String));
    const body = res.json() as {
      object: string;
      model: string;
      choices: Array<{ message: { content: string } }>;
    };
    expect(body).toMatchObject({ object: 'chat.completion', model: 'gpt-mock' });
    expect(body.choices[0]?.message.content).toBe(REPLY);

    const message = await post(app, '/v1/messages', anthropic, { model: 'claude-mock', max_tokens: 8 });
    expect(message.statusCode).toBe(200);
    expect(message.json()).toMatchObject({ type: 'message', content: [{ type: 'text', text: REPLY }] });
  });

  it('passes an SSE answer through whole, in both shapes', async () => {
    const { app } = setup();
    const res = await post(app, '/v1/chat/completions', openai, { model: 'gpt-mock', stream: true });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
    const events = res.body.split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    const text = events
      .slice(0, -1)
      .map((e) => JSON.parse(e.replace(/^data: /, '')) as { choices: Array<{ delta: { content?: string } }> })
      .map((e) => e.choices[0]?.delta.content ?? '')
      .join('');
    expect(text).toBe(REPLY);

    const message = await post(app, '/v1/messages', anthropic, { model: 'claude-mock', stream: true });
    expect(message.statusCode).toBe(200);
    expect(message.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(message.body).toMatch(/^event: message_start\n/);
    expect(message.body).toMatch(/event: message_stop\ndata: \{"type":"message_stop"\}\n\n$/);
  });

  it('401 without a valid token', async () => {
    const { app } = setup();
    const body = { model: 'gpt-mock' };
    expectOpenAIError(await post(app, '/v1/chat/completions', {}, body), 401, 'invalid_api_key');
    expectOpenAIError(
      await post(app, '/v1/chat/completions', { authorization: 'Bearer nope' }, body),
      401,
      'invalid_api_key',
    );
    expectAnthropicError(await post(app, '/v1/messages', {}, body), 401, 'authentication_error');
    expectAnthropicError(
      await post(app, '/v1/messages', { 'x-api-key': 'nope' }, body),
      401,
      'authentication_error',
    );
  });

  it('reads x-api-key on an OpenAI route only without an Authorization header', async () => {
    const { app } = setup();
    const body = { model: 'gpt-mock' };
    expect((await post(app, '/v1/chat/completions', anthropic, body)).statusCode).toBe(200);
    expectOpenAIError(
      await post(app, '/v1/chat/completions', { ...anthropic, authorization: 'Basic eDp5' }, body),
      401,
      'invalid_api_key',
    );
    // an Anthropic route reads it beside another scheme
    expect(
      (await post(app, '/v1/messages', { ...anthropic, authorization: 'Basic eDp5' }, body)).statusCode,
    ).toBe(200);
  });

  it('admin routes read only `Authorization: Bearer`', async () => {
    const { app } = setup();
    const status = (headers: Record<string, string>) =>
      app.inject({ method: 'GET', url: '/admin/status', headers });
    expect((await status({ authorization: `Bearer ${ADMIN_TOKEN}` })).statusCode).toBe(200);
    expectOpenAIError(await status({ 'x-api-key': ADMIN_TOKEN }), 401, 'unauthorized_admin');
    expectOpenAIError(await status({ authorization: `Bearer ${TOKEN}` }), 401, 'unauthorized_admin');
  });

  it('400 for a body that is not JSON, not an object, or has no model', async () => {
    const { app } = setup();
    for (const body of ['{"model":', '[1]', '{"messages":[]}', '']) {
      expectOpenAIError(await post(app, '/v1/chat/completions', openai, body), 400, 'invalid_request_error');
      expectAnthropicError(await post(app, '/v1/messages', anthropic, body), 400, 'invalid_request_error');
    }
  });

  it('404 for an unknown model and an unknown route', async () => {
    const { app } = setup();
    const body = { model: 'no-such-model' };
    expectOpenAIError(await post(app, '/v1/chat/completions', openai, body), 404, 'model_not_found');
    expectAnthropicError(await post(app, '/v1/messages', anthropic, body), 404, 'not_found_error');
    expectOpenAIError(await app.inject({ method: 'GET', url: '/v1/nowhere?x=1' }), 404, 'not_found');
    expectAnthropicError(await post(app, '/v1/messages/nowhere', anthropic, {}), 404, 'not_found_error');
  });

  it('413 for a body over body_limit_bytes', async () => {
    const { app } = setup();
    const body = { model: 'gpt-mock', padding: 'x'.repeat(BODY_LIMIT) };
    expectOpenAIError(await post(app, '/v1/chat/completions', openai, body), 413, 'request_too_large');
    expectAnthropicError(await post(app, '/v1/messages', anthropic, body), 413, 'request_too_large');
  });

  it('429 with Retry-After when every candidate is full and waiting is off', async () => {
    const { app, admission, channel } = setup();
    const held: Ticket<GatewayChannel> = await admission.acquire({ candidates: [channel] });
    try {
      const res = await post(app, '/v1/chat/completions', openai, { model: 'gpt-mock' });
      expectOpenAIError(res, 429, 'channel_capacity_exhausted');
      expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      const message = await post(app, '/v1/messages', anthropic, { model: 'claude-mock' });
      expectAnthropicError(message, 429, 'rate_limit_error');
      expect(Number(message.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    } finally {
      await held.release();
    }
    expect((await post(app, '/v1/chat/completions', openai, { model: 'gpt-mock' })).statusCode).toBe(200);
  });
});
