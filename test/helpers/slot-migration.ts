/**
 * Where a key lives in a RedisCluster, and one hash slot moved by hand, one key at a time: the steps redis-cli
 * --cluster reshard takes (SETSLOT IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE), with a pause after each key, so a
 * channel's keys stay split between the two masters for a while. That is the state in which Redis answers a script
 * over several keys of the slot with ASK or TRYAGAIN; redis-cli moves a slot's few keys in one MIGRATE and leaves it
 * for milliseconds only.
 */
import type { RedisCluster } from './redis-cluster.js';

/** The hash slot of a key (CLUSTER KEYSLOT), for many keys in one round trip. */
export async function keySlots(cluster: RedisCluster, keys: readonly string[]): Promise<number[]> {
  return cluster.onNode(cluster.servers[0]!, async (c) => {
    const pipeline = c.pipeline();
    for (const key of keys) pipeline.cluster('KEYSLOT', key);
    const replies = (await pipeline.exec()) ?? [];
    return replies.map(([err, slot]) => {
      if (err) throw err;
      return Number(slot);
    });
  });
}

/** CLUSTER SLOTS as one server sees it: [start, end, [host, port, id] of the master, ...replicas]. */
async function slotRanges(cluster: RedisCluster, server: number) {
  const ranges = await cluster.onNode(cluster.servers[server]!, (c) => c.cluster('SLOTS'));
  return ranges.map(([start, end, master]) => [start, end, master!] as const);
}

/** The index (into `servers`) of the master that owns `slot`, as the first server sees it. */
export async function ownerOf(cluster: RedisCluster, slot: number): Promise<number> {
  const ranges = await slotRanges(cluster, 0);
  const range = ranges.find(([start, end]) => slot >= start && slot <= end);
  const port = range?.[2][1];
  const index = cluster.servers.findIndex((s) => s.port === port);
  if (index < 0) throw new Error(`slot ${slot} has no owner: ${JSON.stringify(ranges)}`);
  return index;
}

/** The lowest slots `from` owns, in order (redis-cli --cluster reshard moves a node's lowest slots first). */
export async function lowestSlots(cluster: RedisCluster, from: number, count: number): Promise<number[]> {
  const ranges = await slotRanges(cluster, from);
  const own = ranges
    .filter((r) => r[2][1] === cluster.servers[from]!.port)
    .sort((a, b) => a[0] - b[0])
    .flatMap(([start, end]) => Array.from({ length: end - start + 1 }, (_, i) => start + i));
  return own.slice(0, count);
}

/** The redirections every master has answered so far (INFO errorstats), summed. */
export async function redirectionsAnswered(
  cluster: RedisCluster,
): Promise<{ MOVED: number; ASK: number; TRYAGAIN: number }> {
  const total = { MOVED: 0, ASK: 0, TRYAGAIN: 0 };
  const infos = await Promise.all(cluster.servers.map((s) => cluster.onNode(s, (c) => c.info('errorstats'))));
  for (const info of infos) {
    for (const m of info.matchAll(/^errorstat_(MOVED|ASK|TRYAGAIN):count=(\d+)/gm)) {
      total[m[1] as keyof typeof total] += Number(m[2]);
    }
  }
  return total;
}

/**
 * Moves `slot` from master `from` to master `to` (indexes into `servers`), awaiting `between()` after each key moved.
 * Keys the traffic creates meanwhile are created on the target (Redis redirects them there with ASK); the loop ends
 * when the source has none left. Returns how many keys it moved.
 */
export async function migrateSlotSlowly(
  cluster: RedisCluster,
  slot: number,
  from: number,
  to: number,
  between: () => Promise<void>,
): Promise<number> {
  const source = cluster.servers[from]!;
  const target = cluster.servers[to]!;
  const [sourceId, targetId] = await Promise.all([cluster.nodeId(source), cluster.nodeId(target)]);
  await cluster.onNode(target, (c) => c.cluster('SETSLOT', slot, 'IMPORTING', sourceId));
  let moved = 0;
  await cluster.onNode(source, async (c) => {
    await c.cluster('SETSLOT', slot, 'MIGRATING', targetId);
    for (;;) {
      const [key] = (await c.cluster('GETKEYSINSLOT', slot, 1)) as string[];
      if (key === undefined) break;
      // a key deleted since GETKEYSINSLOT answers NOKEY: nothing to move
      await c.migrate('127.0.0.1', target.port, key, 0, 5000);
      moved++;
      await between();
    }
  });
  // the target first, so the source's redirections point at a node that already serves the slot
  for (const server of [target, source, ...cluster.servers.filter((s) => s !== target && s !== source)]) {
    await cluster.onNode(server, (c) => c.cluster('SETSLOT', slot, 'NODE', targetId));
  }
  return moved;
}
