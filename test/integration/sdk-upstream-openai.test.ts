/**
 * The official `openai` SDK (6.30.1, baseURL `<gateway>/v1`, no retries) through the gateway to an `openai` channel
 * on a fake upstream that records what arrived, on every OpenAI route the gateway forwards: chat completions (plain,
 * `stream: true`, `.stream()`), Responses (plain and streamed), legacy completions, embeddings (base64, the SDK's
 * default), images; and `models.list`, which the gateway answers itself. Each time the upstream got the SDK's body
 * byte for byte, the channel's key as `Authorization: Bearer` (never the client's token) and the SDK's `accept`,
 * `content-type` and `user-agent`, and the SDK parsed the upstream's answer (real API shapes, SSE for streams).
 * Then errors (an upstream 400 and 500 passed through with the gateway's request id, slotgate's own 429 with
 * `retry-after-ms`) and an aborted stream that frees its slot. The mock's shapes: sdk-mock.test.ts.
 */
import OpenAI, { type APIError } from 'openai';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeUpstream, gate, sseData, type ReceivedRequest } from '../helpers/fake-upstream.js';
import {
  SECRETS,
  configDoc,
  eventually,
  expectNoSecretsLogged,
  startGateway,
  within,
  type TestGateway,
} from '../helpers/gateway.js';
import { useCleanups } from '../helpers/cleanups.js';
import { CHAT_COMPLETION, openaiOf, type SentRequest } from '../helpers/sdk.js';

const cleanups = useCleanups('all');
expectNoSecretsLogged();

const sent: SentRequest[] = [];
let up: FakeUpstream;
let gw: TestGateway;
let openai: OpenAI;

/** A gateway with one `openai` channel `id` of max 1 on the fake upstream. */
async function gateway(id: string, settings: Record<string, unknown>): Promise<TestGateway> {
  const channel = { id, type: 'openai', base_url: up.url(id), key: SECRETS.channelKey, models: ['gpt-x'] };
  const started = await startGateway(configDoc({ channels: [{ ...channel, max_concurrency: 1 }], settings }));
  cleanups.push(() => started.close());
  return started;
}

const client = (url: string) => openaiOf(url, { sent });

beforeAll(async () => {
  up = await FakeUpstream.start();
  cleanups.push(() => up.close());
  gw = await gateway('oa', { wait_timeout_ms: 15_000 });
  openai = client(gw.url);
});
beforeEach(() => {
  up.reset();
  sent.length = 0;
});

/** The one request the upstream received: the SDK's last request, unchanged but for the credentials. */
function expectForwarded(path: string): ReceivedRequest {
  expect(up.bad).toEqual([]);
  expect(up.requests('oa')).toHaveLength(1);
  const req = up.requests('oa')[0]!;
  const sdk = sent.at(-1)!;
  expect(sdk.url).toBe(`${gw.url}/v1${path}`);
  expect([req.method, req.path]).toEqual(['POST', `/v1${path}`]);
  expect(req.body.toString('utf8')).toBe(sdk.body);
  expect(sdk.headers.get('authorization')).toBe(`Bearer ${SECRETS.clientToken}`);
  expect(req.headers.authorization).toBe(`Bearer ${SECRETS.channelKey}`);
  for (const name of ['accept', 'content-type', 'user-agent']) {
    expect(req.headers[name], name).toBe(sdk.headers.get(name));
  }
  expect(JSON.stringify(req.headers)).not.toContain(SECRETS.clientToken);
  return req;
}

const sdkBody = () => JSON.parse(sent.at(-1)!.body) as Record<string, unknown>;

/** The error a call throws (it must throw). */
async function thrown(call: Promise<unknown>): Promise<APIError<number, Headers>> {
  try {
    await call;
  } catch (err) {
    return err as APIError<number, Headers>;
  }
  throw new Error('expected the call to fail');
}

const messages = [{ role: 'user' as const, content: 'hi' }];
const chunk = (delta: Record<string, string>, finish: string | null = null) =>
  sseData({
    id: 'chatcmpl-2',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'gpt-x',
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
const first = chunk({ role: 'assistant', content: 'hel' });
const chatStream = [first, chunk({ content: 'lo' }), chunk({}, 'stop'), 'data: [DONE]\n\n'];
const response = {
  id: 'resp_1',
  object: 'response',
  created_at: 1,
  status: 'completed',
  model: 'gpt-x',
  output: [
    {
      type: 'message',
      id: 'msg_1',
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text: 'hello', annotations: [] }],
    },
  ],
};
const event = (type: string, data: Record<string, unknown>) =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

