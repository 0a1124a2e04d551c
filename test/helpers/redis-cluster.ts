/**
 * A private Redis Cluster of three masters for the tests and the benchmark: redis-server processes with
 * `--cluster-enabled yes` on free ports (their nodes.conf in a temporary directory), joined with
 * `redis-cli --cluster create`, ready once every node reports `cluster_state:ok`. No Docker: Debian's redis-server
 * package is all it needs. `reshard` moves hash slots between masters with live keys in them (MIGRATE), the way an
 * operator grows a cluster.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cluster, Redis } from 'ioredis';
import { freePort, parseCommandstats, RedisServer } from './redis-server.js';

export interface ClusterNode {
  host: string;
  port: number;
}

export class RedisCluster {
  private constructor(
    readonly servers: RedisServer[],
    private readonly dir: string,
  ) {}

  get nodes(): ClusterNode[] {
    return this.servers.map((s) => ({ host: '127.0.0.1', port: s.port }));
  }

  /** The nodes as `host:port`, as `redis.cluster.nodes` takes them. */
  get addresses(): string[] {
    return this.servers.map((s) => `127.0.0.1:${s.port}`);
  }

  static async start(masters = 3): Promise<RedisCluster> {
    const dir = mkdtempSync(join(tmpdir(), 'slotgate-cluster-'));
    const servers: RedisServer[] = [];
    const cluster = new RedisCluster(servers, dir);
    try {
      for (let i = 0; i < masters; i++) {
        const port = await freePort();
        servers.push(
          await RedisServer.start(port, [
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            join(dir, `nodes-${port}.conf`),
            '--cluster-node-timeout',
            '2000',
            '--dir',
            dir,
          ]),
        );
      }
      const create = spawnSync(
        'redis-cli',
        ['--cluster', 'create', ...cluster.addresses, '--cluster-replicas', '0', '--cluster-yes'],
        { encoding: 'utf8', timeout: 30_000 },
      );
      if (create.status !== 0) {
        throw new Error(`redis-cli --cluster create failed: ${create.stderr || create.stdout}`);
      }
      await cluster.waitUntilOk();
      return cluster;
    } catch (err) {
      await cluster.stop();
      throw err;
    }
  }

  /** Resolves once every node reports cluster_state:ok and knows all the masters. */
  async waitUntilOk(timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const states = await Promise.all(
        this.servers.map((s) => this.onNode(s, (c) => c.cluster('INFO') as Promise<string>)),
      );
      const ok = states.every(
        (info) =>
          /cluster_state:ok/.test(info) &&
          new RegExp(`cluster_known_nodes:${this.servers.length}\\b`).test(info),
      );
      if (ok) return;
      if (Date.now() > deadline) throw new Error(`the cluster did not become ready: ${states.join(' | ')}`);
      await sleep(50);
    }
  }

  /** A Cluster client for tests (the caller closes it). */
  client(options: ConstructorParameters<typeof Cluster>[1] = {}): Cluster {
    const client = new Cluster(this.nodes, options);
    client.on('error', () => {});
    return client;
  }

  /** Moves `count` hash slots from the node at `from` to the node at `to` (indexes into `servers`), keys included. */
  reshard(from: number, to: number, count: number): Promise<void> {
    const ids = this.servers.map((s) => this.nodeId(s));
    return Promise.all(ids).then(
      ([...all]) =>
        new Promise<void>((resolve, reject) => {
          const child = spawn(
            'redis-cli',
            [
              '--cluster',
              'reshard',
              `127.0.0.1:${this.servers[from]!.port}`,
              '--cluster-from',
              all[from]!,
              '--cluster-to',
              all[to]!,
              '--cluster-slots',
              String(count),
              '--cluster-yes',
              '--cluster-pipeline',
              '100',
            ],
            { stdio: ['ignore', 'ignore', 'pipe'] },
          );
          let stderr = '';
          child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
          child.on('error', reject);
          child.on('exit', (code) =>
            code === 0 ? resolve() : reject(new Error(`redis-cli --cluster reshard failed: ${stderr}`)),
          );
        }),
    );
  }

  /** The node id of one server. */
  nodeId(server: RedisServer): Promise<string> {
    return this.onNode(server, (c) => c.cluster('MYID') as Promise<string>);
  }

  /** INFO commandstats of every node, summed, and per node in `servers` order. */
  async commandstats(): Promise<{ total: Record<string, number>; perNode: Record<string, number>[] }> {
    const perNode = await Promise.all(
      this.servers.map((s) => this.onNode(s, async (c) => parseCommandstats(await c.info('commandstats')))),
    );
    const total: Record<string, number> = {};
    for (const stats of perNode) {
      for (const [name, calls] of Object.entries(stats)) total[name] = (total[name] ?? 0) + calls;
    }
    return { total, perNode };
  }

  /** Runs `work` with a plain client connected to one node. */
  async onNode<T>(server: RedisServer, work: (client: Redis) => Promise<T>): Promise<T> {
    const client = new Redis(server.url, { maxRetriesPerRequest: 0, lazyConnect: true });
    client.on('error', () => {});
    try {
      await client.connect();
      return await work(client);
    } finally {
      client.disconnect();
    }
  }

  async stop(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.stop()));
    rmSync(this.dir, { recursive: true, force: true });
  }
}
