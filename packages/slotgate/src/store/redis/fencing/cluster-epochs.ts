/**
 * One epoch key per Cluster master, `<epoch key>:{e<n>}` with the smallest n whose slot it serves, so each master's
 * restart or failover shows in its own key. After a resharding a master's key may change: a key never verified
 * counts as a first sight, not a restart.
 */
import { createRequire } from 'node:module';
import type { Cluster } from 'ioredis';

/** The hash slot of a key, as ioredis computes it (cluster-key-slot ships no types). */
export const hashSlot = createRequire(import.meta.url)('cluster-key-slot') as (key: string) => number;

/** Tags probed before giving up. */
const MAX_TAGS = 100_000;

/** The epoch keys of the masters serving slots now. */
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
