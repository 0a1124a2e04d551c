/**
 * The gateway's configuration file (YAML or JSON): one zod schema, parsed once at the edge, then frozen.
 * Secrets may be written as `env:NAME`; they are resolved at load time and never printed. Every error names the path,
 * what was expected and the value received (secret values are masked).
 */
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { SettingsError } from 'slotgate';
import { ADDRESS_HIDDEN, redisSchema, resolveRedisSecrets } from './config-redis.js';
import { gatewaySettings, type GatewaySettingsUpdate } from './settings.js';

const ENV_REF = /^env:([A-Za-z_][A-Za-z0-9_]*)$/;

/** A secret: a literal, or `env:NAME` resolved from the environment at load time. */
const secret = z.string().min(1);

export const mockSchema = z.strictObject({
  /** Time to the first byte (JSON) or first chunk (SSE). */
  latency_ms: z.int().min(0).max(600_000).default(200),
  /** Chunks in a streamed answer. */
  chunks: z.int().min(1).max(10_000).default(12),
  chunk_delay_ms: z.int().min(0).max(60_000).default(40),
  /** Share of requests answered with `error_status` (0–1). */
  error_rate: z.number().min(0).max(1).default(0),
  error_status: z.int().min(400).max(599).default(500),
  /** Retry-After (s) sent with a simulated 429. */
  retry_after_s: z.int().min(0).max(3600).optional(),
  /** The text the mock answers with; it is cut into `chunks` pieces. */
  reply: z.string().default('Hello from slotgate! This answer was streamed by a mock channel.'),
});

const channelSchema = z.strictObject({
  id: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9._:@/-]+$/, 'letters, digits and . _ : @ / -'),
  type: z.enum(['openai', 'anthropic', 'mock']),
  base_url: z.url().optional(),
  key: secret.optional(),
  groups: z.array(z.string().min(1)).min(1).default(['default']),
  /** Model names this channel serves; `*` serves every model. */
  models: z.array(z.string().min(1)).min(1),
  priority: z.int().default(0),
  weight: z.int().min(0).default(1),
  /** 0 = unlimited: never touches Redis. */
  max_concurrency: z.int().min(0).default(0),
  max_waiting: z.int().min(1).optional(),
  enabled: z.boolean().default(true),
  /** Extra headers sent upstream (e.g. OpenAI-Organization); values may be env:NAME. */
  headers: z.record(z.string(), z.string()).default({}),
  /** anthropic-version header for anthropic channels. */
  anthropic_version: z.string().default('2023-06-01'),
  mock: mockSchema.optional(),
});

const tokenSchema = z.strictObject({
  key: secret,
  name: z.string().min(1),
  group: z.string().min(1).default('default'),
  /** The client whose limit the token's requests count against (tokens of one client share it); default: its name. */
  client: z.string().min(1).max(128).optional(),
  /** Requests of the client in flight at once, across every instance; 0 = no limit (no Redis command). */
  max_concurrency: z.int().min(0).max(1_000_000).default(0),
  /** The client's share of a saturated channel against other clients. */
  weight: z.number().positive().max(1_000_000).default(1),
});

