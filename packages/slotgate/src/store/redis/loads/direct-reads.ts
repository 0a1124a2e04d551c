/** Loads read straight from each channel's own keys: the rollback path and the operators' views. Read-only. */
import type { Cluster, Redis } from 'ioredis';
import { countByInstance } from '../../holders.js';
import type { ChannelLoad } from '../../store.js';
import type { KeyBuilder } from '../keys.js';
import { SCRIPTS } from '../scripts.js';
import { batchesOf } from '../slots/topology.js';

export interface DirectReadDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  run: <T>(n: number, work: () => Promise<T>) => Promise<T>;
  /** The registration lifetime this store last registered with. */
  liveMs: () => number;
}

function toLoad(active: number, waiting: number, pttl: number): ChannelLoad {
  const coolingDown = pttl !== -2;
  return { active, waiting, coolingDown, cooldownRemainingMs: coolingDown ? pttl : 0 };
}

export async function readLoads(
  deps: DirectReadDeps,
  channelIds: readonly string[],
): Promise<Map<string, ChannelLoad>> {
  const { client, keys } = deps;
  const batches = batchesOf(
    client,
    [...new Set(channelIds)].map((channelId) => ({ channelId })),
  );
  const read = (batch: readonly { channelId: string }[]) =>
    SCRIPTS.readLoads.call(
      client,
      batch.flatMap(({ channelId: id }) => [keys.slots(id), keys.queue(id), keys.cooldown(id)]),
      [deps.liveMs()],
    );
  const replies = await deps.run(batches.length, () => Promise.all(batches.map(read)));
  const loads = new Map<string, ChannelLoad>();
  batches.forEach((batch, b) =>
    batch.forEach(({ channelId }, i) => {
      const [active, waiting, pttl] = replies[b]!.slice(3 * i, 3 * i + 3);
      loads.set(channelId, toLoad(active!, waiting!, pttl!));
    }),
  );
  return loads;
}

/** One call per channel: Cluster-legal. */
export async function readHolders(
  deps: DirectReadDeps,
  channelIds: readonly string[],
): Promise<Map<string, Map<string, number>>> {
  const ids = [...new Set(channelIds)];
  const tokens = await deps.run(ids.length, () =>
    Promise.all(ids.map((id) => SCRIPTS.readHolders.call(deps.client, [deps.keys.slots(id)], []))),
  );
  return new Map(ids.map((id, i) => [id, countByInstance(tokens[i]!)]));
}
