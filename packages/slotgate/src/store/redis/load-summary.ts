/**
 * The load summary in Redis: one hash holding, per channel, the counts every instance reported (its own leases and
 * waiters there), summed, and the end of each channel's cooldown. Each instance puts in what changed and reads the
 * fleet's counts with one script call (lua/exchangeLoads-5.lua), or one GET when it has nothing to put in; so a load
 * read costs one command per exchange however many channels it covers, where reading the channels' own keys costs
 * three commands per channel. Readers share a snapshot of the summary (one string, rebuilt when it is older than the
 * readers allow: a quarter of a load TTL), so a read costs Redis a copy of a string, not a lookup per channel; the
 * channels an instance changed since that snapshot may have been built are read exactly. All keys share one hash
 * tag: on Cluster the whole summary lives on one node and every call is legal. Each instance's contributions are kept
 * apart and lapse when it stops exchanging (a crash), so a sweep takes them out; the summary always equals the sum of
 * what the live instances last reported.
 */
import type { Cluster, Redis } from 'ioredis';
import type { ChannelLoad, LoadExchange, LoadExchangeReply, OwnCounts } from '../store.js';
import type { KeyBuilder } from './keys.js';
import type { RedisClock } from './redis-time.js';
import { SCRIPTS, type ExchangeReply } from './scripts.js';

/** A channel's count in the summary is `active + waiting × WAITING_UNIT`: one HINCRBY per change, one field to read. */
export const WAITING_UNIT = 2 ** 26;

/** Exact channels per exchange (Lua's `unpack` stays well within its limits); more read the summary itself. */
const MAX_EXACT = 2000;

/**
 * A cooldown this store set or cleared shows as it set it for this long (or the greatest max age asked for, when
 * longer), whatever a snapshot built before says.
 */
const NOTED_MS = 1000;

/**
 * How often a summary read carries a TIME: the summary needs the Redis clock only for cooldown ends (the local clock
 * does not drift from it measurably in that time), where per-channel reads count leases by it every second.
 */
const TIME_EVERY_MS = 5000;

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

/** What one instance recently changed in the summary: a snapshot built before then does not hold it. */
interface Recent {
  /** Channel → when the last exchange that changed it settled (performance.now() ms). */
  changed: Map<string, number>;
  /** Channel → exchanges changing it still in flight. */
  inflight: Map<string, number>;
  /** When its last full report or leave settled (it may have zeroed any channel), and how many are in flight. */
  fullAt: number;
  fullInflight: number;
  /**
   * Plain reads whose script call (after a missing snapshot) is not sent yet. An exchange that puts counts in waits
   * for them: sent in between, its counts would be in what that call reads but not in the base the read's view
   * corrects from.
   */
  gates: Set<Promise<void>>;
}

/** What a read shows: packed counts and cooldown ends (Redis ms) per channel; a channel not named counts 0. */
interface SummaryView {
  counts: Map<string, string>;
  cooling: Map<string, number>;
}

export class RedisLoadSummary {
  constructor(private readonly deps: LoadSummaryDeps) {}

  /** Cooldowns this store set (end, Redis ms) or cleared (0), with when (performance.now() ms). */
  private readonly noted = new Map<string, { end: number; at: number }>();
  private readonly recent = new Map<string, Recent>();
  /**
   * The greatest ages whose snapshot a plain GET last found missing: their reads go to the script, which builds it,
   * until a script read finds one there (with few readers, most reads would otherwise cost a GET and a script call).
   */
  private readonly missing = new Set<number>();
  /** The greatest max age asked for so far: changes are remembered that long (a max age may grow at run time). */
  private longest = 0;
  /** The last snapshot parsed (readers of one store often get the same one again). */
  private parsed: { text: string; view: SummaryView } | undefined;

