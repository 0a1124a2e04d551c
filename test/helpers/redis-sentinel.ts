/**
 * A private Sentinel set for the tests: one primary, one replica (`--replicaof`) and three sentinels
 * (`redis-server <conf> --sentinel`, each with a config file of its own in a temporary directory, since a sentinel
 * rewrites its config), all on free ports, from Debian's redis-server package alone. Started per test file, so only
 * the Sentinel tests pay for it.
 *
 * Ready when the replica is in sync and every sentinel knows the primary, the replica and the two other sentinels.
 * Two ways to fail the primary over: `failover()` (`SENTINEL FAILOVER`, the graceful path: the old primary is still
 * up and is turned into a replica) and `killPrimary()` (SIGKILL: the crash path, which can lose the last writes,
 * replication being asynchronous). `revive()` brings a killed node back as a replica, so one set serves many
 * failovers.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { assertRedisServerInstalled, freePort, RedisServer } from './redis-server.js';

export const SENTINEL_NAME = 'slotgate-primary';
/** How long a silent primary takes to be seen down by a sentinel (`down-after-milliseconds`). */
export const DOWN_AFTER_MS = 1000;
/** `failover-timeout`: also the pause between two failovers of the same primary is twice this. */
export const FAILOVER_TIMEOUT_MS = 3000;

const replicaOf = (port: number) => ['--replicaof', '127.0.0.1', String(port)];

/** Runs `work` with a short-lived plain client on one address (a data node or a sentinel). */
async function onPort<T>(port: number, work: (client: Redis) => Promise<T>): Promise<T> {
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0 });
  client.on('error', () => {});
  try {
    await client.connect();
    return await work(client);
  } finally {
    client.disconnect();
  }
}

/** `INFO` text as { field: value }. */
function infoFields(info: string): Record<string, string> {
  const fields: Record<string, string> = {};
  for (const line of info.split('\n')) {
    const i = line.indexOf(':');
    if (i > 0) fields[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return fields;
}

/** A flat [key, value, ...] reply (SENTINEL MASTER) as { key: value }. */
function pairs(reply: unknown): Record<string, string> {
  const list = reply as string[];
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < list.length; i += 2) out[list[i]!] = list[i + 1]!;
  return out;
}

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`${what}: not within ${timeoutMs} ms${last ? ` (${(last as Error).message})` : ''}`);
    }
    await sleep(50);
  }
}

/** One `redis-server <conf> --sentinel` process. */
class SentinelProcess {
  private child: ChildProcess | undefined;
  constructor(
    readonly port: number,
    private readonly conf: string,
  ) {}

  async start(): Promise<void> {
    const child = spawn('redis-server', [this.conf, '--sentinel'], { stdio: 'ignore' });
    this.child = child;
    let failure: Error | undefined;
    child.on('error', (err) => (failure ??= err));
    child.on('exit', (code, signal) => (failure ??= new Error(`exited (code ${code}, signal ${signal})`)));
    await until(`sentinel on port ${this.port}`, 10_000, async () => {
      if (failure) throw new Error(`sentinel on port ${this.port} did not start: ${failure.message}`);
      return (await onPort(this.port, (c) => c.ping())) === 'PONG' ? true : undefined;
    });
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = undefined;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGKILL');
    await exited;
  }
}

export class RedisSentinelSet {
  /** The data nodes; which one is primary changes with each failover (`primary`). */
  private readonly nodes = new Map<number, RedisServer>();
  private primaryPort: number;

  private constructor(
    primary: RedisServer,
    replica: RedisServer,
    private readonly sentinels: SentinelProcess[],
    private readonly dir: string,
    private readonly dataArgs: readonly string[],
  ) {
    this.nodes.set(primary.port, primary);
    this.nodes.set(replica.port, replica);
    this.primaryPort = primary.port;
  }

  /** The sentinels as `host:port`, as `redis.sentinel.sentinels` takes them. */
  get addresses(): string[] {
    return this.sentinels.map((s) => `127.0.0.1:${s.port}`);
  }

  get name(): string {
    return SENTINEL_NAME;
  }

  /** The node the set last knew as primary. */
  get primary(): RedisServer {
    return this.nodes.get(this.primaryPort)!;
  }

  /** The other data node. */
  get replica(): RedisServer {
    return [...this.nodes.values()].find((n) => n.port !== this.primaryPort)!;
  }

