/**
 * The channel registry: the configured channels as admission candidates, indexed by (API shape, group, model). Rebuilt
 * whole on every config reload and swapped in one assignment, so a request sees one consistent version.
 */
import { createHash } from 'node:crypto';
import type { AdaptiveOptions, Candidate, Client } from 'slotgate';
import type { ChannelConfig, TokenConfig } from './config-schema.js';
import type { ApiShape } from './http-errors.js';

/** The endpoints a channel type can serve: its own API's, and both for the in-process mock. */
export const SHAPES_OF_TYPE: Readonly<Record<ChannelConfig['type'], readonly ApiShape[]>> = {
  openai: ['openai'],
  anthropic: ['anthropic'],
  mock: ['openai', 'anthropic'],
};

/**
 * Client tokens are held and looked up by their SHA-256 digest: a lookup's time depends on the digest, not on how
 * many leading characters of a guess match a key, and the registry holds no key as a lookup key.
 */
const tokenDigest = (key: string): string => createHash('sha256').update(key).digest('base64');

export interface GatewayChannel extends Candidate {
  id: string;
  maxConcurrency: number;
  priority: number;
  weight: number;
  enabled: boolean;
  config: ChannelConfig;
}

/** An authenticated caller: its token's config, and the client its requests count against. */
export type Caller = Omit<TokenConfig, 'client'> & { client: Client };

export interface ClientInfo {
  client: Client;
  /** The names of the tokens that count against it. */
  tokens: string[];
}

const ANONYMOUS: Caller = {
  key: '',
  name: 'anonymous',
  group: 'default',
  max_concurrency: 0,
  weight: 1,
  client: { id: 'anonymous', maxConcurrency: 0, weight: 1 },
};

const adaptiveOf = (a: NonNullable<ChannelConfig['adaptive']>): AdaptiveOptions => ({
  enabled: a.enabled,
  minConcurrency: a.min_concurrency,
  enforce: a.enforce,
  probeAfter: a.probe_after,
  latencyTolerance: a.latency_tolerance,
});

const indexKey = (shape: ApiShape, group: string, model: string) => `${shape}\u0000${group}\u0000${model}`;

export class ChannelRegistry {
  readonly channels: readonly GatewayChannel[];
  private readonly byId = new Map<string, GatewayChannel>();
  /** By API shape, group and model name (`*` for the channels serving every model). */
  private readonly index = new Map<string, GatewayChannel[]>();
  private readonly tokens = new Map<string, Caller>();
  private readonly clientInfo = new Map<string, ClientInfo>();

  constructor(channels: readonly ChannelConfig[], tokens: readonly TokenConfig[]) {
    this.channels = channels.map((config) => ({
      id: config.id,
      maxConcurrency: config.max_concurrency,
      priority: config.priority,
      weight: config.weight,
      enabled: config.enabled,
      ...(config.max_waiting !== undefined ? { maxWaiting: config.max_waiting } : {}),
      ...(config.adaptive && { adaptive: adaptiveOf(config.adaptive) }),
      config,
    }));
    for (const channel of this.channels) {
      this.byId.set(channel.id, channel);
      if (!channel.enabled) continue;
      for (const shape of SHAPES_OF_TYPE[channel.config.type])
        for (const group of channel.config.groups)
          for (const model of channel.config.models) {
            const key = indexKey(shape, group, model);
            this.index.set(key, [...(this.index.get(key) ?? []), channel]);
          }
    }
    for (const token of tokens) {
      const id = token.client ?? token.name;
      const info = this.clientInfo.get(id) ?? {
        client: { id, maxConcurrency: token.max_concurrency, weight: token.weight },
        tokens: [],
      };
      this.clientInfo.set(id, info);
      info.tokens.push(token.name);
      this.tokens.set(tokenDigest(token.key), { ...token, client: info.client });
    }
  }

  get(id: string): GatewayChannel | undefined {
    return this.byId.get(id);
  }

  /** The enabled channels serving `model` for `group` on API `shape`: exact model names first, then `*` channels. */
  candidates(group: string, model: string, shape: ApiShape): GatewayChannel[] {
    const exact = this.index.get(indexKey(shape, group, model)) ?? [];
    const any = this.index.get(indexKey(shape, group, '*')) ?? [];
    if (any.length === 0) return exact;
    return [...new Set([...exact, ...any])];
  }

  /** The model names the group can use (wildcard channels add nothing nameable). */
  models(group: string): string[] {
    const names = new Set<string>();
    for (const channel of this.channels) {
      if (!channel.enabled || !channel.config.groups.includes(group)) continue;
      for (const model of channel.config.models) if (model !== '*') names.add(model);
    }
    return [...names].sort();
  }

  /** The key's caller, or undefined. With no tokens configured, auth is off: callers are anonymous, unlimited. */
  authenticate(key: string | undefined): Caller | undefined {
    if (this.tokens.size === 0) return ANONYMOUS;
    return key ? this.tokens.get(tokenDigest(key)) : undefined;
  }

  /** Every client named by the tokens, with its limit and the names of its tokens (never their keys). */
  clients(): ClientInfo[] {
    return [...this.clientInfo.values()];
  }
}
