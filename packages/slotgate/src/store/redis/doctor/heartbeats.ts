import type { Cluster, Redis } from 'ioredis';
import type { KeyBuilder } from '../keys.js';
import { redisMs } from '../loads/redis-offset.js';

export async function redisNow(client: Redis | Cluster): Promise<number> {
  return redisMs(await client.time());
}

/** The age of each instance's last heartbeat at `now` (Redis ms). */
export async function heartbeatAges(
  client: Redis | Cluster,
  keys: KeyBuilder,
  now: number,
): Promise<Map<string, number>> {
  const ages = new Map<string, number>();
  for (const [id, value] of Object.entries(await client.hgetall(keys.instances()))) {
    try {
      const seen = Date.parse((JSON.parse(value) as { seen_at?: string }).seen_at ?? '');
      if (Number.isFinite(seen)) ages.set(id, now - seen);
    } catch {
      // an entry that is not a heartbeat says nothing about its instance
    }
  }
  return ages;
}
