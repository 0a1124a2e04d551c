/**
 * The official SDKs, unchanged, against a gateway in process: `openai` and `@anthropic-ai/sdk` parse what a mock
 * channel answers on every shape they ask for (streamed Responses events, base64 embeddings, the usage chunk of a
 * streamed completion, token counts), and Anthropic's `messages.countTokens` reaches an anthropic channel with the
 * SDK's body and the channel's credentials without taking one of its slots.
 */
import Anthropic from '@anthropic-ai/sdk';
import type OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { FakeUpstream, gate } from '../helpers/fake-upstream.js';
import {
  SECRETS,
  call,
  configDoc,
  expectNoSecretsLogged,
  startGateway,
  streamingCall,
  within,
  type TestGateway,
} from '../helpers/gateway.js';
import { useCleanups } from '../helpers/cleanups.js';
import { anthropicOf, openaiOf, type SentRequest } from '../helpers/sdk.js';

const fileCleanups = useCleanups('all');
expectNoSecretsLogged();

const REPLY = 'one two three four five';

let gw: TestGateway;
let up: FakeUpstream;
let openai: OpenAI;
let anthropic: Anthropic;
/** What the Anthropic SDK sent, as it left the client. */
const sent: SentRequest[] = [];

beforeAll(async () => {
  up = await FakeUpstream.start();
  fileCleanups.push(() => up.close());
  gw = await startGateway(
    configDoc({
      channels: [
        {
          id: 'mk',
          type: 'mock',
          models: ['mock-x', 'claude-m'],
          mock: { latency_ms: 0, chunks: 3, chunk_delay_ms: 0, reply: REPLY },
        },
        {
          id: 'ant',
          type: 'anthropic',
          base_url: up.url('ant'),
          key: SECRETS.anthropicKey,
          models: ['claude-up'],
          max_concurrency: 1,
        },
      ],
      settings: { wait_enabled: false },
    }),
  );
  fileCleanups.push(() => gw.close());
  openai = openaiOf(gw.url);
  anthropic = anthropicOf(gw.url, { sent });
});

