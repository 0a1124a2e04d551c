/**
 * Gateways for the integration tests: configs built through parseConfig (so they pass the real schema), pino logs at
 * trace level captured line by line (every test file checks its own lines for the secrets below), a real listening
 * socket on port 0 when the behaviour depends on one, and cleanup of everything a test started, including its Redis keys.
 */
import {
  request as httpRequest,
  type ClientRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
} from 'node:http';
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, expect } from 'vitest';
import { Redis } from 'ioredis';
import { request as undiciRequest, type Dispatcher } from 'undici';
import { createGateway, type Gateway, type GatewayOptions } from '../../packages/gateway/src/server.js';
import { parseConfig, type GatewayConfig } from '../../packages/gateway/src/config.js';
import { clearCluster, redisUrl, uniquePrefix } from './redis.js';

/** Secrets used by every gateway test config. None may ever appear in a response body, admin output or log line. */
export const SECRETS = {
  channelKey: 'sk-chan-S3CRET-7f3a9c2e',
  anthropicKey: 'sk-ant-S3CRET-51b8d0aa',
  clientToken: 'tok-client-S3CRET-c0ffee42',
  vipToken: 'tok-vip-S3CRET-9d1e77b0',
  adminToken: 'adm-S3CRET-b16b00b5',
  headerValue: 'org-S3CRET-e4e4e4',
  urlPassword: 'pw-S3CRET-0a0b0c0d',
  urlKey: 'qk-S3CRET-66aa77bb',
} as const;
export const SECRET_VALUES: readonly string[] = Object.values(SECRETS);

export const CLIENT = { authorization: `Bearer ${SECRETS.clientToken}` };
export const ADMIN = { authorization: `Bearer ${SECRETS.adminToken}` };

/** Every log line written by any gateway this process started. */
export const LOG_LINES: string[] = [];

export function logStream(lines: string[] = LOG_LINES): Writable {
  let rest = '';
  return new Writable({
    write(chunk: Buffer | string, _encoding, callback) {
      const text = rest + chunk.toString();
      const parts = text.split('\n');
      rest = parts.pop() ?? '';
      for (const line of parts) if (line) lines.push(line);
      callback();
    },
    final(callback) {
      if (rest) lines.push(rest);
      callback();
    },
  });
}

/** The secrets found in a text (an empty list is what every test expects). */
export function secretsIn(text: string): string[] {
  return SECRET_VALUES.filter((s) => text.includes(s));
}

/** After the file: the gateways logged something, and not one secret in any of it. */
export function expectNoSecretsLogged(): void {
  afterAll(() => {
    expect(LOG_LINES.length).toBeGreaterThan(0);
    expect(LOG_LINES.flatMap(secretsIn)).toEqual([]);
  });
}

export interface ConfigDoc {
  channels: Record<string, unknown>[];
  settings?: Record<string, unknown>;
  /** false: no Redis (embedded MemoryStore); a URL: that Redis. @default the shared test Redis */
  redis?: false | string;
  prefix?: string;
  [key: string]: unknown;
}

/** A config document with the test secrets, a unique Redis prefix, port 0 and the given channels. */
export function configDoc(doc: ConfigDoc): Record<string, unknown> {
  const { channels, settings, redis, prefix, ...rest } = doc;
  return {
    server: { host: '127.0.0.1', port: 0, log_level: 'trace', drain_timeout_ms: 2000 },
    ...(redis === false
      ? {}
      : { redis: { url: redis ?? redisUrl(), prefix: prefix ?? uniquePrefix('gw'), timeout_ms: 500 } }),
    admin: { token: SECRETS.adminToken },
    tokens: [
      { key: SECRETS.clientToken, name: 'tester', group: 'default' },
      { key: SECRETS.vipToken, name: 'vip', group: 'vip' },
    ],
    channels,
    settings: settings ?? {},
    ...rest,
  };
}

export interface TestGateway {
  gateway: Gateway;
  config: GatewayConfig;
  /** http://127.0.0.1:<port> when listening, '' for inject-only gateways. */
  url: string;
  close(): Promise<void>;
}

export interface StartOptions extends Partial<Omit<GatewayOptions, 'config'>> {
  /** Listen on a real socket (port 0). @default true */
  listen?: boolean;
}