describe('openai SDK → gateway → openai channel: every route', () => {
  it('chat.completions.create, plain', async () => {
    up.on('oa', { json: CHAT_COMPLETION, headers: { 'x-request-id': 'req_upstream' } });
    const params = { model: 'gpt-x', messages, temperature: 0.5, user: 'u-1' };
    const { data, response: res, request_id } = await openai.chat.completions.create(params).withResponse();
    expect(expectForwarded('/chat/completions').headers['content-type']).toBe('application/json');
    expect(sdkBody()).toEqual(params);
    expect(data.choices[0]!.message.content).toBe('hello');
    expect(data.usage?.total_tokens).toBe(2);
    // the gateway's request id replaces the upstream's
    expect(request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(request_id).toBe(res.headers.get('request-id'));
    expect(res.headers.get('x-slotgate-channel')).toBe('oa');
  });

  it('chat.completions.create({stream: true}) and chat.completions.stream()', async () => {
    up.on('oa', { sse: chatStream });
    const stream = await openai.chat.completions.create({ model: 'gpt-x', messages, stream: true });
    let text = '';
    for await (const c of stream) text += c.choices[0]?.delta.content ?? '';
    expect(text).toBe('hello');
    expect(expectForwarded('/chat/completions').aborted).toBe(false);
    expect(sdkBody()).toMatchObject({ stream: true });

    up.reset();
    up.on('oa', { sse: chatStream });
    const helper = openai.chat.completions.stream({ model: 'gpt-x', messages });
    const deltas: string[] = [];
    helper.on('content', (delta) => deltas.push(delta));
    const final = await helper.finalChatCompletion();
    expect(final.choices[0]!.message.content).toBe('hello');
    expect(final.choices[0]!.finish_reason).toBe('stop');
    expect(deltas.join('')).toBe('hello');
    expectForwarded('/chat/completions');
    expect(sdkBody()).toMatchObject({ stream: true });
  });

  it('responses.create, plain and streamed', async () => {
    up.on('oa', { json: response });
    const whole = await openai.responses.create({ model: 'gpt-x', input: 'hi', instructions: 'be brief' });
    expect(whole.output_text).toBe('hello');
    expectForwarded('/responses');
    expect(sdkBody()).toEqual({ model: 'gpt-x', input: 'hi', instructions: 'be brief' });

    up.reset();
    const inProgress = { ...response, status: 'in_progress', output: [] };
    up.on('oa', {
      sse: [
        event('response.created', { response: inProgress, sequence_number: 0 }),
        event('response.output_text.delta', { item_id: 'msg_1', delta: 'hel', sequence_number: 1 }),
        event('response.output_text.delta', { item_id: 'msg_1', delta: 'lo', sequence_number: 2 }),
        event('response.completed', { response, sequence_number: 3 }),
      ],
    });
    const stream = await openai.responses.create({ model: 'gpt-x', input: 'hi', stream: true });
    const types: string[] = [];
    let text = '';
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.output_text.delta') text += e.delta;
    }
    expect(types).toEqual([
      'response.created',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.completed',
    ]);
    expect(text).toBe('hello');
    expectForwarded('/responses');
    expect(sdkBody()).toMatchObject({ stream: true });
  });

  it('completions.create, embeddings.create (base64 on the wire) and images.generate', async () => {
    up.on('oa', {
      json: {
        id: 'cmpl-1',
        object: 'text_completion',
        created: 1,
        model: 'gpt-x',
        choices: [{ text: 'ok' }],
      },
    });
    const legacy = await openai.completions.create({ model: 'gpt-x', prompt: 'say ok', max_tokens: 3 });
    expect(legacy.choices[0]!.text).toBe('ok');
    expectForwarded('/completions');
    expect(sdkBody()).toEqual({ model: 'gpt-x', prompt: 'say ok', max_tokens: 3 });

    up.reset();
    const vector = [0.5, -0.25, 1];
    const b64 = Buffer.from(new Float32Array(vector).buffer).toString('base64');
    up.on('oa', {
      json: { object: 'list', model: 'gpt-x', data: [{ object: 'embedding', index: 0, embedding: b64 }] },
    });
    const embedded = await openai.embeddings.create({ model: 'gpt-x', input: 'a' });
    expect(embedded.data[0]!.embedding).toEqual(vector); // decoded by the SDK
    expectForwarded('/embeddings');
    expect(sdkBody()).toEqual({ model: 'gpt-x', input: 'a', encoding_format: 'base64' });

    up.reset();
    up.on('oa', { json: { created: 1, data: [{ b64_json: 'aW1n', revised_prompt: 'a cat' }] } });
    const image = await openai.images.generate({ model: 'gpt-x', prompt: 'a cat', size: '256x256' });
    expect(image.data?.[0]).toEqual({ b64_json: 'aW1n', revised_prompt: 'a cat' });
    expectForwarded('/images/generations');
    expect(sdkBody()).toEqual({ model: 'gpt-x', prompt: 'a cat', size: '256x256' });
  });

  it('models.list is answered by the gateway: nothing reaches the upstream', async () => {
    const ids = [];
    for await (const m of openai.models.list()) ids.push(m.id);
    expect(ids).toEqual(['gpt-x']);
    expect(up.total()).toBe(0);
  });
});

