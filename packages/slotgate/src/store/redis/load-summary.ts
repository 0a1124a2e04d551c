/**
 * The load summary in Redis: one hash holding, per channel, the counts every instance reported (its own leases and
 * waiters there), summed, and the end of each channel's cooldown. Each instance puts in what changed and reads the
 * channels it orders with one script call (lua/exchangeLoads-4.lua), or one HMGET when it has nothing to put in; so a
 * load read costs one command per exchange however many channels it covers, where reading the channels' own keys
 * costs three commands per channel. All keys share one hash tag: on Cluster the whole summary lives on one node and
 * every call is legal. Each instance's contributions are kept apart and lapse when it stops exchanging (a crash), so
 * a sweep takes them out; the summary always equals the sum of what the live instances last reported.
 */
import type { Cluster, Redis } from 'ioredis';
import { chunk } from '../../core/collections.js';
import type { ChannelLoad, LoadExchange, LoadExchangeReply, OwnCounts } from '../store.js';
import type { KeyBuilder } from './keys.js';
import type { RedisClock } from './redis-time.js';
import { SCRIPTS } from './scripts.js';

/** A channel's count in the summary is `active + waiting × WAITING_UNIT`: one HINCRBY per change, one field to read. */
export const WAITING_UNIT = 2 ** 26;

/** Channels per command: an HMGET (and Lua's `unpack`) stays well within its limits. */
const MAX_FIELDS = 4000;

/**
 * How often an exchange also reads the cooldown ends (a small hash: the channels cooling now), unless it is a fresh
 * read: a cooldown set on another instance shows here within this, or at once where the acquire script answers
 * `cooling`.
 */
const COOLING_EVERY_MS = 1000;

/** The cooling hash outlives the cooldown just noted by this much. */
const COOLING_KEY_SPARE_MS = 3_600_000;

const MODES = { changes: 'd', full: 'f', leave: 'l' } as const;

export function packCounts(counts: OwnCounts): number {
  return Math.max(0, Math.floor(counts.active)) + Math.max(0, Math.floor(counts.waiting)) * WAITING_UNIT;
}

export function unpackCounts(value: string | number | null | undefined): OwnCounts {
  const n = Number(value ?? 0);
  if (!Number.isFinite(n) || n <= 0) return { active: 0, waiting: 0 };
  const waiting = Math.floor(n / WAITING_UNIT);
  return { active: n - waiting * WAITING_UNIT, waiting };
}

export interface LoadSummaryDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  clock: RedisClock;
  /** Reads the Redis clock once when it was never read. */
  seedClock: () => Promise<unknown>;
  /** Runs the work under the store's time bound, counting `n` commands for the purpose. */
  run: <T>(purpose: 'load_read' | 'cooldown', n: number, work: () => Promise<T>) => Promise<T>;
}

export class RedisLoadSummary {
  constructor(private readonly deps: LoadSummaryDeps) {}

  /** The cooldown ends as last read (channel → end, Redis ms), and when they were read (local ms). */
  private cooling = new Map<string, number>();
  private coolingReadAt = -Infinity;

  async exchange(ex: LoadExchange): Promise<LoadExchangeReply> {
    const { client, keys, clock, run } = this.deps;
    await this.deps.seedClock();
    const ids = [...new Set(ex.read)];
    const scripted =
      ex.mode !== 'changes' || ex.counts.size > 0 || ex.keepMs !== undefined || (ex.sweep ?? 0) > 0;
    const chunks = chunk(ids, MAX_FIELDS);
    const first = scripted ? (chunks.shift() ?? []) : [];
    const local = clock.now();
    const withCooling =
      ids.length > 0 && (ex.fresh === true || local - this.coolingReadAt >= COOLING_EVERY_MS);
    if (withCooling) this.coolingReadAt = local;
    const withTime = clock.claimRefresh();
    const reported = [...ex.counts].flatMap(([id, counts]) => [id, packCounts(counts)]);
    const { prefix, suffix } = keys.loadReporterParts();
    ex.onSent?.();
    const n = (scripted ? 1 : 0) + chunks.length + (withCooling && !scripted ? 1 : 0) + (withTime ? 1 : 0);
    const [head, rest, cooling, time] = await run('load_read', n, () =>
      Promise.all([
        scripted
          ? SCRIPTS.exchangeLoads.call(
              client,
              [
                keys.loadSummary(),
                keys.loadReporters(),
                keys.loadReporter(ex.instanceId),
                keys.loadCooling(),
              ],
              [
                ex.instanceId,
                MODES[ex.mode],
                ex.keepMs ?? '',
                ex.sweep ?? 0,
                prefix,
                suffix,
                withCooling ? '1' : '0',
                ex.counts.size,
                ...reported,
                ...first,
              ],
            )
          : undefined,
        Promise.all(chunks.map((part) => client.hmget(keys.loadSummary(), ...part))),
        withCooling && !scripted ? client.hgetall(keys.loadCooling()) : undefined,
        withTime ? client.time() : undefined,
      ]),
    );
    if (time) clock.learn(time as unknown as string[]);
    if (withCooling) {
      const pairs = head?.cooling ?? Object.entries(cooling ?? {}).flat();
      this.cooling = new Map();
      for (let i = 0; i + 1 < pairs.length; i += 2) this.cooling.set(pairs[i]!, Number(pairs[i + 1]));
    }
    const values = [...(head?.values ?? []), ...rest.flat()];
    const now = head?.nowMs ?? clock.now();
    const loads = new Map<string, ChannelLoad>();
    ids.forEach((id, i) => {
      const { active, waiting } = unpackCounts(values[i]);
      const end = this.cooling.get(id) ?? 0;
      const remaining = end > now ? end - now : 0;
      loads.set(id, { active, waiting, coolingDown: remaining > 0, cooldownRemainingMs: remaining });
    });
    return { loads, resync: head?.resync ?? false };
  }

  /**
   * The cooldown's end, on the Redis clock as last read, for the summary's readers: `HSET`, and a `PEXPIRE` of the
   * hash to an hour past this cooldown (a longer cooldown set before may drop out of the readers' view then; the
   * cooldown key itself, which the acquire script checks, keeps it).
   */
  async noteCooldown(channelId: string, ms: number): Promise<void> {
    await this.deps.seedClock();
    const end = Math.round(this.deps.clock.now() + ms);
    this.cooling.set(channelId, end);
    const key = this.deps.keys.loadCooling();
    await this.deps.run('cooldown', 2, () =>
      Promise.all([
        this.deps.client.hset(key, channelId, end),
        this.deps.client.pexpire(key, Math.round(ms) + COOLING_KEY_SPARE_MS),
      ]),
    );
  }

  async clearCooldown(channelId: string): Promise<void> {
    this.cooling.delete(channelId);
    await this.deps.run('cooldown', 1, () => this.deps.client.hdel(this.deps.keys.loadCooling(), channelId));
  }
}