describe('openai SDK against a mock channel', () => {
  it('responses.create({stream: true}) yields the Responses events in order, with the non-streamed text', async () => {
    const whole = await openai.responses.create({ model: 'mock-x', input: 'hi' });
    expect(whole.output_text).toBe(REPLY);

    const stream = await openai.responses.create({ model: 'mock-x', input: 'hi', stream: true });
    const types: string[] = [];
    let deltas = '';
    let done = '';
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') deltas += event.delta;
      if (event.type === 'response.output_text.done') done = event.text;
      if (event.type === 'response.completed') expect(event.response.status).toBe('completed');
    }
    const deltaCount = types.filter((t) => t === 'response.output_text.delta').length;
    expect(deltaCount).toBe(3);
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...Array<string>(deltaCount).fill('response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(deltas).toBe(REPLY);
    expect(done).toBe(REPLY);
  });

  it('responses.stream().finalResponse() gives the completed response and its text', async () => {
    const stream = openai.responses.stream({ model: 'mock-x', input: 'hi' });
    let deltas = '';
    stream.on('response.output_text.delta', (event) => (deltas += event.delta));
    const final = await stream.finalResponse();
    expect(final.status).toBe('completed');
    const texts = final.output.flatMap((item) =>
      item.type === 'message' ? item.content.map((c) => (c.type === 'output_text' ? c.text : '')) : [],
    );
    expect(texts).toEqual([REPLY]);
    expect(deltas).toBe(REPLY);
    expect(final.usage?.output_tokens).toBeGreaterThan(0);
  });

  it("embeddings.create decodes the default base64 encoding to the same vector as encoding_format 'float'", async () => {
    const floats = await openai.embeddings.create({
      model: 'mock-x',
      input: ['a', 'b'],
      encoding_format: 'float',
    });
    expect(floats.data).toHaveLength(2);
    const vector = floats.data[0]!.embedding;
    expect(vector.length).toBeGreaterThan(1);
    expect(vector.some((v) => v !== 0)).toBe(true);

    const decoded = await openai.embeddings.create({ model: 'mock-x', input: ['a', 'b'] }); // base64 on the wire
    expect(decoded.data.map((d) => d.embedding)).toEqual([vector, vector]);

    const raw = await call(`${gw.url}/v1/embeddings`, {
      headers: { authorization: `Bearer ${SECRETS.clientToken}` },
      body: { model: 'mock-x', input: 'a', encoding_format: 'base64' },
    });
    expect(typeof (raw.json() as { data: { embedding: unknown }[] }).data[0]!.embedding).toBe('string');
  });

  it('chat.completions.create with stream_options.include_usage ends with a usage chunk and no choices', async () => {
    const stream = await openai.chat.completions.create({
      model: 'mock-x',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ prompt_tokens: expect.any(Number), completion_tokens: 3 });
    expect(last.usage!.total_tokens).toBe(last.usage!.prompt_tokens + last.usage!.completion_tokens);
    expect(chunks.slice(0, -1).every((c) => c.usage === null && c.choices.length === 1)).toBe(true);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(REPLY);

    // without it, no usage chunk
    const plain = await openai.chat.completions.create({
      model: 'mock-x',
      messages: [{ role: 'user', content: 'hi' }],
      stream: true,
    });
    for await (const chunk of plain) expect(chunk.choices).toHaveLength(1);
  });

  it('legacy completions streamed with stream_options.include_usage end with a usage chunk too', async () => {
    const stream = await openai.completions.create({
      model: 'mock-x',
      prompt: 'hi',
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.at(-1)!.choices).toEqual([]);
    expect(chunks.at(-1)!.usage?.completion_tokens).toBe(3);
    expect(chunks.map((c) => c.choices[0]?.text ?? '').join('')).toBe(REPLY);
  });
});

describe('anthropic SDK: messages.countTokens', () => {
  const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'How many tokens is this?' }];

  it('a mock channel answers { input_tokens }, the same for the same request and more for a longer one', async () => {
    const first = await anthropic.messages.countTokens({ model: 'claude-m', messages });
    expect(first.input_tokens).toBeGreaterThan(0);
    expect(await anthropic.messages.countTokens({ model: 'claude-m', messages })).toEqual(first);
    const longer = await anthropic.messages.countTokens({
      model: 'claude-m',
      system: 'You are a careful assistant who counts every token twice.',
      messages,
    });
    expect(longer.input_tokens).toBeGreaterThan(first.input_tokens);
  });

  it("bad input gets slotgate's Anthropic error shape, never a 500", async () => {
    const headers = { 'x-api-key': SECRETS.clientToken };
    const url = `${gw.url}/v1/messages/count_tokens`;
    for (const body of ['{not json', { messages }, [1, 2], { model: 'claude-m', messages: 'hi' }]) {
      const res = await call(url, { headers, body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.json()).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    }
    const unknown = await call(url, { headers, body: { model: 'nope', messages } });
    expect(unknown.status).toBe(404);
    expect(unknown.json()).toMatchObject({ type: 'error', error: { type: 'not_found_error' } });
    const noKey = await call(url, { body: { model: 'claude-m', messages } });
    expect(noKey.status).toBe(401);
    await expect(
      anthropic.messages.countTokens({ model: 'claude-m', messages: 'hi' as never }),
    ).rejects.toBeInstanceOf(Anthropic.BadRequestError);
  });

  it("is forwarded to the anthropic channel with the SDK's body and the channel's key, taking no slot", async () => {
    const hold = gate();
    up.on('ant', { sse: ['event: ping\ndata: {"type":"ping"}\n\n', () => hold.promise] }, '/v1/messages');
    up.on('ant', { json: { input_tokens: 42 } }, '/v1/messages/count_tokens');
    // a generation holds the channel's only slot
    const holder = streamingCall(
      `${gw.url}/v1/messages`,
      { model: 'claude-up', max_tokens: 5, stream: true, messages },
      { 'x-api-key': SECRETS.clientToken },
    );
    try {
      await within(holder.firstChunk, 5000, 'the slot holder');
      // the channel is full: a generation is refused at once (waiting is off) …
      await expect(
        anthropic.messages.create({ model: 'claude-up', max_tokens: 5, messages }),
      ).rejects.toMatchObject({ status: 429 });
      // … while counting tokens goes through
      const counted = await within(
        anthropic.messages.countTokens({ model: 'claude-up', messages }),
        5000,
        'countTokens',
      );
      expect(counted).toEqual({ input_tokens: 42 });
      expect(sent.at(-1)!.url).toBe(`${gw.url}/v1/messages/count_tokens`);
      const loads = await gw.gateway.store.readLoads(['ant']);
      expect(loads.get('ant')!.active).toBe(1); // still only the holder's slot
    } finally {
      hold.open();
      await holder.body.catch(() => {});
    }
    const received = up.requests('ant').filter((r) => r.path === '/v1/messages/count_tokens');
    expect(received).toHaveLength(1);
    const [req] = received;
    expect(req!.method).toBe('POST');
    const sdk = sent.at(-1)!;
    expect(req!.body.toString('utf8')).toBe(sdk.body); // the SDK's body, byte for byte
    expect(JSON.parse(sdk.body)).toEqual({ model: 'claude-up', messages });
    expect(req!.headers['x-api-key']).toBe(SECRETS.anthropicKey); // the channel's key, not the client's
    expect(req!.headers['anthropic-version']).toBe(sdk.headers.get('anthropic-version'));
    expect(req!.headers['user-agent']).toBe(sdk.headers.get('user-agent'));
    expect(JSON.stringify(req!.headers)).not.toContain(SECRETS.clientToken);
  });
});
