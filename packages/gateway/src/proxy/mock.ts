/**
 * `mock` channels: a built-in simulated upstream for the demo and the benchmarks. Configurable latency, streamed
 * chunks, error rate and status. They hold slots exactly like real channels; nothing leaves the process.
 */
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ApiShape } from '../http-errors.js';
import { mockSchema } from '../config-channels.js';
import type { MockConfig } from '../config-schema.js';
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
  const message =
    status === 429
      ? `mock channel ${channelId}: rate limit reached`
      : `mock channel ${channelId}: simulated error`;
  const headers: Record<string, string> = {};
  if (status === 429 && mock.retry_after_s !== undefined) headers['retry-after'] = String(mock.retry_after_s);
  const body =
    shape === 'anthropic'
      ? { type: 'error', error: { type: status === 429 ? 'rate_limit_error' : 'api_error', message } }
      : { error: { message, type: status === 429 ? 'rate_limit_error' : 'server_error', code: null } };
  return json(status, body, headers);
}

let seq = 0;

export async function mockRespond(
  mock: MockConfig,
  req: MockRequest,
  random: () => number = Math.random,
): Promise<UpstreamResponse> {
  await sleep(mock.latency_ms, undefined, { signal: req.signal });
  if (mock.error_rate > 0 && random() < mock.error_rate) return mockError(mock, req.shape, req.channelId);
  const model = typeof req.body.model === 'string' ? req.body.model : 'mock';
  const id = `mock-${Date.now().toString(36)}-${++seq}`;
  const created = Math.floor(Date.now() / 1000);

  if (req.path === '/v1/embeddings') {
    const input = Array.isArray(req.body.input) ? req.body.input : [req.body.input];
    return json(200, {
      object: 'list',
      model,
      data: input.map((_, index) => ({
        object: 'embedding',
        index,
        embedding: [0.0023, -0.0091, 0.0154, 0.0071],
      })),
      usage: { prompt_tokens: 4, total_tokens: 4 },
    });
  }
  if (req.path === '/v1/images/generations') {
    return json(200, {
      created,
      data: [{ url: `https://example.invalid/mock/${id}.png`, revised_prompt: req.body.prompt }],
    });
  }

  const parts = pieces(mock.reply, mock.chunks);
  if (req.body.stream !== true) {
    if (req.shape === 'anthropic') {
      return json(200, {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: [{ type: 'text', text: mock.reply }],
        stop_reason: 'end_turn',
        usage: { input_tokens: 8, output_tokens: parts.length },
      });
    }
    if (req.path === '/v1/responses') {
      return json(200, {
        id,
        object: 'response',
        created_at: created,
        model,
        status: 'completed',
        output: [
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: mock.reply }] },
        ],
      });
    }
    if (req.path === '/v1/completions') {
      return json(200, {
        id,
        object: 'text_completion',
        created,
        model,
        choices: [{ index: 0, text: mock.reply, finish_reason: 'stop' }],
      });
    }
    return json(200, {
      id,
      object: 'chat.completion',
      created,
      model,
      choices: [{ index: 0, message: { role: 'assistant', content: mock.reply }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 8, completion_tokens: parts.length, total_tokens: 8 + parts.length },
    });
  }

  const events =
    req.shape === 'anthropic'
      ? anthropicEvents(id, model, parts)
      : openaiEvents(id, model, created, parts, req.path);
  const signal = req.signal;
  async function* stream() {
    let first = true;
    for (const event of events) {
      if (!first && mock.chunk_delay_ms > 0) await sleep(mock.chunk_delay_ms, undefined, { signal });
      first = false;
      yield Buffer.from(event);
    }
  }
  return {
    status: 200,
    headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' },
    body: Readable.from(stream(), { objectMode: false }),
  };
}

function openaiEvents(id: string, model: string, created: number, parts: string[], path: string): string[] {
  const data = (obj: unknown) => `data: ${JSON.stringify(obj)}\n\n`;
  if (path === '/v1/completions') {
    return [
      ...parts.map((text, i) =>
        data({
          id,
          object: 'text_completion',
          created,
          model,
          choices: [{ index: 0, text, finish_reason: i === parts.length - 1 ? 'stop' : null }],
        }),
      ),
      'data: [DONE]\n\n',
    ];
  }
  return [
    data({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }],
    }),
    ...parts.map((content) =>
      data({
        id,
        object: 'chat.completion.chunk',
        created,
        model,
        choices: [{ index: 0, delta: { content }, finish_reason: null }],
      }),
    ),
    data({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
    }),
    'data: [DONE]\n\n',
  ];
}

function anthropicEvents(id: string, model: string, parts: string[]): string[] {
  const ev = (type: string, obj: unknown) => `event: ${type}\ndata: ${JSON.stringify(obj)}\n\n`;
  return [
    ev('message_start', {
      type: 'message_start',
      message: {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        usage: { input_tokens: 8, output_tokens: 0 },
      },
    }),
    ev('content_block_start', {
      type: 'content_block_start',
      index: 0,
      content_block: { type: 'text', text: '' },
    }),
    ...parts.map((text) =>
      ev('content_block_delta', {
        type: 'content_block_delta',
        index: 0,
        delta: { type: 'text_delta', text },
      }),
    ),
    ev('content_block_stop', { type: 'content_block_stop', index: 0 }),
    ev('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: 'end_turn' },
      usage: { output_tokens: parts.length },
    }),
    ev('message_stop', { type: 'message_stop' }),
  ];
}