describe('errors', () => {
  it("an upstream 400 and 500 reach the SDK as the upstream said, with the gateway's request id", async () => {
    for (const [status, type, cls] of [
      [400, 'invalid_request_error', OpenAI.BadRequestError],
      [500, 'server_error', OpenAI.InternalServerError],
    ] as const) {
      up.reset();
      const error = { message: `upstream says ${status}`, type, param: 'messages', code: `code_${status}` };
      up.on('oa', { status, json: { error }, headers: { 'x-request-id': 'req_upstream' } });
      const err = await thrown(openai.chat.completions.create({ model: 'gpt-x', messages }));
      expect(err).toBeInstanceOf(cls);
      expect(err.status).toBe(status);
      expect(err.error).toEqual(error);
      expect([err.code, err.type, err.param]).toEqual([error.code, type, 'messages']);
      expect(err.message).toContain(error.message);
      expect(err.requestID).toMatch(/^[0-9a-f-]{36}$/);
      expect(err.requestID).toBe(err.headers.get('request-id'));
      expect(err.headers.get('x-slotgate-channel')).toBe('oa');
      expectForwarded('/chat/completions'); // once: a 500 has no other channel to be retried on
    }
  });

  it("slotgate's own 429 (max 1 held, a short wait) is a RateLimitError with retry-after-ms", async () => {
    const short = await gateway('short', { wait_timeout_ms: 150 });
    const sdk = client(short.url);
    const hold = gate();
    up.on('short', { sse: [first, () => hold.promise, chunk({ content: 'lo' }), 'data: [DONE]\n\n'] });
    const holder = await sdk.chat.completions.create({ model: 'gpt-x', messages, stream: true });
    const it = holder[Symbol.asyncIterator]();
    await within(it.next(), 5000, 'the first chunk');
    try {
      const err = await thrown(sdk.chat.completions.create({ model: 'gpt-x', messages }));
      expect(err).toBeInstanceOf(OpenAI.RateLimitError);
      expect(err.code).toBe('channel_capacity_exhausted');
      expect(err.message).toContain('slotgate:');
      expect(err.headers.get('retry-after-ms')).toMatch(/^\d+$/);
      expect(Number(err.headers.get('retry-after-ms'))).toBeGreaterThanOrEqual(100);
      expect(err.headers.get('x-slotgate-channel')).toBeNull();
      expect(err.requestID).toBe(err.headers.get('x-request-id'));
      expect(up.record('short').received).toBe(1); // the refused call never reached the upstream
    } finally {
      hold.open();
    }
    let rest = '';
    for (let r = await it.next(); !r.done; r = await it.next())
      rest += r.value.choices[0]?.delta.content ?? '';
    expect(rest).toBe('lo');
  });
});

describe('aborts', () => {
  it('a streamed chat aborted mid-stream frees its slot: the waiting call is admitted, the upstream saw the close', async () => {
    const hold = gate();
    cleanups.push(() => hold.open());
    up.on('oa', (req) =>
      (JSON.parse(req.body.toString()) as { stream?: boolean }).stream
        ? { sse: [first, () => hold.promise, chunk({ content: 'lo' }), 'data: [DONE]\n\n'] }
        : { json: CHAT_COMPLETION },
    );
    const controller = new AbortController();
    const stream = await openai.chat.completions.create(
      { model: 'gpt-x', messages, stream: true },
      { signal: controller.signal },
    );
    const it = stream[Symbol.asyncIterator]();
    expect((await within(it.next(), 5000, 'the first chunk')).value?.choices[0]?.delta.content).toBe('hel');

    // the channel's only slot is the stream's: the next call waits
    const next = openai.chat.completions.create({ model: 'gpt-x', messages });
    expect(await eventually(() => gw.gateway.admission.stats().channels.oa?.waiting === 1)).toBe(true);
    expect(up.record('oa').received).toBe(1);

    controller.abort();
    expect(await it.next()).toEqual({ done: true, value: undefined }); // the SDK ends an aborted stream quietly
    const answer = await within(next, 10_000, 'the waiting call');
    expect(answer.choices[0]!.message.content).toBe('hello');
    const [streamed, second] = up.requests('oa');
    await within(streamed!.done, 5000, 'the upstream stream closed');
    expect([streamed!.aborted, streamed!.finished]).toEqual([true, false]);
    expect(second!.finished).toBe(true);
    expect(up.record('oa').max).toBe(1);
    expect(
      await eventually(async () => (await gw.gateway.store.readLoads(['oa'])).get('oa')!.active === 0),
    ).toBe(true);
  });
});
