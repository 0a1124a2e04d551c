/**
 * The config file's schema (YAML or JSON), parsed once at the edge by config.ts. Defaults live here; the checks that
 * span entries run once every section parsed.
 */
import { z } from 'zod';
import { channelSchema, checkChannels, checkTokens, secret, tokenSchema } from './config-channels.js';
import { redisSchema } from './config-redis.js';
import type { GatewaySettingsUpdate } from './settings.js';

const serverSchema = z
  .strictObject({
    host: z.string().min(1).default('127.0.0.1'),
    port: z.int().min(0).max(65535).default(8080),
    /** Larger request bodies get 413. */
    body_limit_bytes: z
      .int()
      .min(1024)
      .max(1024 ** 3)
      .default(10 * 1024 * 1024),
    /** On SIGTERM, how long /readyz fails while the listener still serves (a load balancer takes the instance out). */
    drain_delay_ms: z.int().min(0).max(600_000).default(0),
    /** Then how long in-flight requests may take to finish before they are cut off. */
    drain_timeout_ms: z.int().min(0).max(600_000).optional(),
    /** drain_timeout_ms under its earlier name: still read, with a warning. */
    shutdown_timeout_ms: z.int().min(0).max(600_000).optional(),
    /** Until a request's headers have all arrived (a new connection's first request: from the connect). */
    headers_timeout_ms: z.int().min(100).max(600_000).default(10_000),
    /** Until a whole request, body included, has arrived; its response may then take as long as it needs. */
    request_timeout_ms: z.int().min(100).max(3_600_000).default(60_000),
    /** How long a keep-alive connection may stay idle between two requests. */
    keep_alive_timeout_ms: z.int().min(100).max(3_600_000).default(72_000),
    log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /** JSON lines, pino-pretty's readable lines, or (auto) pretty only when stdout is a terminal. */
    log_format: z.enum(['auto', 'json', 'pretty']).default('auto'),
  })
  .transform(({ shutdown_timeout_ms, ...server }) => ({
    ...server,
    drain_timeout_ms: server.drain_timeout_ms ?? shutdown_timeout_ms ?? 30_000,
  }));

const retrySchema = z.strictObject({
  /** Upstream 429 bodies matching these (case-insensitive) are quota/balance errors: no cooldown. */
  quota_patterns: z
    .array(z.string().min(1))
    .default(['insufficient_quota', 'quota exceeded', 'exceeded your current quota', 'balance', 'billing']),
  /** Upstream error bodies matching these count as rate limits when cooldown_on_message_match is on. */
  rate_limit_patterns: z
    .array(z.string().min(1))
    .default(['rate limit', 'rate_limit', 'too many requests', 'overloaded']),
});

const timeoutsSchema = z.strictObject({
  connect_ms: z.int().min(1).max(600_000).default(10_000),
  /** Until the upstream's response headers arrive. */
  first_byte_ms: z.int().min(1).max(3_600_000).default(120_000),
  /** Longest gap between two chunks of a streamed answer. */
  idle_ms: z.int().min(1).max(3_600_000).default(120_000),
});

export const configSchema = z
  .strictObject({
    server: serverSchema.prefault({}),
    redis: redisSchema.optional(),
    admin: z.strictObject({ token: secret.optional() }).prefault({}),
    tokens: z.array(tokenSchema).default([]),
    channels: z.array(channelSchema).default([]),
    /** Checked by the settings table (settings.ts), not here. */
    settings: z.record(z.string(), z.unknown()).default({}),
    retry: retrySchema.prefault({}),
    timeouts: timeoutsSchema.prefault({}),
  })
  .superRefine((config, ctx) => {
    const issue = (path: PropertyKey[], message: string) => ctx.addIssue({ code: 'custom', path, message });
    const { headers_timeout_ms, request_timeout_ms } = config.server;
    if (headers_timeout_ms > request_timeout_ms)
      issue(
        ['server', 'headers_timeout_ms'],
        `expected at most server.request_timeout_ms (${request_timeout_ms})`,
      );
    checkChannels(config.channels, issue);
    checkTokens(config.tokens, issue);
  });

export type RawConfig = z.infer<typeof configSchema>;
export type ChannelConfig = RawConfig['channels'][number];
export type MockConfig = NonNullable<ChannelConfig['mock']>;
export type TokenConfig = RawConfig['tokens'][number];

export interface GatewayConfig extends Omit<RawConfig, 'settings'> {
  settings: GatewaySettingsUpdate;
  /** Where it was loaded from ("<built-in demo>" for the demo). */
  source: string;
  /** Settings keys of earlier releases the file uses, and what each does now. */
  warnings: string[];
}
