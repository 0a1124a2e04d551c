/**
 * The load summary in Redis: one hash holding, per channel, the counts every instance reported (its own leases and
 * waiters there), summed, and the end of each channel's cooldown. Each instance puts in what changed and reads the
 * channels it orders with one script call (lua/exchangeLoads-3.lua), or one HMGET when it has nothing to put in; so a
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

/** The field of a channel's cooldown end: no channel id starts with NUL (core/ids.ts). */
export const COOLING_FIELD = '\u0000';

/** Fields per command: an HMGET (and Lua's `unpack`) stays well within its limits. */
const MAX_FIELDS = 4000;

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

  async exchange(ex: LoadExchange): Promise<LoadExchangeReply> {
    const { client, keys, clock, run } = this.deps;
    await this.deps.seedClock();
    const ids = [...new Set(ex.read)];
    const fields = ids.flatMap((id) => [id, COOLING_FIELD + id]);
    const scripted =
      ex.mode !== 'changes' || ex.counts.size > 0 || ex.keepMs !== undefined || (ex.sweep ?? 0) > 0;
    const chunks = chunk(fields, MAX_FIELDS);
    const first = scripted ? (chunks.shift() ?? []) : [];
    const withTime = clock.claimRefresh();
    const reported = [...ex.counts].flatMap(([id, counts]) => [id, packCounts(counts)]);
    const { prefix, suffix } = keys.loadReporterParts();
    ex.onSent?.();
    const n = (scripted ? 1 : 0) + chunks.length + (withTime ? 1 : 0);
    const [head, rest, time] = await run('load_read', n, () =>
      Promise.all([
        scripted
          ? SCRIPTS.exchangeLoads.call(
              client,
              [keys.loadSummary(), keys.loadReporters(), keys.loadReporter(ex.instanceId)],
              [
                ex.instanceId,
                MODES[ex.mode],
                ex.keepMs ?? '',
                ex.sweep ?? 0,
                prefix,
                suffix,
                ex.counts.size,
                ...reported,
                ...first,
              ],
            )
          : undefined,
        Promise.all(chunks.map((part) => client.hmget(keys.loadSummary(), ...part))),
        withTime ? client.time() : undefined,
      ]),
    );
    if (time) clock.learn(time as unknown as string[]);
    const values = [...(head?.values ?? []), ...rest.flat()];
    const now = head?.nowMs ?? clock.now();
    const loads = new Map<string, ChannelLoad>();
    ids.forEach((id, i) => {
      const { active, waiting } = unpackCounts(values[2 * i]);
      const end = Number(values[2 * i + 1] || 0);
      const remaining = end > now ? end - now : 0;
      loads.set(id, { active, waiting, coolingDown: remaining > 0, cooldownRemainingMs: remaining });
    });
    return { loads, resync: head?.resync ?? false };
  }

  /** The cooldown's end, on the Redis clock as last read, for the summary's readers. One HSET. */
  async noteCooldown(channelId: string, ms: number): Promise<void> {
    await this.deps.seedClock();
    const end = Math.round(this.deps.clock.now() + ms);
    await this.deps.run('cooldown', 1, () =>
      this.deps.client.hset(this.deps.keys.loadSummary(), COOLING_FIELD + channelId, end),
    );
  }

  async clearCooldown(channelId: string): Promise<void> {
    await this.deps.run('cooldown', 1, () =>
      this.deps.client.hdel(this.deps.keys.loadSummary(), COOLING_FIELD + channelId),
    );
  }
}
