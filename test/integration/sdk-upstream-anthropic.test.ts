/**
 * The official `@anthropic-ai/sdk` (1.17.0, baseURL `<gateway>`, no retries) through the gateway to an `anthropic`
 * channel on a fake upstream that records what arrived: `messages.create` (plain and `stream: true`) and
 * `messages.stream()` with `finalMessage()`. Each time the upstream got the SDK's body byte for byte, the channel's
 * key as `x-api-key` (never the client's token, which the SDK sends as `Authorization: Bearer`) and the SDK's `anthropic-version`, `accept`,
 * `content-type` and `user-agent`, and the SDK parsed the upstream's answer (the Messages API's shapes, its event
 * stream). Then an upstream 400 and 500 passed through with the gateway's request id, and an aborted stream that
 * frees its slot. `messages.countTokens` to an anthropic channel: sdk-mock.test.ts; slotgate's own 429 in the
 * Anthropic shape: sdk-routes.test.ts.
 */
import Anthropic from '@anthropic-ai/sdk';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { FakeUpstream, gate, type ReceivedRequest } from '../helpers/fake-upstream.js';
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
import { anthropicOf, type SentRequest } from '../helpers/sdk.js';

const cleanups = useCleanups('all');
expectNoSecretsLogged();

/** What the SDK sent, as it left the client. */
const sent: SentRequest[] = [];
let up: FakeUpstream;
let gw: TestGateway;
let anthropic: Anthropic;

beforeAll(async () => {
  up = await FakeUpstream.start();
  cleanups.push(() => up.close());
  gw = await startGateway(
    configDoc({
      channels: [
        {
          id: 'an',
          type: 'anthropic',
          base_url: up.url('an'),
          key: SECRETS.anthropicKey,
          models: ['claude-x'],
          max_concurrency: 1,
        },
      ],
      settings: { wait_timeout_ms: 15_000 },
    }),
  );
  cleanups.push(() => gw.close());
  anthropic = anthropicOf(gw.url, { sent });
});
beforeEach(() => {
  up.reset();
  sent.length = 0;
});

/** The `n`th request the upstream received: the SDK's `n`th request, unchanged but for the credentials. */
function expectForwarded(n = 0): ReceivedRequest {
  expect(up.bad).toEqual([]);
  const req = up.requests('an')[n]!;
  const sdk = sent[n]!;
  expect(sdk.url).toBe(`${gw.url}/v1/messages`);
  expect([req.method, req.path]).toEqual(['POST', '/v1/messages']);
  expect(req.body.toString('utf8')).toBe(sdk.body);
  // 1.17.0 sends its API key as `Authorization: Bearer`; the upstream gets only the channel's x-api-key
  expect(sdk.headers.get('authorization')).toBe(`Bearer ${SECRETS.clientToken}`);
  expect(req.headers['x-api-key']).toBe(SECRETS.anthropicKey);
  expect(req.headers.authorization).toBeUndefined();
  expect(sdk.headers.get('anthropic-version')).toBeTruthy();
  for (const name of ['anthropic-version', 'accept', 'content-type', 'user-agent']) {
    expect(req.headers[name], name).toBe(sdk.headers.get(name));
  }
  expect(JSON.stringify(req.headers)).not.toContain(SECRETS.clientToken);
  return req;
}

const sdkBody = (n = 0) => JSON.parse(sent[n]!.body) as Record<string, unknown>;

const params = {
  model: 'claude-x',
  max_tokens: 16,
  system: 'be brief',
  messages: [{ role: 'user' as const, content: 'hi' }],
};
const usage = { input_tokens: 3, output_tokens: 2 };
const message = {
  id: 'msg_1',
  type: 'message',
  role: 'assistant',
  model: 'claude-x',
  content: [{ type: 'text', text: 'hello' }],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage,
};
const event = (type: string, data: Record<string, unknown> = {}) =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
const delta = (text: string) =>
  event('content_block_delta', { index: 0, delta: { type: 'text_delta', text } });
const opening = [
  event('message_start', {
    message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } },
  }),
  event('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
  delta('hel'),
];
const closing = [
  delta('lo'),
  event('content_block_stop', { index: 0 }),
  event('message_delta', {
    delta: { stop_reason: 'end_turn', stop_sequence: null },
    usage: { output_tokens: 2 },
  }),
  event('message_stop'),
];

/** The error a call throws (it must throw). */
async function thrown(call: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  try {
    await call;
  } catch (err) {
    return err as InstanceType<typeof Anthropic.APIError>;
  }
  throw new Error('expected the call to fail');
}