export async function startGateway(
  doc: Record<string, unknown> | GatewayConfig,
  options: StartOptions = {},
): Promise<TestGateway> {
  const config = 'source' in doc ? (doc as GatewayConfig) : parseConfig(doc, 'test');
  const { listen = true, ...rest } = options;
  const gateway = await createGateway({
    config,
    logger: { level: 'trace', stream: logStream() },
    ...rest,
  });
  const url = listen ? await gateway.listen() : '';
  let closed: Promise<void> | undefined;
  return {
    gateway,
    config,
    url,
    close: () => (closed ??= closeAndClean(gateway, config)),
  };
}

async function closeAndClean(gateway: Gateway, config: GatewayConfig): Promise<void> {
  await gateway.close();
  if (!config.redis) return;
  if (config.redis.cluster) return clearCluster(`${config.redis.prefix}:v1:*`).catch(() => {});
  if (!config.redis.url) return;
  const client = new Redis(config.redis.url, { maxRetriesPerRequest: 1, lazyConnect: true });
  client.on('error', () => {});
  try {
    await client.connect();
    const keys = await client.keys(`${config.redis.prefix}:v1:*`);
    if (keys.length) await client.del(...keys);
  } catch {
    // a private server a test stopped: nothing left to clean
  } finally {
    client.disconnect();
  }
}

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: () => unknown;
}

/** One request over a real socket; the body is read whole. */
export async function call(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: unknown } = {},
): Promise<Answer> {
  const body =
    init.body === undefined
      ? undefined
      : typeof init.body === 'string' || Buffer.isBuffer(init.body)
        ? init.body
        : JSON.stringify(init.body);
  const res = await undiciRequest(url, {
    method: (init.method ?? (body === undefined ? 'GET' : 'POST')) as Dispatcher.HttpMethod,
    headers: { ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...init.headers },
    ...(body !== undefined ? { body } : {}),
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) };
}

/** Polls `check` until it returns true or `ms` passes; returns whether it did. */
export async function eventually(check: () => Promise<boolean> | boolean, ms = 5000): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await sleep(20);
  }
}

/** A chat completion body. */
export const chat = (model: string, extra: Record<string, unknown> = {}) => ({
  model,
  messages: [{ role: 'user', content: 'hi' }],
  ...extra,
});

export interface StreamingCall {
  status: Promise<number>;
  headers: Promise<IncomingHttpHeaders>;
  /** Resolves with the first body chunk received. */
  firstChunk: Promise<string>;
  /** Resolves with the whole body when the response ends; rejects when the connection breaks. */
  body: Promise<string>;
  /** Drops the connection (the client going away mid-request). */
  destroy(): void;
}

/** A POST over node:http whose body is observed chunk by chunk, and which can be dropped at any moment. */
export function streamingCall(
  url: string,
  body: unknown,
  headers: Record<string, string> = CLIENT,
): StreamingCall {
  const payload = JSON.stringify(body);
  let req!: ClientRequest;
  let resolveFirst!: (s: string) => void;
  const firstChunk = new Promise<string>((resolve) => (resolveFirst = resolve));
  const response = new Promise<IncomingMessage>((resolve, reject) => {
    req = httpRequest(
      url,
      {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(payload),
          ...headers,
        },
        agent: false,
      },
      resolve,
    );
    req.on('error', reject);
    req.end(payload);
  });
  const text = response.then(
    (res) =>
      new Promise<string>((resolve, reject) => {
        let all = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          if (all === '') resolveFirst(chunk);
          all += chunk;
        });
        res.on('end', () => resolve(all));
        res.on('error', reject);
        res.on('aborted', () => reject(new Error('aborted')));
      }),
  );
  const status = response.then((r) => r.statusCode ?? 0);
  const responseHeaders = response.then((r) => r.headers);
  // A dropped call rejects these; a test that does not look at them must not see an unhandled rejection.
  for (const p of [text, status, responseHeaders]) p.catch(() => {});
  return {
    status,
    headers: responseHeaders,
    firstChunk,
    body: text,
    destroy: () => req.destroy(),
  };
}

/** Rejects after `ms` unless `promise` settles first. */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: nothing within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