export const configSchema = z
  .strictObject({
    server: z
      .strictObject({
        host: z.string().min(1).default('127.0.0.1'),
        port: z.int().min(0).max(65535).default(8080),
        /** Largest request body accepted; larger bodies get 413. */
        body_limit_bytes: z
          .int()
          .min(1024)
          .max(1024 ** 3)
          .default(10 * 1024 * 1024),
        /** On SIGTERM, how long in-flight requests may take to finish. */
        shutdown_timeout_ms: z.int().min(0).max(600_000).default(30_000),
        /** Until a request's headers have all arrived (a new connection's first request: from the connect). */
        headers_timeout_ms: z.int().min(100).max(600_000).default(10_000),
        /** Until a whole request, body included, has arrived; its response may then take as long as it needs. */
        request_timeout_ms: z.int().min(100).max(3_600_000).default(60_000),
        /** How long a keep-alive connection may stay idle between two requests. */
        keep_alive_timeout_ms: z.int().min(100).max(3_600_000).default(72_000),
        /** Log level (pino). */
        log_level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
        /** Log lines as JSON, as pino-pretty's readable lines, or (auto) pretty only when stdout is a terminal. */
        log_format: z.enum(['auto', 'json', 'pretty']).default('auto'),
      })
      .prefault({}),
    redis: redisSchema.optional(),
    admin: z.strictObject({ token: secret.optional() }).prefault({}),
    tokens: z.array(tokenSchema).default([]),
    channels: z.array(channelSchema).default([]),
    settings: z.record(z.string(), z.unknown()).default({}),
    retry: z
      .strictObject({
        /** Upstream 429 bodies matching these (case-insensitive) are quota/balance errors: no cooldown. */
        quota_patterns: z
          .array(z.string().min(1))
          .default([
            'insufficient_quota',
            'quota exceeded',
            'exceeded your current quota',
            'balance',
            'billing',
          ]),
        /** Upstream error bodies matching these count as rate limits when cooldown_on_message_match is on. */
        rate_limit_patterns: z
          .array(z.string().min(1))
          .default(['rate limit', 'rate_limit', 'too many requests', 'overloaded']),
      })
      .prefault({}),
    timeouts: z
      .strictObject({
        connect_ms: z.int().min(1).max(600_000).default(10_000),
        /** Until the upstream's response headers arrive. */
        first_byte_ms: z.int().min(1).max(3_600_000).default(120_000),
        /** Longest gap between two chunks of a streamed answer. */
        idle_ms: z.int().min(1).max(3_600_000).default(120_000),
      })
      .prefault({}),
  })
  .superRefine((config, ctx) => {
    if (config.server.headers_timeout_ms > config.server.request_timeout_ms) {
      ctx.addIssue({
        code: 'custom',
        path: ['server', 'headers_timeout_ms'],
        message: `expected at most server.request_timeout_ms (${config.server.request_timeout_ms})`,
      });
    }
    const ids = new Set<string>();
    config.channels.forEach((c, i) => {
      if (ids.has(c.id))
        ctx.addIssue({
          code: 'custom',
          path: ['channels', i, 'id'],
          message: `duplicate channel id "${c.id}"`,
        });
      ids.add(c.id);
      if (c.type !== 'mock' && !c.base_url) {
        ctx.addIssue({
          code: 'custom',
          path: ['channels', i, 'base_url'],
          message: `required for a ${c.type} channel`,
        });
      }
      if (c.type !== 'mock' && !c.key) {
        ctx.addIssue({
          code: 'custom',
          path: ['channels', i, 'key'],
          message: `required for a ${c.type} channel`,
        });
      }
    });
    const keys = new Set<string>();
    const clients = new Map<string, { index: number; max: number; weight: number; named: boolean }>();
    config.tokens.forEach((t, i) => {
      if (keys.has(t.key))
        ctx.addIssue({ code: 'custom', path: ['tokens', i, 'key'], message: 'duplicate token key' });
      keys.add(t.key);
      // the tokens of one client share one limit: they must say the same
      const client = t.client ?? t.name;
      const first = clients.get(client);
      if (!first)
        clients.set(client, { index: i, max: t.max_concurrency, weight: t.weight, named: !!t.client });
      else {
        for (const [field, mine, theirs] of [
          ['max_concurrency', t.max_concurrency, first.max],
          ['weight', t.weight, first.weight],
        ] as const) {
          if (mine !== theirs) {
            ctx.addIssue({
              code: 'custom',
              path: ['tokens', i, field],
              // the formatter appends this token's own value ("got …"; "got nothing" when left out)
              message:
                `tokens of client ${JSON.stringify(client)} must give it the same ${field}` +
                ` (${field === 'max_concurrency' ? '0' : '1'} when left out): tokens[${first.index}] gives ${theirs}` +
                (first.named ? '' : ' (it names no client: its name is its client)'),
            });
          }
        }
      }
    });
  });

type RawConfig = z.infer<typeof configSchema>;
export type ChannelConfig = RawConfig['channels'][number] & { mock?: z.infer<typeof mockSchema> };
export type MockConfig = z.infer<typeof mockSchema>;
export type TokenConfig = RawConfig['tokens'][number];

export interface GatewayConfig extends Omit<RawConfig, 'settings'> {
  settings: GatewaySettingsUpdate;
  /** Where it was loaded from ("<built-in demo>" for the demo). */
  source: string;
}

export class ConfigError extends Error {
  readonly code = 'invalid_config';
  constructor(
    readonly source: string,
    readonly issues: readonly string[],
  ) {
    super(`invalid configuration in ${source}:\n  - ${issues.join('\n  - ')}`);
    this.name = 'ConfigError';
  }
}

/**
 * Paths whose values are secrets, or may hold secrets inside (a `channels` list written as a mapping, a token given as
 * a bare string, the whole document): never echoed in error messages, which reach logs and /admin/status.
 */
const SECRET_PATH =
  /(^|\.)(key|token|url|base_url|headers\.[^.]+|(sentinel_)?(password|username))$|^(\(root\)|redis(\.cluster|\.sentinel)?|admin|tokens(\[\d+\])?|channels(\[\d+\])?(\.headers)?)$/;

