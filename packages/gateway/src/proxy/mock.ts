/**
 * `mock` channels: a simulated upstream in the process, for the demo and the benchmarks, with configurable latency,
 * streamed chunks, error rate and status. They hold slots exactly like real channels; nothing leaves the process.
 */
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { mockSchema } from '../config-channels.js';
import type { MockConfig } from '../config-schema.js';
import type { ApiShape } from '../http-errors.js';
import type { UpstreamResponse } from '../upstream.js';

/** A mock channel configured without a `mock` section: the schema's defaults. */
export const DEFAULT_MOCK: MockConfig = Object.freeze(mockSchema.parse({}));

export interface MockRequest {
  channelId: string;
  path: string;
  shape: ApiShape;
  body: Record<string, unknown>;
  signal: AbortSignal;
}

/** `text` cut into `n` pieces at word boundaries (empty pieces when it has fewer words). */
function pieces(text: string, n: number): string[] {
  const words = text.split(/(?<= )/);
  const out: string[] = [];
  const per = Math.max(1, Math.ceil(words.length / n));
  for (let i = 0; i < words.length; i += per) out.push(words.slice(i, i + per).join(''));
  while (out.length < n) out.push('');
  return out;
}

function json(status: number, body: unknown, headers: Record<string, string> = {}): UpstreamResponse {
  return {
    status,
    headers: { 'content-type': 'application/json', ...headers },
    body: Readable.from([Buffer.from(JSON.stringify(body))]),
  };
}

function mockError(mock: MockConfig, shape: ApiShape, channelId: string): UpstreamResponse {
  const status = mock.error_status;
  const limited = status === 429;
  const message = `mock channel ${channelId}: ${limited ? 'rate limit reached' : 'simulated error'}`;
  const headers: Record<string, string> = {};
  if (limited && mock.retry_after_s !== undefined) headers['retry-after'] = String(mock.retry_after_s);
  const body =
    shape === 'anthropic'
      ? { type: 'error', error: { type: limited ? 'rate_limit_error' : 'api_error', message } }
      : { error: { message, type: limited ? 'rate_limit_error' : 'server_error', code: null } };
  return json(status, body, headers);
}

let seq = 0;

export async function mockRespond(mock: MockConfig, req: MockRequest): Promise<UpstreamResponse> {
  await sleep(mock.latency_ms, undefined, { signal: req.signal });
  if (mock.error_rate > 0 && Math.random() < mock.error_rate)
    return mockError(mock, req.shape, req.channelId);
  const model = typeof req.body.model === 'string' ? req.body.model : 'mock';
  const id = `mock-${Date.now().toString(36)}-${++seq}`;
  const created = Math.floor(Date.now() / 1000);
  const parts = pieces(mock.reply, mock.chunks);
  const answer = { id, model, created, reply: mock.reply, parts };
  if (req.path === COUNT_TOKENS_PATH) return countTokens(req.body);
  if (req.path === '/v1/embeddings') return embeddings(req.body, model);
  if (req.path === '/v1/images/generations' || req.body.stream !== true)
    return json(200, wholeAnswer(req, answer));

  const events =
    req.shape === 'anthropic'
      ? anthropicEvents(answer)
      : req.path === '/v1/responses'
        ? responsesEvents(answer)
        : openaiEvents(answer, req.path, includeUsage(req.body));
  const { signal } = req;
  async function* stream() {
    for (const [i, event] of events.entries()) {
      if (i > 0 && mock.chunk_delay_ms > 0) await sleep(mock.chunk_delay_ms, undefined, { signal });
      yield Buffer.from(event);
    }
  }
  return {
    status: 200,
    headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' },
    body: Readable.from(stream(), { objectMode: false }),
  };
}

interface Answer {
  id: string;
  model: string;
  created: number;
  reply: string;
  parts: string[];
}

/** The route of Anthropic's token counting (`messages.countTokens`): no generation, so no slot either. */
export const COUNT_TOKENS_PATH = '/v1/messages/count_tokens';

