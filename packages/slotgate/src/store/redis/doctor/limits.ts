/**
 * The doctor's view of adaptive limits: for each adaptive channel a config names, the limit stored for the fleet, the
 * limit in force that makes (core/adaptive.ts), and why the max applies instead when it does. Read-only: one HGET per
 * channel and one of the settings overrides.
 */
import type { Cluster, Redis } from 'ioredis';
import { ADAPTIVE_DEFAULTS, effectiveLimit, floorOf } from '../../../core/adaptive.js';
import { describeResource } from '../../../core/client.js';
import { KeyBuilder } from '../keys.js';

/** An adaptive channel as a config names it. */
export interface AdaptiveChannel {
  id: string;
  maxConcurrency: number;
  /** @default 1 */
  minConcurrency?: number;
  /** false: the limit is learned, not applied. @default true */
  enforce?: boolean;
}

export interface StoredLimit {
  channelId: string;
  min: number;
  max: number;
  /** The value stored (field `l` of the limit key); absent when no key: the limit starts at the max. */
  stored?: number;
  /** The limit the stored value makes: its whole part within [min, max]; the max when none is stored. */
  limit: number;
  /** Why the channel's max applies whatever is stored. */
  notApplied?: 'enforce_false' | 'switched_off';
}

export interface AdaptiveReport {
  /** Where the fleet's switch `adaptive_enabled: false` comes from; absent when limits are on. */
  switchedOff?: 'override' | 'config';
  limits: StoredLimit[];
}

/**
 * Reads each channel's stored limit, and the settings override of `adaptive_enabled` (which wins over
 * `configEnabled`, the config file's value).
 */
export async function readAdaptiveLimits(
  client: Redis | Cluster,
  prefix: string,
  channels: readonly AdaptiveChannel[],
  configEnabled = true,
): Promise<AdaptiveReport> {
  const keys = new KeyBuilder(prefix);
  const [override, ...stored] = await Promise.all([
    client.hget(keys.settings(), 'adaptive_enabled'),
    ...channels.map((c) => client.hget(keys.limit(c.id), 'l')),
  ]);
  const enabled = override === 'false' ? false : override === 'true' ? true : configEnabled;
  const switchedOff = enabled ? undefined : override === 'false' ? 'override' : 'config';
  const limits = channels.map((c, i): StoredLimit => {
    const floor = c.minConcurrency ?? ADAPTIVE_DEFAULTS.minConcurrency;
    const min = floorOf({ floor, ceiling: c.maxConcurrency });
    const raw = stored[i] == null ? NaN : Number(stored[i]);
    const value = Number.isFinite(raw) ? raw : undefined;
    const notApplied = switchedOff ? 'switched_off' : c.enforce === false ? 'enforce_false' : undefined;
    return {
      channelId: c.id,
      min,
      max: c.maxConcurrency,
      ...(value !== undefined && { stored: value }),
      limit: effectiveLimit(value, min, c.maxConcurrency),
      ...(notApplied && { notApplied }),
    };
  });
  return { ...(switchedOff && { switchedOff }), limits };
}

const WHY = {
  enforce_false: 'enforce false',
  switched_off: 'adaptive limits switched off',
} as const;

/** One line per channel, after one for the fleet's switch when it is off. */
export function formatAdaptiveLimits(report: AdaptiveReport): string[] {
  const lines: string[] = [];
  if (report.switchedOff) {
    const from = report.switchedOff === 'override' ? 'a settings override' : 'the config file';
    lines.push(`  ADAPTIVE switched off (adaptive_enabled false, ${from}): each channel's max applies`);
  }
  for (const l of report.limits) {
    const name = describeResource(l.channelId);
    const bounds = `min ${l.min}, max ${l.max}`;
    if (l.stored === undefined) {
      lines.push(`  ADAPTIVE ${name} no limit stored: the max applies (${bounds})`);
      continue;
    }
    const detail = `(${bounds}, stored ${l.stored.toFixed(3)})`;
    lines.push(
      l.notApplied
        ? `  ADAPTIVE ${name} limit ${l.limit} learned, not applied (${WHY[l.notApplied]}): the max applies ${detail}`
        : `  ADAPTIVE ${name} limit ${l.limit} ${detail}`,
    );
  }
  return lines;
}
