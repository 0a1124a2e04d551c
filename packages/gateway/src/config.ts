/**
 * Loading the config file: YAML (a superset of JSON) checked against the schema, `env:NAME` secrets resolved from the
 * environment, then frozen. Every error names the path, what was expected and the value received; secrets and what
 * may hold them are never echoed, since the messages reach logs and /admin/status.
 */
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { SettingsError } from 'slotgate';
import { ADDRESS_HIDDEN, redisUrlProblem } from './config-redis.js';
import { configSchema, type GatewayConfig, type RawConfig } from './config-schema.js';
import { gatewaySettings, type GatewaySettingsUpdate } from './settings.js';

export { configSchema, type GatewayConfig } from './config-schema.js';

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

const ENV_REF = /^env:([A-Za-z_][A-Za-z0-9_]*)$/;

/** Paths whose values are secrets or may hold some (a `channels` list written as a mapping, the whole document). */
const SECRET_PATH =
  /(^|\.)(key|token|url|base_url|headers\.[^.]+|(sentinel_)?(password|username))$|^(\(root\)|redis(\.cluster|\.sentinel)?|admin|tokens(\[\d+\])?|channels(\[\d+\])?(\.headers)?)$/;

/** Paths of Redis addresses: a value with `@` there is likely a URL with a password in it. */
const ADDRESS_PATH = /^redis\.(cluster\.(nodes|nat_map)|sentinel\.sentinels)\b/;

function pathOf(path: readonly PropertyKey[]): string {
  const text = path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('');
  return text.replace(/^\./, '') || '(root)';
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

/** The fields that may be written `env:NAME`. */
const SECRET_FIELD =
  /^(redis\.(url|username|password|tls\.(ca|cert|key)|(cluster|sentinel)\.(sentinel_)?(username|password))|admin\.token|tokens\[\d+\]\.key|channels\[\d+\]\.(key|headers\..+))$/;

/** Replaces `env:NAME` in every secret field: a missing variable is a config error, and so is a bad Redis URL. */
function resolveSecrets(config: RawConfig, env: NodeJS.ProcessEnv, issues: string[]): void {
  const resolve = (value: string, path: string): string => {
    const m = ENV_REF.exec(value);
    if (!m) return value;
    const resolved = env[m[1]!];
    if (resolved !== undefined && resolved !== '') return resolved;
    issues.push(
      `${path}: expected the environment variable ${m[1]} to be set (from "env:${m[1]}"), got nothing`,
    );
    return value;
  };
  const walk = (node: object, path: string): void => {
    for (const [key, value] of Object.entries(node)) {
      const at = Array.isArray(node) ? `${path}[${key}]` : path ? `${path}.${key}` : key;
      if (value !== null && typeof value === 'object') walk(value, at);
      if (typeof value !== 'string' || !SECRET_FIELD.test(at)) continue;
      const resolved = ((node as Record<string, unknown>)[key] = resolve(value, at));
      const problem = at === 'redis.url' && !resolved.startsWith('env:') && redisUrlProblem(resolved);
      if (problem) issues.push(`redis.url: ${problem}`);
    }
  };
  walk(config, '');
}

/** redis.tls's `ca`, `cert` and `key`: a PEM from `env:` stays; any other value is a file's path, read here. */
function readTlsFiles(config: RawConfig, issues: string[]): void {
  const tls = config.redis?.tls;
  if (!tls) return;
  for (const field of ['ca', 'cert', 'key'] as const) {
    const value = tls[field];
    if (value === undefined || value.startsWith('-----BEGIN') || value.startsWith('env:')) continue;
    try {
      tls[field] = readFileSync(value, 'utf8');
    } catch (err) {
      issues.push(
        `redis.tls.${field}: cannot read the file ${JSON.stringify(value)}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`,
      );
    }
  }
}

/** The settings section, checked by the settings table; its problems join `issues`. */
function parseSettings(raw: unknown, issues: string[]): GatewaySettingsUpdate {
  try {
    return gatewaySettings.parse(raw);
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    issues.push(...err.issues.map((i) => `settings: ${i}`));
    return {};
  }
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
  const issues: string[] = [];
  if (!result.success) {
    for (const issue of result.error.issues) {
      const path = pathOf(issue.path);
      if (issue.code === 'unrecognized_keys') {
        const keys = issue.keys.map((k) => `"${k}"`).join(', ');
        issues.push(`${path}: unknown key${issue.keys.length > 1 ? 's' : ''} ${keys}`);
        continue;
      }
      // a check that says itself what it got (without the secrets next to it)
      const got = issue.code === 'custom' ? (issue.params as { got?: unknown } | undefined)?.got : undefined;
      issues.push(
        `${path}: ${issue.message}, got ${typeof got === 'string' ? got : show(valueAt(input, issue.path), path)}`,
      );
    }
    // the settings section's problems in the same pass, not on the next try
    const rawSettings = valueAt(input, ['settings']);
    if (rawSettings !== null && typeof rawSettings === 'object') parseSettings(rawSettings, issues);
    throw new ConfigError(source, issues);
  }
  const config = result.data;
  resolveSecrets(config, env, issues);
  readTlsFiles(config, issues);
  const settings = parseSettings(config.settings, issues);
  if (issues.length) throw new ConfigError(source, issues);
  const warnings = gatewaySettings.warnings(config.settings).map((w) => `settings: ${w}`);
  if (valueAt(input, ['server', 'shutdown_timeout_ms']) !== undefined)
    warnings.push('server.shutdown_timeout_ms is now server.drain_timeout_ms: read as it; rename it');
  return deepFreeze({ ...config, settings, source, warnings });
}

/** A YAML/JSON document; undefined for an empty one. */
export function parseDocument(text: string, source: string): unknown {
  try {
    return parseYaml(text) ?? undefined;
  } catch (err) {
    // the parser's first line only (the lines after it quote the file, which may hold a secret), without the colon
    // that introduced them: "… at line 3, column 1"
    const first = (err as Error).message.split('\n')[0]!.replace(/:\s*$/, '');
    throw new ConfigError(source, [`not valid YAML/JSON: ${first}`]);
  }
}

export function parseConfigText(text: string, source: string, env?: NodeJS.ProcessEnv): GatewayConfig {
  const doc = parseDocument(text, source);
  // An empty (or half-written) file is not "every default": that would drop every channel and token on a reload.
  if (doc === undefined) throw new ConfigError(source, ['the file is empty; expected a YAML/JSON mapping']);
  return parseConfig(doc, source, env);
}

export async function readConfigText(path: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    const reason = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw new ConfigError(path, [`cannot read the file: ${reason}`]);
  }
}

export async function loadConfigFile(path: string, env?: NodeJS.ProcessEnv): Promise<GatewayConfig> {
  return parseConfigText(await readConfigText(path), path, env);
}

/** The bundled demo configuration (mock channels, no Redis), run by `slotgate serve` without --config. */
export async function readDemoConfigText(): Promise<string> {
  return readFile(new URL('./demo.yaml', import.meta.url), 'utf8');
}