/** The vector of every mock embedding: float32-exact, so the base64 and float encodings give the same numbers. */
const EMBEDDING = [0.00390625, -0.0087890625, 0.015625, 0.0068359375];

/** An OpenAI-shaped 400, as the real API answers a request it cannot take. */
function openaiInvalid(message: string): UpstreamResponse {
  return json(400, { error: { message, type: 'invalid_request_error', param: null, code: null } });
}

/** An Anthropic-shaped 400. */
function anthropicInvalid(message: string): UpstreamResponse {
  return json(400, { type: 'error', error: { type: 'invalid_request_error', message } });
}

/** `/v1/embeddings`: one vector per input, as floats or, with `encoding_format: "base64"`, little-endian float32. */
function embeddings(body: Record<string, unknown>, model: string): UpstreamResponse {
  const format = body.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64')
    return openaiInvalid(`encoding_format must be 'float' or 'base64'`);
  const input = Array.isArray(body.input) ? body.input : [body.input];
  const packed = Buffer.alloc(EMBEDDING.length * 4);
  EMBEDDING.forEach((value, i) => packed.writeFloatLE(value, i * 4));
  const embedding = format === 'base64' ? packed.toString('base64') : EMBEDDING;
  const data = input.map((_, index) => ({ object: 'embedding', index, embedding }));
  return json(200, { object: 'list', model, data, usage: { prompt_tokens: 4, total_tokens: 4 } });
}

/** Every string inside a JSON value, walked without recursion. */
function stringsIn(value: unknown): string[] {
  const out: string[] = [];
  const stack = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'string') out.push(v);
    else if (v !== null && typeof v === 'object') stack.push(...Object.values(v));
  }
  return out;
}

/**
 * `/v1/messages/count_tokens`: `{ input_tokens }`, a deterministic estimate from the request (a token per 4 characters
 * of the strings in `system`, `messages` and `tools`, and 3 per message), or a 400 without a `messages` list.
 */
function countTokens(body: Record<string, unknown>): UpstreamResponse {
  const { messages } = body;
  if (!Array.isArray(messages)) return anthropicInvalid('messages: Field required (a list of messages)');
  const chars = stringsIn([body.system, messages, body.tools]).reduce((n, s) => n + s.length, 0);
  return json(200, { input_tokens: Math.ceil(chars / 4) + 3 * messages.length });
}

/** Whether a streamed OpenAI answer ends with a usage chunk (`stream_options.include_usage`). */
function includeUsage(body: Record<string, unknown>): boolean {
  const options = body.stream_options;
  return (
    typeof options === 'object' &&
    options !== null &&
    'include_usage' in options &&
    options.include_usage === true
  );
}

/** A Responses API object, in progress (no output yet) or completed with the whole reply. */
function responseObject({ id, model, created, reply, parts }: Answer, done: boolean) {
  const usage = {
    input_tokens: 8,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: parts.length,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 8 + parts.length,
  };
  return {
    id,
    object: 'response',
    created_at: created,
    model,
    status: done ? 'completed' : 'in_progress',
    output: done ? [messageItem(id, reply, true)] : [],
    usage: done ? usage : null,
  };
}

const outputText = (text: string) => ({ type: 'output_text', text, annotations: [] });

function messageItem(id: string, text: string | undefined, done: boolean) {
  return {
    id: `msg_${id}`,
    type: 'message',
    role: 'assistant',
    status: done ? 'completed' : 'in_progress',
    content: text === undefined ? [] : [outputText(text)],
  };
}