/** Paths of Redis addresses: a value with `@` there is likely a URL with a password in it, never echoed. */
const ADDRESS_PATH = /^redis\.(cluster\.(nodes|nat_map)|sentinel\.sentinels)\b/;

function pathOf(path: readonly PropertyKey[]): string {
  return (
    path
      .map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`))
      .join('')
      .replace(/^\./, '') || '(root)'
  );
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = root;
  for (const p of path)
    v = v !== null && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[p] : undefined;
  return v;
}

function show(value: unknown, path: string): string {
  if (value === undefined) return 'nothing';
  if (SECRET_PATH.test(path)) return '(a secret, not shown)';
  const text = JSON.stringify(value) ?? String(value);
  if (ADDRESS_PATH.test(path) && text.includes('@')) return ADDRESS_HIDDEN;
  return text.length > 60 ? `${text.slice(0, 60)}…` : text;
}

/** Replaces `env:NAME` in every secret-bearing field; a missing variable is a config error. */
function resolveSecrets(config: RawConfig, env: NodeJS.ProcessEnv, issues: string[]): void {
  const resolve = (value: string, path: string): string => {
    const m = ENV_REF.exec(value);
    if (!m) return value;
    const resolved = env[m[1]!];
    if (resolved === undefined || resolved === '') {
      issues.push(
        `${path}: expected the environment variable ${m[1]} to be set (from "env:${m[1]}"), got nothing`,
      );
      return value;
    }
    return resolved;
  };
  if (config.redis) resolveRedisSecrets(config.redis, resolve, issues);
  if (config.admin.token) config.admin.token = resolve(config.admin.token, 'admin.token');
  config.tokens.forEach((t, i) => (t.key = resolve(t.key, `tokens[${i}].key`)));
  config.channels.forEach((c, i) => {
    if (c.key) c.key = resolve(c.key, `channels[${i}].key`);
    for (const [name, value] of Object.entries(c.headers))
      c.headers[name] = resolve(value, `channels[${i}].headers.${name}`);
  });
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** Validates a parsed document; throws ConfigError listing every problem. */
export function parseConfig(
  input: unknown,
  source: string,
  env: NodeJS.ProcessEnv = process.env,
): GatewayConfig {
  const result = configSchema.safeParse(input ?? {});
  if (!result.success) {
    const issues = result.error.issues.map((issue) => {
      const path = pathOf(issue.path);
      if (issue.code === 'unrecognized_keys') {
        return `${path}: unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
      }
      // a check that says itself what it got (without the secrets next to it)
      const got = issue.code === 'custom' ? (issue.params as { got?: unknown } | undefined)?.got : undefined;
      if (typeof got === 'string') return `${path}: ${issue.message}, got ${got}`;
      return `${path}: ${issue.message}, got ${show(valueAt(input, issue.path), path)}`;
    });
    // The settings section is checked by its own schema: report its problems in the same pass, not on the next try.
    const rawSettings = valueAt(input, ['settings']);
    if (rawSettings !== undefined && rawSettings !== null && typeof rawSettings === 'object') {
      try {
        gatewaySettings.parse(rawSettings);
      } catch (err) {
        if (err instanceof SettingsError) issues.push(...err.issues.map((i) => `settings: ${i}`));
      }
    }
    throw new ConfigError(source, issues);
  }
  const config = result.data;
  const issues: string[] = [];
  resolveSecrets(config, env, issues);
  let settings: GatewaySettingsUpdate = {};
  try {
    settings = gatewaySettings.parse(config.settings);
  } catch (err) {
    if (err instanceof SettingsError) issues.push(...err.issues.map((i) => `settings: ${i}`));
    else throw err;
  }
  if (issues.length) throw new ConfigError(source, issues);
  return deepFreeze({ ...config, settings, source });
}

/** Parses YAML (a superset of JSON) text. */
export function parseConfigText(text: string, source: string, env?: NodeJS.ProcessEnv): GatewayConfig {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new ConfigError(source, [`not valid YAML/JSON: ${(err as Error).message.split('\n')[0]}`]);
  }
  // An empty (or half-written) file is not "every default": that would drop every channel and token on a reload.
  if (doc === null || doc === undefined) {
    throw new ConfigError(source, ['the file is empty; expected a YAML/JSON mapping']);
  }
  return parseConfig(doc, source, env);
}

export async function loadConfigFile(path: string, env?: NodeJS.ProcessEnv): Promise<GatewayConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(path, [
      `cannot read the file: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    ]);
  }
  return parseConfigText(text, path, env);
}

/** The bundled demo configuration (mock channels, no Redis), run by `slotgate serve` without --config. */
export async function readDemoConfigText(): Promise<string> {
  return readFile(new URL('./demo.yaml', import.meta.url), 'utf8');
}
