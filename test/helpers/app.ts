/**
 * The gateway's HTTP app alone, for unit tests: buildApp on a MemoryStore with one mock channel (no latency), driven
 * through `app.inject()`; no Redis, no open port. Options replace the dependencies a test wants to control (the
 * readiness check, the settings writer, more channels, a log stream).
 */
import type { Writable } from 'node:stream';
import { afterEach, expect } from 'vitest';
import { MemoryStore, createAdmission } from 'slotgate';
import { buildApp, type AppDeps } from '../../packages/gateway/src/app.js';
import { ChannelRegistry, type GatewayChannel } from '../../packages/gateway/src/channels.js';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { GatewayMetrics } from '../../packages/gateway/src/metrics.js';
import { admissionPart, gatewaySettings } from '../../packages/gateway/src/settings.js';
import { UpstreamClient } from '../../packages/gateway/src/upstream.js';

export const TOKEN = 'tok-unit-client';
export const ADMIN_TOKEN = 'adm-unit-admin';
export const REPLY = 'one two three four';
export const BODY_LIMIT = 2048;

export const openai = { authorization: `Bearer ${TOKEN}` };
export const anthropic = { 'x-api-key': TOKEN };
export const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

export interface TestAppOptions {
  /** More channels (config documents), after `mock-a`. */
  channels?: Record<string, unknown>[];
  /** More tokens (config documents), after TOKEN's. */
  tokens?: Record<string, unknown>[];
  ready?: AppDeps['ready'];
  putSettings?: AppDeps['putSettings'];
  /** @default BODY_LIMIT */
  bodyLimit?: number;
  /** pino writes its lines here (at trace level); no logger without it. */
  logStream?: Writable;
}

export function testApp(options: TestAppOptions = {}) {
  const config = parseConfig(
    {
      server: { body_limit_bytes: options.bodyLimit ?? BODY_LIMIT },
      admin: { token: ADMIN_TOKEN },
      tokens: [{ key: TOKEN, name: 'unit' }, ...(options.tokens ?? [])],
      channels: [
        {
          id: 'mock-a',
          type: 'mock',
          models: ['gpt-mock', 'claude-mock'],
          max_concurrency: 1,
          mock: { latency_ms: 0, chunks: 2, chunk_delay_ms: 0, reply: REPLY },
        },
        ...(options.channels ?? []),
      ],
      settings: { wait_enabled: false },
    },
    'unit',
  );
  const registry = new ChannelRegistry(config.channels, config.tokens);
  const settings = gatewaySettings.merge(gatewaySettings.defaults, config.settings);
  const store = new MemoryStore();
  const admission = createAdmission({ store, settings: admissionPart(settings) });
  const metrics = new GatewayMetrics({
    admission: () => admission,
    channels: () => registry,
    storeKind: store.kind,
    storeUp: async () => true,
    configVersion: () => 1,
  });
  const upstream = new UpstreamClient(config.timeouts);
  const app = buildApp({
    admission,
    registry: () => registry,
    config: () => config,
    settings: () => settings,
    putSettings: options.putSettings ?? (async () => settings),
    status: async () => ({ instance_id: admission.instanceId }),
    ready: options.ready ?? (async () => ({ ready: true })),
    metrics,
    upstream,
    logger: options.logStream ? { level: 'trace', stream: options.logStream } : false,
  });
  closers.push(
    () => store.close(),
    () => upstream.close(),
    () => admission.close(),
    () => app.close(),
  );
  return { app, admission, store, metrics, channel: registry.get('mock-a') as GatewayChannel };
}

export type App = ReturnType<typeof testApp>['app'];

export function post(app: App, url: string, headers: Record<string, string>, payload: unknown) {
  return app.inject({
    method: 'POST',
    url,
    headers: { 'content-type': 'application/json', ...headers },
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
  });
}

/** Asserts the OpenAI error body `{"error":{"message","type","code"}}`. */
export function expectOpenAIError(
  res: { statusCode: number; json(): unknown },
  status: number,
  code: string,
): string {
  expect(res.statusCode).toBe(status);
  const body = res.json() as { error: Record<string, unknown> };
  expect(Object.keys(body)).toEqual(['error']);
  expect(body.error).toMatchObject({ code, type: expect.any(String), message: expect.any(String) });
  return body.error.message as string;
}

/** Asserts the Anthropic error body `{"type":"error","error":{"type","message"}}`. */
export function expectAnthropicError(
  res: { statusCode: number; json(): unknown },
  status: number,
  type: string,
): string {
  expect(res.statusCode).toBe(status);
  const body = res.json() as { type: string; error: Record<string, unknown> };
  expect(body.type).toBe('error');
  expect(body.error).toEqual({ type, message: expect.any(String) });
  return body.error.message as string;
}
