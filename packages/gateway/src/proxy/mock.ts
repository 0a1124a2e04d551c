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
  if (req.path === '/v1/embeddings' || req.path === '/v1/images/generations' || req.body.stream !== true)
    return json(200, wholeAnswer(req, answer));

  const events = req.shape === 'anthropic' ? anthropicEvents(answer) : openaiEvents(answer, req.path);
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

/** A JSON answer in the shape of the route's API. */
function wholeAnswer(req: MockRequest, { id, model, created, reply, parts }: Answer): unknown {
  if (req.path === '/v1/embeddings') {
    const input = Array.isArray(req.body.input) ? req.body.input : [req.body.input];
    return {
      object: 'list',
      model,
      data: input.map((_, index) => ({
        object: 'embedding',
        index,
        embedding: [0.0023, -0.0091, 0.0154, 0.0071],
      })),
      usage: { prompt_tokens: 4, total_tokens: 4 },
    };
  }
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
  if (req.path === '/v1/responses') {
    const output = [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: reply }] }];
    return { id, object: 'response', created_at: created, model, status: 'completed', output };
  }
  if (req.path === '/v1/completions') {
    const choices = [{ index: 0, text: reply, finish_reason: 'stop' }];
    return { id, object: 'text_completion', created, model, choices };
  }
  const choices = [{ index: 0, message: { role: 'assistant', content: reply }, finish_reason: 'stop' }];
  const usage = { prompt_tokens: 8, completion_tokens: parts.length, total_tokens: 8 + parts.length };
  return { id, object: 'chat.completion', created, model, choices, usage };
}

function openaiEvents({ id, model, created, parts }: Answer, path: string): string[] {
  const data = (obj: unknown) => `data: ${JSON.stringify(obj)}\n\n`;
  if (path === '/v1/completions') {
    const chunk = (text: string, i: number) => {
      const finish_reason = i === parts.length - 1 ? 'stop' : null;
      return data({
        id,
        object: 'text_completion',
        created,
        model,
        choices: [{ index: 0, text, finish_reason }],
      });
    };
    return [...parts.map(chunk), 'data: [DONE]\n\n'];
  }
  const chunk = (delta: object, finish_reason: string | null) =>
    data({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      choices: [{ index: 0, delta, finish_reason }],
    });
  return [
    chunk({ role: 'assistant', content: '' }, null),
    ...parts.map((content) => chunk({ content }, null)),
    chunk({}, 'stop'),
    'data: [DONE]\n\n',
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
