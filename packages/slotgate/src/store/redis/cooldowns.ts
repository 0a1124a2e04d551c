/** A channel's cooldown: one key with a TTL, which the acquire script checks; the load summary notes it for readers. */
import type { Cluster, Redis } from 'ioredis';
import type { Purpose } from '../store.js';
import type { KeyBuilder } from './keys.js';
import type { RedisLoadSummary } from './loads/load-summary.js';

export interface CooldownDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  summary: RedisLoadSummary;
  run: <T>(purpose: Purpose, n: number, work: () => Promise<T>) => Promise<T>;
}

export async function setCooldown(
  d: CooldownDeps,
  channelId: string,
  ms: number,
  reason: string,
): Promise<void> {
  const px = Math.max(1, Math.round(ms));
  await d.run('cooldown', 1, () => d.client.set(d.keys.cooldown(channelId), reason, 'PX', px));
  // for the summary's readers; the acquire script checks the cooldown key alone
  await d.summary.noteCooldown(channelId, px);
}

export async function clearCooldown(d: CooldownDeps, channelId: string): Promise<void> {
  await d.run('cooldown', 1, () => d.client.del(d.keys.cooldown(channelId)));
  await d.summary.clearCooldown(channelId);
}

/** The cooldown's reason and remaining time (-1: no expiry); null when the channel does not cool. */
export async function readCooldown(
  d: CooldownDeps,
  channelId: string,
): Promise<{ reason: string; remainingMs: number } | null> {
  const key = d.keys.cooldown(channelId);
  const [reason, pttl] = await d.run('cooldown', 2, () =>
    Promise.all([d.client.get(key), d.client.pttl(key)]),
  );
  return reason === null || pttl === -2 ? null : { reason, remainingMs: pttl };
}
