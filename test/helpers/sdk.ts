/**
 * The official SDKs pointed at a test gateway: no retries unless asked, and, given `sent`, every request recorded as it
 * left the client (to compare with what the upstream received).
 */
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { SECRETS } from './gateway.js';

export interface SentRequest {
  url: string;
  headers: Headers;
  body: string;
}

interface ClientOptions {
  apiKey?: string;
  /** Appended to the gateway's URL: `/v1` for the OpenAI SDK, nothing for Anthropic's. */
  base?: string;
  sent?: SentRequest[];
}

function recording(sent: SentRequest[] | undefined): { fetch?: typeof fetch } {
  if (!sent) return {};
  return {
    fetch: (input, init) => {
      sent.push({ url: String(input), headers: new Headers(init?.headers), body: String(init?.body) });
      return fetch(input, init);
    },
  };
}

export function openaiOf(
  url: string,
  { apiKey = SECRETS.clientToken, base = '/v1', sent }: ClientOptions = {},
) {
  return new OpenAI({ apiKey, baseURL: `${url}${base}`, maxRetries: 0, ...recording(sent) });
}

export function anthropicOf(
  url: string,
  { apiKey = SECRETS.clientToken, base = '', sent }: ClientOptions = {},
) {
  return new Anthropic({ apiKey, baseURL: `${url}${base}`, maxRetries: 0, ...recording(sent) });
}

/** A non-streamed chat completion, as an OpenAI upstream answers one. */
export const CHAT_COMPLETION = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1,
  model: 'gpt-x',
  choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
};
