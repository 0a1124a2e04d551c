/**
 * The `channels` and `tokens` sections of the config file, and the checks across their entries: unique channel ids
 * and token keys, an upstream's address and key, and one limit per client.
 */
import { z } from 'zod';

/** A secret: a literal, or `env:NAME` resolved from the environment at load time. */
export const secret = z.string().min(1);

export const mockSchema = z.strictObject({
  /** Time to the first byte (JSON) or first chunk (SSE). */
  latency_ms: z.int().min(0).max(600_000).default(200),
  chunks: z.int().min(1).max(10_000).default(12),
  chunk_delay_ms: z.int().min(0).max(60_000).default(40),
  /** Share of requests answered with `error_status` (0–1). */
  error_rate: z.number().min(0).max(1).default(0),
  error_status: z.int().min(400).max(599).default(500),
  /** Retry-After (s) sent with a simulated 429. */
  retry_after_s: z.int().min(0).max(3600).optional(),
  /** The text the mock answers with, cut into `chunks` pieces. */
  reply: z.string().default('Hello from slotgate! This answer was streamed by a mock channel.'),
});

/** A channel's adaptive limit (docs/admission.md, "Adaptive limits"); its max_concurrency stays the ceiling. */
export const adaptiveSchema = z.strictObject({
  enabled: z.boolean().default(true),
  min_concurrency: z.int().min(1).default(1),
  /** false: learned and shown, not applied (observe before enforcing). */
  enforce: z.boolean().default(true),
  probe_after: z.int().min(1).max(10_000).default(30),
  /** 0 (the default) ignores latency: an LLM's first byte varies with its prompt. */
  latency_tolerance: z.union([z.literal(0), z.number().min(1).max(100)]).default(0),
  /** A 429 whose Retry-After is longer than this still cools the channel down. */
  retry_after_cooldown_s: z.int().min(0).max(3600).default(10),
});

export const channelSchema = z.strictObject({
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
  anthropic_version: z.string().default('2023-06-01'),
  mock: mockSchema.optional(),
  adaptive: adaptiveSchema.optional(),
});

export const tokenSchema = z.strictObject({
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

/** Reports a problem at a path of the config file. */
export type Issue = (path: PropertyKey[], message: string) => void;

export function checkChannels(channels: z.infer<typeof channelSchema>[], issue: Issue): void {
  const ids = new Set<string>();
  channels.forEach((c, i) => {
    if (ids.has(c.id)) issue(['channels', i, 'id'], `duplicate channel id "${c.id}"`);
    ids.add(c.id);
    if (c.adaptive?.enabled && c.max_concurrency === 0)
      issue(['channels', i, 'adaptive'], 'needs max_concurrency > 0: the limit adapts below it');
    else if (c.adaptive?.enabled && c.adaptive.min_concurrency > c.max_concurrency)
      issue(['channels', i, 'adaptive', 'min_concurrency'], `above max_concurrency (${c.max_concurrency})`);
    if (c.type === 'mock') return;
    if (!c.base_url) issue(['channels', i, 'base_url'], `required for a ${c.type} channel`);
    if (!c.key) issue(['channels', i, 'key'], `required for a ${c.type} channel`);
  });
}

/** Token keys are unique, and the tokens of one client give it the same limit and weight. */
export function checkTokens(tokens: z.infer<typeof tokenSchema>[], issue: Issue): void {
  const keys = new Set<string>();
  const clients = new Map<string, { index: number; max: number; weight: number; named: boolean }>();
  tokens.forEach((t, i) => {
    if (keys.has(t.key)) issue(['tokens', i, 'key'], 'duplicate token key');
    keys.add(t.key);
    const client = t.client ?? t.name;
    const first = clients.get(client);
    if (!first) {
      clients.set(client, { index: i, max: t.max_concurrency, weight: t.weight, named: !!t.client });
      return;
    }
    for (const [field, mine, theirs] of [
      ['max_concurrency', t.max_concurrency, first.max],
      ['weight', t.weight, first.weight],
    ] as const) {
      if (mine === theirs) continue;
      // the formatter appends this token's own value ("got …"; "got nothing" when left out)
      issue(
        ['tokens', i, field],
        `tokens of client ${JSON.stringify(client)} must give it the same ${field}` +
          ` (${field === 'max_concurrency' ? '0' : '1'} when left out): tokens[${first.index}] gives ${theirs}` +
          (first.named ? '' : ' (it names no client: its name is its client)'),
      );
    }
  });
}
