/** renewLeases or reclaimLeases over leases in batches (one channel each on Cluster); returns the leases not held. */
import type { Cluster, Redis } from 'ioredis';
import type { LeaseRef, Purpose } from '../../store.js';
import type { KeyBuilder } from '../keys.js';
import type { Script } from '../scripts.js';
import { batchesOf } from './topology.js';

type Arg = string | number;

export interface LeaseBatchDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  run: <T>(purpose: Purpose, n: number, work: () => Promise<T>) => Promise<T>;
}

/** One `renew` command per batch. */
export async function runLeaseBatches<L extends LeaseRef>(
  deps: LeaseBatchDeps,
  script: Script<number[]>,
  head: readonly Arg[],
  leases: readonly L[],
  extra: (lease: L) => readonly Arg[] = () => [],
): Promise<L[]> {
  if (leases.length === 0) return [];
  const batches = batchesOf(deps.client, leases);
  const send = (batch: readonly L[]) => runLeaseBatch(deps.client, deps.keys, script, head, batch, extra);
  return (await deps.run('renew', batches.length, () => Promise.all(batches.map(send)))).flat();
}

async function runLeaseBatch<L extends LeaseRef>(
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
