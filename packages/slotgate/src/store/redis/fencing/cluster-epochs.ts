/**
 * One epoch key per master of a Redis Cluster (epoch.ts): `<epoch key>:{e<n>}`, with the smallest n whose hash slot
 * the master serves now. A master that restarts empty, or is replaced by its replica, then shows a missing key or
 * another run_id in its own epoch, as a single node would. When slots move (resharding), a master's key may change
 * to another tag: a key the store never verified counts as a first sight, not a restart (a resharding moves keys
 * with their data).
 */
import { createRequire } from 'node:module';
import type { Cluster } from 'ioredis';

/** The hash slot of a key, honouring its {tag}: the function ioredis itself uses (cluster-key-slot ships no types). */
export const hashSlot = createRequire(import.meta.url)('cluster-key-slot') as (key: string) => number;

/** Tags probed per master before giving up (each hits a given master with probability slots served / 16384). */
const MAX_TAGS = 100_000;

/** The epoch keys of the masters serving slots now (the client's slot map, refreshed when it is empty). */
export async function epochKeys(client: Cluster, base: string): Promise<string[]> {
  if (!client.slots.length) await new Promise<void>((resolve) => client.delayUntilReady(() => resolve()));
  const masters = new Set<string>();
  for (const owners of client.slots) if (owners?.[0]) masters.add(owners[0]);
  const keys: string[] = [];
  const pending = new Set(masters);
  for (let n = 0; n < MAX_TAGS && pending.size > 0; n++) {
    const key = `${base}:{e${n}}`;
    const master = client.slots[hashSlot(key)]?.[0];
    if (master && pending.delete(master)) keys.push(key);
  }
  return keys;
}