  async exchange(ex: LoadExchange): Promise<LoadExchangeReply> {
    const { client, keys, clock, run } = this.deps;
    await this.deps.seedClock();
    const recent = this.recentOf(ex.instanceId);
    const carries = ex.mode !== 'changes' || ex.counts.size > 0;
    while (carries && recent.gates.size > 0) await Promise.all(recent.gates);
    const ids = [...new Set(ex.read)];
    const asked = Math.max(0, Math.ceil(ex.maxAgeMs ?? 0));
    this.longest = Math.max(this.longest, asked);
    this.forget(recent);
    // a snapshot may be up to maxAge old: exact for the channels this instance changed since (else its own counts in
    // it would be older than the base its view corrects from), the rest from the snapshot
    let maxAge = ex.mode !== 'changes' || ex.fresh === true || recent.fullInflight > 0 ? 0 : asked;
    if (recent.fullAt > performance.now() - this.longest) maxAge = 0;
    let exact: string[] = [];
    if (ids.length > 0 && maxAge > 0) {
      exact = ids.filter((id) => ex.counts.has(id) || recent.changed.has(id) || recent.inflight.has(id));
      if (exact.length > MAX_EXACT) [maxAge, exact] = [0, []];
    }
    const scripted =
      carries ||
      ex.keepMs !== undefined ||
      (ex.sweep ?? 0) > 0 ||
      exact.length > 0 ||
      (ids.length > 0 && this.missing.has(maxAge));
    if (!scripted && ids.length === 0) return { loads: new Map(), resync: false };
    const withTime = clock.claimRefresh(TIME_EVERY_MS);
    for (const id of ex.counts.keys()) recent.inflight.set(id, (recent.inflight.get(id) ?? 0) + 1);
    if (ex.mode !== 'changes') recent.fullInflight++;
    let open = () => {};
    if (!scripted) {
      const gate = new Promise<void>((resolve) => (open = resolve));
      recent.gates.add(gate);
      void gate.then(() => recent.gates.delete(gate));
    }
    ex.onSent?.();
    let head: ExchangeReply | undefined;
    let plain: string | null | undefined;
    let whole: [Record<string, string>, Record<string, string>] | undefined;
    try {
      const n = (!scripted && maxAge === 0 ? 2 : 1) + (withTime ? 1 : 0);
      let time: unknown;
      [head, plain, whole, time] = await run('load_read', n, () =>
        Promise.all([
          scripted ? this.call(ex, ids.length > 0 ? maxAge : undefined, exact) : undefined,
          !scripted && maxAge > 0 ? client.get(keys.loadSnapshot(maxAge)) : undefined,
          !scripted && maxAge === 0
            ? Promise.all([client.hgetall(keys.loadSummary()), client.hgetall(keys.loadCooling())])
            : undefined,
          withTime ? client.time() : undefined,
        ]),
      );
      if (time) clock.learn(time as unknown as string[]);
      if (plain === null) {
        // no snapshot: the script builds it (one more call, about once per max age across the fleet); an exchange
        // of this instance that puts counts in goes out after this call, not between the GET and it
        this.missing.add(maxAge);
        head = await run('load_read', 1, () => {
          const call = this.call(ex, maxAge, []);
          open();
          return call;
        });
      }
      if (head?.snapshot && !head.built) this.missing.delete(maxAge);
    } finally {
      open();
      const settled = performance.now();
      for (const id of ex.counts.keys()) {
        const left = (recent.inflight.get(id) ?? 1) - 1;
        if (left > 0) recent.inflight.set(id, left);
        else recent.inflight.delete(id);
        recent.changed.set(id, settled);
      }
      if (ex.mode !== 'changes') {
        recent.fullInflight--;
        recent.fullAt = settled;
      }
    }
    const view = whole
      ? {
          counts: new Map(Object.entries(whole[0])),
          cooling: new Map(Object.entries(whole[1]).map(([id, end]) => [id, Number(end)])),
        }
      : this.parse(head?.snapshot ?? plain ?? null);
    const exactSums = new Map<string, string>();
    if (head?.exact.length) exact.forEach((id, i) => exactSums.set(id, head!.exact[i]!));
    const now = head?.nowMs ?? clock.now();
    const noted = performance.now() - Math.max(NOTED_MS, this.longest);
    for (const [id, note] of this.noted) if (note.at < noted) this.noted.delete(id);
    const loads = new Map<string, ChannelLoad>();
    for (const id of ids) {
      const { active, waiting } = unpackCounts(exactSums.get(id) ?? view.counts.get(id));
      const end = this.noted.get(id)?.end ?? view.cooling.get(id) ?? 0;
      const remaining = end > now ? end - now : 0;
      loads.set(id, { active, waiting, coolingDown: remaining > 0, cooldownRemainingMs: remaining });
    }
    return { loads, resync: head?.resync ?? false };
  }

