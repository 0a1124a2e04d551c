/**
 * The Redis Cluster the bench measures: a private 3-master cluster, or one given by seed nodes. One node's instruments
 * (redis.ts) on every master through plain clients: a Cluster client would add its slot refreshes to the counts.
 */
import { Cluster, Redis } from 'ioredis';
import { parseAddress } from '../packages/slotgate/src/store/redis/connection/connection.js';
import { RedisCluster } from '../test/helpers/redis-cluster.js';
import { addCounts, sum } from './records.js';
import { clusterTarget, deleteNamespace, nodeSnapshot, versionOf, type RedisUnderTest } from './redis.js';

/** The masters' addresses (host:port), found through a short-lived Cluster client on the seed nodes. */
async function mastersOf(seeds: readonly string[]): Promise<string[]> {
  const discovery = new Cluster(seeds.map(parseAddress), { lazyConnect: true });
  discovery.on('error', () => {});
  try {
    await discovery.connect();
    return discovery.nodes('master').map((n) => `${n.options.host}:${n.options.port}`);
  } finally {
    discovery.disconnect();
  }
}

/** A private 3-master cluster started for the run, or the cluster of the seed nodes `nodes`. */
export async function openCluster(nodes?: readonly string[]): Promise<RedisUnderTest> {
  let own: RedisCluster | undefined;
  if (!nodes?.length) {
    try {
      own = await RedisCluster.start(3);
    } catch (err) {
      throw new Error(`${(err as Error).message} The benchmark also takes --cluster-nodes.`, { cause: err });
    }
  }
  const seeds = own ? own.addresses : [...nodes!];
  const masters = own ? own.addresses : await mastersOf(seeds);
  const admins = masters.map((address) => {
    const client = new Redis({ ...parseAddress(address), maxRetriesPerRequest: 1 });
    client.on('error', () => {});
    return { address, client };
  });
  const version = await versionOf(admins[0]!.client);
  return {
    url: clusterTarget(seeds),
    topology: 'cluster',
    label: own
      ? `private ${masters.length}-master Redis Cluster ${version} on 127.0.0.1 (same machine, no replicas)`
      : `Redis Cluster ${version}, ${masters.length} masters from the given nodes (other clients' traffic would count too)`,
    async snapshot() {
      const perNode = await Promise.all(admins.map((a) => nodeSnapshot(a.client, a.address)));
      const commands = addCounts({}, ...perNode.map((n) => n.commands));
      return { commands, cpuSeconds: sum(perNode.map((n) => n.cpuSeconds)), at: performance.now(), perNode };
    },
    async cleanup(namespace) {
      await Promise.all(
        admins.map((a) => (own ? a.client.flushall() : deleteNamespace(a.client, namespace))),
      );
    },
    async close() {
      for (const a of admins) a.client.disconnect();
      await own?.stop();
    },
  };
}
