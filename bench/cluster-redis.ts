/**
 * The Redis Cluster the benchmark measures: a private 3-master cluster (the tests' launcher,
 * test/helpers/redis-cluster.ts), or one given by seed nodes. Its instruments are those of one node (redis.ts), taken
 * on every master and summed — INFO commandstats (Lua-internal commands included) and CPU — and kept per master too,
 * so a run reports what each node spent. The admin connections are plain clients, one per master: a Cluster client
 * would add its own slot refreshes to the counts.
 */
import { Cluster, Redis } from 'ioredis';
import { parseAddress } from '../packages/slotgate/src/store/redis/connection/connection.js';
import { RedisCluster } from '../test/helpers/redis-cluster.js';
import { parseCommandstats } from '../test/helpers/redis-server.js';
import { clusterTarget, type NodeSnapshot, type RedisUnderTest, type ServerSnapshot } from './redis.js';

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
    const { host, port } = parseAddress(address);
    const client = new Redis({ host, port, maxRetriesPerRequest: 1 });
    client.on('error', () => {});
    return { address, client };
  });
  const server = await admins[0]!.client.info('server');
  const version = /redis_version:(\S+)/.exec(server)?.[1] ?? '?';
  const each = <T>(work: (client: Redis) => Promise<T>) => Promise.all(admins.map((a) => work(a.client)));
  return {
    url: clusterTarget(seeds),
    topology: 'cluster',
    version,
    isPrivate: own !== undefined,
    label: own
      ? `private ${masters.length}-master Redis Cluster ${version} on 127.0.0.1 (same machine, no replicas)`
      : `Redis Cluster ${version}, ${masters.length} masters from the given nodes (other clients' traffic would count too)`,
    async snapshot(): Promise<ServerSnapshot> {
      const perNode: NodeSnapshot[] = await Promise.all(
        admins.map(async ({ address, client }) => {
          const [stats, cpu] = await Promise.all([client.info('commandstats'), client.info('cpu')]);
          const user = Number(/used_cpu_user:([\d.]+)/.exec(cpu)?.[1] ?? 0);
          const sys = Number(/used_cpu_sys:([\d.]+)/.exec(cpu)?.[1] ?? 0);
          return { node: address, commands: parseCommandstats(stats), cpuSeconds: user + sys };
        }),
      );
      const commands: Record<string, number> = {};
      for (const n of perNode) {
        for (const [name, calls] of Object.entries(n.commands))
          commands[name] = (commands[name] ?? 0) + calls;
      }
      const cpuSeconds = perNode.reduce((a, n) => a + n.cpuSeconds, 0);
      return { commands, cpuSeconds, at: performance.now(), perNode };
    },
    async cleanup(namespace) {
      if (own) {
        await each((c) => c.flushall());
        return;
      }
      await each(async (c) => {
        let cursor = '0';
        do {
          const [next, keys] = await c.scan(cursor, 'MATCH', `*${namespace}*`, 'COUNT', 1000);
          cursor = next;
          // one key at a time: a master holds many slots, and a multi-key DEL must stay within one
          for (const key of keys) await c.del(key);
        } while (cursor !== '0');
      });
    },
    async close() {
      for (const a of admins) a.client.disconnect();
      await own?.stop();
    },
  };
}