  /** One call of the exchange script; `maxAge` undefined reads nothing. */
  private call(
    ex: LoadExchange,
    maxAge: number | undefined,
    exact: readonly string[],
  ): Promise<ExchangeReply> {
    const { client, keys } = this.deps;
    const { prefix, suffix } = keys.loadReporterParts();
    const reported = [...ex.counts].flatMap(([id, counts]) => [id, packCounts(counts)]);
    return SCRIPTS.exchangeLoads.call(
      client,
      [
        keys.loadSummary(),
        keys.loadReporters(),
        keys.loadReporter(ex.instanceId),
        keys.loadCooling(),
        keys.loadSnapshot(maxAge ?? 0),
      ],
      [
        ex.instanceId,
        MODES[ex.mode],
        ex.keepMs ?? '',
        ex.sweep ?? 0,
        prefix,
        suffix,
        ex.counts.size,
        ...reported,
        ...(maxAge === undefined ? [] : [maxAge, ...exact]),
      ],
    );
  }

  private recentOf(instanceId: string): Recent {
    let r = this.recent.get(instanceId);
    if (!r) {
      r = { changed: new Map(), inflight: new Map(), fullAt: -Infinity, fullInflight: 0, gates: new Set() };
      this.recent.set(instanceId, r);
    }
    return r;
  }

  /**
   * Forgets the changes settled longer ago than the greatest max age asked for: a snapshot that still exists was
   * built after them.
   */
  private forget(recent: Recent): void {
    const before = performance.now() - this.longest;
    for (const [id, at] of recent.changed) if (at < before) recent.changed.delete(id);
  }

  /** A snapshot (`{"l": [channel, count, …], "c": [channel, cooldown end, …]}`) as a view. */
  private parse(text: string | null): SummaryView {
    if (text === null) return { counts: new Map(), cooling: new Map() };
    if (this.parsed?.text === text) return this.parsed.view;
    const { l, c } = JSON.parse(text) as { l?: unknown; c?: unknown };
    const view: SummaryView = { counts: new Map(), cooling: new Map() };
    if (Array.isArray(l))
      for (let i = 0; i + 1 < l.length; i += 2) view.counts.set(String(l[i]), String(l[i + 1]));
    if (Array.isArray(c))
      for (let i = 0; i + 1 < c.length; i += 2) view.cooling.set(String(c[i]), Number(c[i + 1]));
    this.parsed = { text, view };
    return view;
  }

  /**
   * The cooldown's end, on the Redis clock as last read, for the summary's readers: `HSET`, and a `PEXPIRE` of the
   * hash to an hour past this cooldown (a longer cooldown set before may drop out of the readers' view then; the
   * cooldown key itself, which the acquire script checks, keeps it).
   */
  async noteCooldown(channelId: string, ms: number): Promise<void> {
    await this.deps.seedClock();
    const end = Math.round(this.deps.clock.now() + ms);
    this.noted.set(channelId, { end, at: performance.now() });
    const key = this.deps.keys.loadCooling();
    await this.deps.run('cooldown', 2, () =>
      Promise.all([
        this.deps.client.hset(key, channelId, end),
        this.deps.client.pexpire(key, Math.round(ms) + COOLING_KEY_SPARE_MS),
      ]),
    );
  }

  async clearCooldown(channelId: string): Promise<void> {
    this.noted.set(channelId, { end: 0, at: performance.now() });
    await this.deps.run('cooldown', 1, () => this.deps.client.hdel(this.deps.keys.loadCooling(), channelId));
  }
}
