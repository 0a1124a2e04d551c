/**
 * docs/configuration.md stays in step with the config file schema (packages/gateway/src/config.ts) and the settings
 * table (packages/gateway/src/settings.ts): every key path of the schema, walked through its zod shape, must appear in the page as
 * `path` (list items as `channels[].id`), and the page's complete example, like every YAML block on it, must load
 * with the real loader.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { configSchema, parseConfigText } from '../../packages/gateway/src/config.js';
import { gatewaySettings } from '../../packages/gateway/src/settings.js';

const DOC = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');

/** The parts of a zod 4 schema definition this walk reads. */
interface Def {
  type: string;
  innerType?: unknown;
  in?: unknown;
  shape?: Record<string, unknown>;
  element?: unknown;
}
const defOf = (schema: unknown): Def => (schema as { def: Def }).def;

/** Through optional/default/prefault/nullable/readonly/catch wrappers and pipes, to the schema that holds keys. */
function unwrap(schema: unknown): Def {
  let def = defOf(schema);
  for (let i = 0; i < 20; i++) {
    if (def.innerType !== undefined) def = defOf(def.innerType);
    else if (def.type === 'pipe' && def.in !== undefined) def = defOf(def.in);
    else break;
  }
  return def;
}

/** Every key path of an object schema: `server`, `server.port`, `channels[].mock.latency_ms`, … */
function keyPaths(schema: unknown, prefix = ''): string[] {
  const def = unwrap(schema);
  if (def.type === 'array' && def.element !== undefined) return keyPaths(def.element, `${prefix}[]`);
  if (def.type !== 'object' || !def.shape) return [];
  return Object.entries(def.shape).flatMap(([key, child]) => {
    const path = prefix ? `${prefix}.${key}` : key;
    return [path, ...keyPaths(child, path)];
  });
}

describe('docs/configuration.md', () => {
  const paths = [...keyPaths(configSchema), ...gatewaySettings.keys.map((k) => `settings.${k}`)];

  it('the schema walk finds the nested keys (so the next test cannot pass on an empty list)', () => {
    expect(paths).toEqual(
      expect.arrayContaining([
        'server.port',
        'redis.url',
        'admin.token',
        'tokens[].group',
        'channels[].max_concurrency',
        'channels[].mock.latency_ms',
        'retry.quota_patterns',
        'timeouts.idle_ms',
        'settings.load_cache_ttl_ms',
      ]),
    );
    expect(paths.length).toBeGreaterThan(50);
  });

  it('documents every key of the config file schema and every setting', () => {
    const missing = paths.filter((p) => !DOC.includes(`\`${p}\``));
    expect(missing, 'keys missing from docs/configuration.md').toEqual([]);
  });

  it('has a complete example that the loader accepts, with every top-level section', () => {
    const block = /<!-- example-config -->\s*```yaml\n([\s\S]*?)```/.exec(DOC)?.[1];
    expect(block, 'the ```yaml block after <!-- example-config -->').toBeDefined();
    const names = [...block!.matchAll(/env:([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]!);
    const env = Object.fromEntries(names.map((n) => [n, `value-of-${n}`]));
    const config = parseConfigText(block!, 'docs/configuration.md', env);
    const topLevel = keyPaths(configSchema).filter((p) => !p.includes('.') && !p.includes('['));
    for (const key of topLevel) expect(block, key).toMatch(new RegExp(`^${key}:`, 'm'));
    expect(new Set(config.channels.map((c) => c.type))).toEqual(new Set(['openai', 'anthropic', 'mock']));
    expect(config.redis?.url).toBe('value-of-SLOTGATE_REDIS_URL');
  });

  it('every YAML block of the page loads with the real loader (the redis.cluster and redis.sentinel examples too)', () => {
    const blocks = [...DOC.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!);
    const load = (block: string) => {
      const names = [...block.matchAll(/env:([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]!);
      return parseConfigText(block, 'docs/configuration.md', Object.fromEntries(names.map((n) => [n, 'x'])));
    };
    const redis = blocks.map((b) => load(b).redis);
    expect(redis.some((r) => r?.cluster?.nodes.length === 3)).toBe(true);
    expect(redis.some((r) => r?.sentinel?.master_name !== undefined)).toBe(true);
  });
});
