/**
 * The two places a schedule runs: the memory model (one MemoryStore shared by every instance) and real Redis (a
 * single node or a Cluster, a RedisStore per instance), with the admin side the faults and the checks need: the
 * connections of one instance by name (CLIENT LIST / CLIENT KILL on every master), Redis time, the members of a key
 * with their scores, and every key of the run's prefix with its time to live.
 */
import { Cluster, Redis } from 'ioredis';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { SlotStore } from '../../packages/slotgate/src/store/store.js';
import { clusterClient, type StoreTarget } from '../helpers/redis.js';
import { until } from '../helpers/until.js';
import type { Backend } from './fleet.js';

export function memoryBackend(claimMs: number): Backend {
  const store = new MemoryStore({ claimMs });
  return { name: 'memory', store: () => store, closeStore: async () => {}, observer: store };
}

export interface RedisBackendOptions {
  target: StoreTarget;
  prefix: string;
  claimMs: number;
  timeoutMs: number;
  restartGraceMs: number;
}

export class RedisBackend implements Backend {
  readonly name: string;
  readonly observer: RedisStore;
  readonly admin: Redis | Cluster;

  constructor(private readonly options: RedisBackendOptions) {
    this.name = 'url' in options.target ? 'redis' : 'cluster';
    this.observer = this.store(`${options.prefix}-observer`);
    this.admin = 'url' in options.target ? new Redis(options.target.url) : clusterClient();
    this.admin.on('error', () => {});
  }

  store(connectionName: string): RedisStore {
    const { target, prefix, claimMs, timeoutMs, restartGraceMs } = this.options;
    return new RedisStore({
      ...target,
      prefix,
      claimMs,
      timeoutMs,
      restartGraceMs,
      redisOptions: { connectionName },
    });
  }

  async closeStore(store: SlotStore): Promise<void> {
    await store.close();
  }

  get keys() {
    return this.observer.keys;
  }

  /** One connection per master (the single node itself). */
  private async masters(): Promise<Redis[]> {
    if (!(this.admin instanceof Cluster)) return [this.admin];
    await this.admin.ping(); // nodes() is empty until the client has its slots map
    return this.admin.nodes('master');
  }

  /** The ids of the instance's connections, per master. */
  private async clients(name: string): Promise<[Redis, string[]][]> {
    return Promise.all(
      (await this.masters()).map(async (node): Promise<[Redis, string[]]> => {
        const list = (await node.client('LIST')) as string;
        const ids = list
          .split('\n')
          .filter((line) => line.includes(` name=${name} `))
          .map((line) => /^id=(\d+)/.exec(line)![1]!);
        return [node, ids];
      }),
    );
  }

  /** Kills every connection of the instance (ioredis reconnects them). */
  async drop(name: string): Promise<void> {
    for (const [node, ids] of await this.clients(name)) {
      for (const id of ids) await node.client('KILL', 'ID', id).catch(() => {});
    }
  }

  /** Resolves once Redis has no connection of the instance left: everything it sent has run. */
  async gone(name: string): Promise<void> {
    await until(
      async () => (await this.clients(name)).every(([, ids]) => ids.length === 0),
      `the connections of ${name} closed`,
    );
  }

  /** Redis time in ms (the clock every lease score is on). */
  async time(): Promise<number> {
    const [s, us] = await (await this.masters())[0]!.time();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  }

  /** CLIENT PAUSE ALL on the single node (this connection is paused too, so it does not wait for the end). */
  async pause(ms: number): Promise<void> {
    await (this.admin as Redis).client('PAUSE', String(ms), 'ALL');
  }

  async queuedMaxes(channelId: string): Promise<number[]> {
    return (await this.members(this.keys.queue(channelId))).map(([member]) => Number(member.split('|')[0]));
  }

  async members(key: string): Promise<[string, number][]> {
    const flat = await this.admin.zrange(key, 0, -1, 'WITHSCORES');
    const out: [string, number][] = [];
    for (let i = 0; i < flat.length; i += 2) out.push([flat[i]!, Number(flat[i + 1])]);
    return out;
  }

  /** Every key of the run's prefix with its PTTL (-1: none). */
  async keysLeft(): Promise<{ key: string; pttl: number }[]> {
    const keys = (await Promise.all((await this.masters()).map((n) => n.keys(this.keys.pattern())))).flat();
    return Promise.all(keys.map(async (key) => ({ key, pttl: await this.admin.pttl(key) })));
  }

  async epochCreatedAt(): Promise<number | undefined> {
    const value = await this.admin.get(this.keys.epoch());
    return value ? Number(value.split('|')[1]) : undefined;
  }

  async close(): Promise<void> {
    await this.observer.close();
    this.admin.disconnect();
  }
}
