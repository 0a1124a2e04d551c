/** Loads read straight from each channel's own keys: the rollback path and the operators' views. Read-only. */
import type { Cluster, Redis } from 'ioredis';
import { countByInstance } from '../../holders.js';
import type { ChannelPeak } from '../../peak.js';
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

/** Reads the channels in batches of one script call (on Cluster one channel each); per channel its slice of a reply. */
async function readEach<T>(
  deps: DirectReadDeps,
  channelIds: readonly string[],
  call: (batch: readonly { channelId: string }[]) => Promise<number[]>,
  of: (reply: number[], i: number) => T,
): Promise<Map<string, T>> {
  const batches = batchesOf(
    deps.client,
    [...new Set(channelIds)].map((channelId) => ({ channelId })),
  );
  const replies = await deps.run(batches.length, () => Promise.all(batches.map(call)));
  const out = new Map<string, T>();
  batches.forEach((batch, b) => batch.forEach(({ channelId }, i) => out.set(channelId, of(replies[b]!, i))));
  return out;
}

export function readLoads(
  deps: DirectReadDeps,
  channelIds: readonly string[],
): Promise<Map<string, ChannelLoad>> {
  const { client, keys } = deps;
  return readEach(
    deps,
    channelIds,
    (batch) =>
      SCRIPTS.readLoads.call(
        client,
        batch.flatMap(({ channelId: id }) => [keys.slots(id), keys.queue(id), keys.cooldown(id)]),
        [deps.liveMs()],
      ),
    (reply, i) => toLoad(reply[3 * i]!, reply[3 * i + 1]!, reply[3 * i + 2]!),
  );
}

/** readPeaks-n.lua replies the Redis time first, then per channel its peak and the window's start. */
export function readPeaks(
  deps: DirectReadDeps,
  channelIds: readonly string[],
): Promise<Map<string, ChannelPeak>> {
  const { client, keys } = deps;
  return readEach(
    deps,
    channelIds,
    (batch) =>
      SCRIPTS.readPeaks.call(
        client,
        batch.flatMap(({ channelId: id }) => [keys.slots(id), keys.peak(id)]),
        [],
      ),
    (reply, i) => ({ peak: reply[1 + 2 * i]!, windowMs: reply[0]! - reply[2 + 2 * i]! }),
  );
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

/** HGET of each channel's stored limit (auto-pipelined on Cluster); a channel without one is left out. */
export async function readLimits(
  deps: DirectReadDeps,
  channelIds: readonly string[],
): Promise<Map<string, number>> {
  const ids = [...new Set(channelIds)];
  const stored = await deps.run(ids.length, () =>
    Promise.all(ids.map((id) => deps.client.hget(deps.keys.limit(id), 'l'))),
  );
  const out = new Map<string, number>();
  ids.forEach((id, i) => {
    if (stored[i] != null && Number.isFinite(Number(stored[i]))) out.set(id, Number(stored[i]));
  });
  return out;
}