/** A JSON answer in the shape of the route's API. */
function wholeAnswer(req: MockRequest, answer: Answer): unknown {
  const { id, model, created, reply, parts } = answer;
  if (req.path === '/v1/images/generations')
    return {
      created,
      data: [{ url: `https://example.invalid/mock/${id}.png`, revised_prompt: req.body.prompt }],
    };
  if (req.shape === 'anthropic') {
    const usage = { input_tokens: 8, output_tokens: parts.length };
    return {
      id,
      type: 'message',
      role: 'assistant',
      model,
      content: [{ type: 'text', text: reply }],
      stop_reason: 'end_turn',
      usage,
    };
  }
  if (req.path === '/v1/responses') return responseObject(answer, true);
  if (req.path === '/v1/completions') {
    const choices = [{ index: 0, text: reply, finish_reason: 'stop' }];
    return { id, object: 'text_completion', created, model, choices };
  }
  const choices = [{ index: 0, message: { role: 'assistant', content: reply }, finish_reason: 'stop' }];
  const usage = { prompt_tokens: 8, completion_tokens: parts.length, total_tokens: 8 + parts.length };
  return { id, object: 'chat.completion', created, model, choices, usage };
}

/**
 * A streamed chat or legacy completion. With `usage`, every chunk has `usage: null` and a last chunk before `[DONE]`
 * carries the usage with no choices, as OpenAI sends with `stream_options.include_usage`.
 */
function openaiEvents({ id, model, created, parts }: Answer, path: string, usage: boolean): string[] {
  const data = (obj: unknown) => `data: ${JSON.stringify(obj)}\n\n`;
  const counts = { prompt_tokens: 8, completion_tokens: parts.length, total_tokens: 8 + parts.length };
  const object = path === '/v1/completions' ? 'text_completion' : 'chat.completion.chunk';
  const chunk = (choice: object) =>
    data({
      id,
      object,
      created,
      model,
      choices: [{ index: 0, ...choice }],
      ...(usage ? { usage: null } : {}),
    });
  const last = usage ? [data({ id, object, created, model, choices: [], usage: counts })] : [];
  if (path === '/v1/completions') {
    const text = (t: string, i: number) =>
      chunk({ text: t, finish_reason: i === parts.length - 1 ? 'stop' : null });
    return [...parts.map(text), ...last, 'data: [DONE]\n\n'];
  }
  return [
    chunk({ delta: { role: 'assistant', content: '' }, finish_reason: null }),
    ...parts.map((content) => chunk({ delta: { content }, finish_reason: null })),
    chunk({ delta: {}, finish_reason: 'stop' }),
    ...last,
    'data: [DONE]\n\n',
  ];
}

/** A streamed Responses API answer: the typed events OpenAI sends, each under its `event:` name, with no `[DONE]`. */
function responsesEvents(answer: Answer): string[] {
  const { id, reply, parts } = answer;
  let sequence_number = 0;
  const ev = (type: string, fields: object) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence_number++, ...fields })}\n\n`;
  const at = { item_id: `msg_${id}`, output_index: 0, content_index: 0 };
  return [
    ev('response.created', { response: responseObject(answer, false) }),
    ev('response.in_progress', { response: responseObject(answer, false) }),
    ev('response.output_item.added', { output_index: 0, item: messageItem(id, undefined, false) }),
    ev('response.content_part.added', { ...at, part: outputText('') }),
    ...parts.map((delta) => ev('response.output_text.delta', { ...at, delta, logprobs: [] })),
    ev('response.output_text.done', { ...at, text: reply, logprobs: [] }),
    ev('response.content_part.done', { ...at, part: outputText(reply) }),
    ev('response.output_item.done', { output_index: 0, item: messageItem(id, reply, true) }),
    ev('response.completed', { response: responseObject(answer, true) }),
  ];
}

function anthropicEvents({ id, model, parts }: Answer): string[] {
  const ev = (type: string, fields: object) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
  const usage = { input_tokens: 8, output_tokens: 0 };
  const message = { id, type: 'message', role: 'assistant', model, content: [], stop_reason: null, usage };
  return [
    ev('message_start', { message }),
    ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }),
    ...parts.map((text) => ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text } })),
    ev('content_block_stop', { index: 0 }),
    ev('message_delta', { delta: { stop_reason: 'end_turn' }, usage: { output_tokens: parts.length } }),
    ev('message_stop', {}),
  ];
}
