/** One call of renewLeases or reclaimLeases for a batch; returns the leases not held. */
import type { Cluster, Redis } from 'ioredis';
import type { LeaseRef } from '../../store.js';
import type { KeyBuilder } from '../keys.js';
import type { Script } from '../scripts.js';

type Arg = string | number;

export async function runLeaseBatch<L extends LeaseRef>(
  client: Redis | Cluster,
  keys: KeyBuilder,
  script: Script<number[]>,
  head: readonly Arg[],
  batch: readonly L[],
  extra: (lease: L) => readonly Arg[] = () => [],
): Promise<L[]> {
  const keyIndex = new Map<string, number>();
  const args: Arg[] = [...head];
  for (const lease of batch) {
    const key = keys.slots(lease.channelId);
    let index = keyIndex.get(key);
    if (index === undefined) keyIndex.set(key, (index = keyIndex.size + 1));
    args.push(index, lease.token, ...extra(lease));
  }
  const notHeld = await script.call(client, [...keyIndex.keys()], args);
  return notHeld.map((k) => batch[k - 1]!);
}