describe('anthropic SDK → gateway → anthropic channel', () => {
  it('messages.create, plain', async () => {
    up.on('an', { json: message, headers: { 'request-id': 'req_upstream' } });
    const { data, request_id } = await anthropic.messages.create(params).withResponse();
    expectForwarded();
    expect(sdkBody()).toEqual(params);
    expect(data.content).toEqual([{ type: 'text', text: 'hello' }]);
    expect(data.usage).toMatchObject(usage);
    // the gateway's request id replaces the upstream's
    expect(request_id).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('messages.create({stream: true}) and messages.stream() + finalMessage()', async () => {
    up.on('an', { sse: [...opening, ...closing] });
    const raw = await anthropic.messages.create({ ...params, stream: true });
    const types: string[] = [];
    let text = '';
    for await (const e of raw) {
      types.push(e.type);
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
    }
    expect(types).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(text).toBe('hello');
    expect(expectForwarded(0).finished).toBe(true);
    expect(sdkBody(0)).toEqual({ ...params, stream: true });

    const stream = anthropic.messages.stream(params);
    const deltas: string[] = [];
    stream.on('text', (t) => deltas.push(t));
    const final = await stream.finalMessage();
    expect(final.content).toEqual([{ type: 'text', text: 'hello' }]);
    expect(final.stop_reason).toBe('end_turn');
    expect(final.usage.output_tokens).toBe(2);
    expect(deltas).toEqual(['hel', 'lo']);
    expectForwarded(1);
    expect(sdkBody(1)).toEqual({ ...params, stream: true });
  });
});

describe('errors', () => {
  it("an upstream 400 and 500 reach the SDK as the upstream said, with the gateway's request id", async () => {
    for (const [status, type, cls] of [
      [400, 'invalid_request_error', Anthropic.BadRequestError],
      [500, 'api_error', Anthropic.InternalServerError],
    ] as const) {
      up.reset();
      sent.length = 0;
      const body = { type: 'error', error: { type, message: `upstream says ${status}` } };
      up.on('an', { status, json: body, headers: { 'request-id': 'req_upstream' } });
      const err = await thrown(anthropic.messages.create(params));
      expect(err).toBeInstanceOf(cls);
      expect(err.status).toBe(status);
      expect(err.error).toEqual(body);
      expect(err.message).toContain(`upstream says ${status}`);
      expect(err.requestID).toMatch(/^[0-9a-f-]{36}$/);
      expect(err.requestID).toBe(err.headers?.get('x-request-id'));
      expect(err.headers?.get('x-slotgate-channel')).toBe('an');
      expect(up.requests('an')).toHaveLength(1); // a 500 has no other channel to be retried on
      expectForwarded();
    }
  });
});

describe('aborts', () => {
  it('messages.stream() aborted mid-stream frees its slot: the waiting call is admitted, the upstream saw the close', async () => {
    const hold = gate();
    cleanups.push(() => hold.open());
    up.on('an', (req) =>
      (JSON.parse(req.body.toString()) as { stream?: boolean }).stream
        ? { sse: [...opening, () => hold.promise, ...closing] }
        : { json: message },
    );
    const controller = new AbortController();
    const stream = anthropic.messages.stream(params, { signal: controller.signal });
    const firstText = new Promise<string>((resolve) => stream.once('text', resolve));
    expect(await within(firstText, 5000, 'the first text')).toBe('hel');

    // the channel's only slot is the stream's: the next call waits
    const next = anthropic.messages.create(params);
    expect(await eventually(() => gw.gateway.admission.stats().channels.an?.waiting === 1)).toBe(true);
    expect(up.record('an').received).toBe(1);

    controller.abort();
    await expect(stream.finalMessage()).rejects.toBeInstanceOf(Anthropic.APIUserAbortError);
    const answer = await within(next, 10_000, 'the waiting call');
    expect(answer.content).toEqual([{ type: 'text', text: 'hello' }]);
    const [streamed, second] = up.requests('an');
    await within(streamed!.done, 5000, 'the upstream stream closed');
    expect([streamed!.aborted, streamed!.finished]).toEqual([true, false]);
    expect(second!.finished).toBe(true);
    expect(up.record('an').max).toBe(1);
    expect(
      await eventually(async () => (await gw.gateway.store.readLoads(['an'])).get('an')!.active === 0),
    ).toBe(true);
  });
});
