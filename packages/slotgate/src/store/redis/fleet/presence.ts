/** Instances announced in one hash (id → JSON with `seen_at`), which expires a minute after the last announcement. */
import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../../../core/clock.js';
import type { Purpose } from '../../store.js';
import type { InstanceInfo, Presence } from '../../fleet.js';
import type { KeyBuilder } from '../keys.js';

const HASH_TTL_MS = 60_000;

/** What the fleet's Redis parts (presence, shared settings) need of the store. */
export interface FleetDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  count: (purpose: Purpose, n: number) => void;
  clock: Clock;
}

export class RedisPresence implements Presence {
  constructor(private readonly deps: FleetDeps) {}

  async announce(info: InstanceInfo): Promise<void> {
    const key = this.deps.keys.instances();
    this.deps.count('settings', 4); // MULTI, HSET, PEXPIRE, EXEC
    await this.deps.client
      .multi()
      .hset(key, info.id, JSON.stringify({ ...info, seen_at: new Date(this.deps.clock.now()).toISOString() }))
      .pexpire(key, HASH_TTL_MS)
      .exec();
  }

  async list(maxAgeMs: number): Promise<Array<InstanceInfo & { seen_at: string }>> {
    this.deps.count('settings', 1);
    const all = await this.deps.client.hgetall(this.deps.keys.instances());
    const fresh = this.deps.clock.now() - maxAgeMs;
    return Object.values(all)
      .map((v) => JSON.parse(v) as InstanceInfo & { seen_at: string })
      .filter((i) => Date.parse(i.seen_at) >= fresh)
      .sort((a, b) => a.id.localeCompare(b.id));
  }

  async leave(id: string): Promise<void> {
    this.deps.count('settings', 1);
    await this.deps.client.hdel(this.deps.keys.instances(), id);
  }
}
