/**
 * Calls to real upstreams (openai, anthropic) with undici: the body as-is with the channel's own credentials, the
 * answer as a stream. Time-outs: connect, first byte (response headers) and idle gaps between body chunks.
 */
import type { Readable } from 'node:stream';
import { Agent, errors as undiciErrors, request } from 'undici';
import type { GatewayConfig } from './config-schema.js';
import type { GatewayChannel } from './channels.js';

export interface UpstreamResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Readable;
}

export interface UpstreamCall {
  channel: GatewayChannel;
  /** e.g. /v1/chat/completions */
  path: string;
  body: Buffer;
  /** Client headers worth forwarding (accept, anthropic-version, anthropic-beta, openai-beta, user-agent). */
  clientHeaders: Record<string, string | string[] | undefined>;
  signal: AbortSignal;
}

/** The upstream could not be reached or stopped answering before its headers: the request may be retried. */
export class UpstreamConnectError extends Error {}

/** No response headers within first_byte_ms: not retried (the upstream may still be working on it). */
export class UpstreamTimeoutError extends Error {}

const FORWARDED = ['accept', 'anthropic-version', 'anthropic-beta', 'openai-beta', 'user-agent'];

export function upstreamUrl(baseUrl: string, path: string): string {
  const base = baseUrl.replace(/\/+$/, '');
  return base.endsWith('/v1') && path.startsWith('/v1/') ? base + path.slice(3) : base + path;
}

export function upstreamHeaders(call: UpstreamCall): Record<string, string> {
  const { channel } = call;
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  for (const name of FORWARDED) {
    const value = call.clientHeaders[name];
    if (typeof value === 'string') headers[name] = value;
  }
  if (channel.config.type === 'anthropic') {
    headers['x-api-key'] = channel.config.key ?? '';
    headers['anthropic-version'] ??= channel.config.anthropic_version;
  } else {
    headers.authorization = `Bearer ${channel.config.key ?? ''}`;
  }
  for (const [name, value] of Object.entries(channel.config.headers)) headers[name.toLowerCase()] = value;
  return headers;
}

export class UpstreamClient {
  private readonly agent: Agent;

  constructor(private readonly timeouts: GatewayConfig['timeouts']) {
    this.agent = new Agent({
      connect: { timeout: timeouts.connect_ms },
      headersTimeout: timeouts.first_byte_ms,
      bodyTimeout: timeouts.idle_ms,
      keepAliveTimeout: 30_000,
    });
  }

  async call(call: UpstreamCall): Promise<UpstreamResponse> {
    try {
      const res = await request(upstreamUrl(call.channel.config.base_url!, call.path), {
        method: 'POST',
        headers: upstreamHeaders(call),
        body: call.body,
        signal: call.signal,
        dispatcher: this.agent,
      });
      return { status: res.statusCode, headers: res.headers, body: res.body };
    } catch (err) {
      if (call.signal.aborted) throw err;
      if (err instanceof undiciErrors.HeadersTimeoutError) {
        throw new UpstreamTimeoutError(
          `channel ${call.channel.id} sent no response within ${this.timeouts.first_byte_ms} ms`,
        );
      }
      const code = (err as { code?: string }).code ?? (err as Error).name;
      throw new UpstreamConnectError(`channel ${call.channel.id} is unreachable (${code})`);
    }
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}