  /** `dataArgs`: more redis-server arguments for both data nodes (e.g. `--min-replicas-to-write 1`). */
  static async start(dataArgs: readonly string[] = []): Promise<RedisSentinelSet> {
    assertRedisServerInstalled();
    const dir = mkdtempSync(join(tmpdir(), 'slotgate-sentinel-'));
    const started: { stop(): Promise<void> }[] = [];
    try {
      // a replica saves the snapshot of its full sync (and sentinel rewrites configs): all in the temporary directory
      const primary = await RedisServer.start(undefined, ['--dir', dir, ...dataArgs]);
      started.push(primary);
      const replica = await RedisServer.start(undefined, [
        '--dir',
        dir,
        ...dataArgs,
        ...replicaOf(primary.port),
      ]);
      started.push(replica);
      const sentinels: SentinelProcess[] = [];
      for (let i = 0; i < 3; i++) {
        const port = await freePort();
        const conf = join(dir, `sentinel-${port}.conf`);
        writeFileSync(
          conf,
          [
            `port ${port}`,
            'bind 127.0.0.1',
            'protected-mode no',
            `dir ${dir}`,
            `sentinel monitor ${SENTINEL_NAME} 127.0.0.1 ${primary.port} 2`,
            `sentinel down-after-milliseconds ${SENTINEL_NAME} ${DOWN_AFTER_MS}`,
            `sentinel failover-timeout ${SENTINEL_NAME} ${FAILOVER_TIMEOUT_MS}`,
            `sentinel parallel-syncs ${SENTINEL_NAME} 1`,
            '',
          ].join('\n'),
        );
        const sentinel = new SentinelProcess(port, conf);
        started.push(sentinel);
        await sentinel.start();
        sentinels.push(sentinel);
      }
      const set = new RedisSentinelSet(primary, replica, sentinels, dir, dataArgs);
      await set.waitUntilReady();
      return set;
    } catch (err) {
      await Promise.all(started.map((s) => s.stop()));
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
  }

  /**
   * Resolves once the replica is in sync with the primary and every sentinel names the primary, sees it up, and knows
   * the replica and the two other sentinels.
   */
  async waitUntilReady(timeoutMs = 30_000): Promise<void> {
    const primary = this.primaryPort;
    const replica = this.replica.port;
    await until('the replica in sync', timeoutMs, async () => {
      const info = infoFields(await onPort(replica, (c) => c.info('replication')));
      return info.master_link_status === 'up' && info.master_port === String(primary) ? true : undefined;
    });
    await until('every sentinel knowing the whole set', timeoutMs, async () => {
      const states = await Promise.all(
        this.sentinels.map((s) =>
          onPort(s.port, async (c) => pairs(await c.call('SENTINEL', 'MASTER', SENTINEL_NAME))),
        ),
      );
      const ok = states.every(
        (m) =>
          m.port === String(primary) &&
          m.flags === 'master' &&
          Number(m['num-slaves']) >= 1 &&
          Number(m['num-other-sentinels']) === 2,
      );
      if (!ok) return undefined;
      // the replica must be known as up, not only listed (a revived node is listed while it is still down)
      const replicas = await Promise.all(
        this.sentinels.map((s) =>
          onPort(s.port, async (c) =>
            ((await c.call('SENTINEL', 'REPLICAS', SENTINEL_NAME)) as unknown[]).map(pairs),
          ),
        ),
      );
      const seen = replicas.every((list) =>
        list.some((r) => r.port === String(replica) && r.flags === 'slave'),
      );
      return seen ? true : undefined;
    });
  }

  /** The graceful path: `SENTINEL FAILOVER` on one sentinel; resolves with the new primary once every sentinel names it. */
  async failover(): Promise<RedisServer> {
    const old = this.primaryPort;
    await onPort(this.sentinels[0]!.port, (c) => c.call('SENTINEL', 'FAILOVER', SENTINEL_NAME));
    return this.waitForNewPrimary(old);
  }

  /** The crash path: SIGKILL the primary. Returns the killed node; `waitForNewPrimary()` follows the failover. */
  async killPrimary(): Promise<RedisServer> {
    const primary = this.primary;
    await primary.stop();
    return primary;
  }

  /**
   * Resolves with the new primary once every sentinel names a node other than `old` (the primary's port before the
   * failover) and that node says it is a master.
   */
  async waitForNewPrimary(old = this.primaryPort, timeoutMs = 30_000): Promise<RedisServer> {
    const port = await until('a new primary named by every sentinel', timeoutMs, async () => {
      const named = await Promise.all(
        this.sentinels.map((s) =>
          onPort(s.port, (c) => c.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', SENTINEL_NAME)),
        ),
      );
      const ports = new Set(named.map((addr) => Number((addr as string[] | null)?.[1])));
      if (ports.size !== 1) return undefined;
      const [candidate] = [...ports];
      if (candidate === undefined || candidate === old || !this.nodes.has(candidate)) return undefined;
      const role = infoFields(await onPort(candidate, (c) => c.info('replication'))).role;
      return role === 'master' ? candidate : undefined;
    });
    this.primaryPort = port;
    return this.primary;
  }

  /**
   * Starts a killed node again, empty, as a replica of the current primary, and waits until the set is whole again
   * (in sync, known to every sentinel), ready for another failover.
   */
  async revive(node: RedisServer): Promise<void> {
    const revived = await RedisServer.start(node.port, [
      '--dir',
      this.dir,
      ...this.dataArgs,
      ...replicaOf(this.primaryPort),
    ]);
    this.nodes.set(node.port, revived);
    await this.waitUntilReady();
  }

  /** A plain client on the current primary (the caller disconnects it). */
  primaryClient(): Redis {
    const client = new Redis(this.primary.url, { maxRetriesPerRequest: 1 });
    client.on('error', () => {});
    return client;
  }

  async stop(): Promise<void> {
    await Promise.all([
      ...this.sentinels.map((s) => s.stop()),
      ...[...this.nodes.values()].map((n) => n.stop()),
    ]);
    rmSync(this.dir, { recursive: true, force: true });
  }
}
