/**
 * Loads read straight from each channel's own keys (lua/readLoads-n.lua): the rollback path of
 * `load_cache_enabled: false` and the operators' views. One script call per batch of at most 50 channels (one per
 * channel on Cluster), each reading the Redis clock once; read-only.
 */
import type { Cluster, Redis } from 'ioredis';
import { countByInstance } from '../../holders.js';
import type { ChannelLoad } from '../../store.js';
import type { KeyBuilder } from '../keys.js';
import { SCRIPTS } from '../scripts.js';
import { batchesOf } from '../slots/topology.js';

export interface DirectReadDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  /** Runs the work under the store's time bound, counting `n` load_read commands. */
  run: <T>(n: number, work: () => Promise<T>) => Promise<T>;
  /** How long a registration lives past its arrival, as this store last registered one. */
  liveMs: () => number;
}

export function toLoad(active: number, waiting: number, pttl: number): ChannelLoad {
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

/** Who holds each channel's live slots: one read-only call per channel on its own key (Cluster-legal). */
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
