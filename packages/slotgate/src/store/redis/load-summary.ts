/**
 * The load summary in Redis: one hash with one field per instance holding that instance's own counts (its leases and
 * waiters per channel, JSON) and when they lapse. An instance puts in what changed by rewriting its own field, one
 * HSET whatever the number of channels that changed, and reads the fleet's counts with one GET of a snapshot its
 * readers share: the sums over the live instances, rebuilt by a script (lua/exchangeLoads-3.lua) when it is older
 * than the readers allow (a quarter of a load TTL), so about four times per TTL for the whole fleet. An exchange that
 * both puts counts in and reads is one call of that script (HSET and GET inside). A load read therefore costs one
 * command per exchange however many channels it covers, where reading the channels' own keys costs three commands per
 * channel.
 *
 * Every field carries a version, and the snapshot names the version of each instance's counts its sums hold: a reader
 * takes its own counts out of the sums by that version and puts them back as it just reported them, so its own
 * changes are exact in its view at once, whenever the snapshot was built. Since each HSET writes an instance's whole
 * counts, an exchange that failed, was sent twice, or reached a Redis that lost its data is made good by the next.
 * All keys share one hash tag: on Cluster the whole summary lives on one node and every call is legal. An instance
 * that stops putting its counts in (a crash) lapses: the next snapshot leaves it out and deletes its field.
 */
import { randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { ChannelLoad, LoadExchange, LoadExchangeReply, OwnCounts } from '../store.js';
import type { KeyBuilder } from './keys.js';
import type { RedisClock } from './redis-time.js';
import { SCRIPTS, type SnapshotReply } from './scripts.js';

/** A channel's count in the summary is `active + waiting × WAITING_UNIT`: one number per channel to sum and read. */
export const WAITING_UNIT = 2 ** 26;

/** How long an instance's counts live without an exchange that gives a keep, when none ever gave one. */
const DEFAULT_KEEP_MS = 60_000;

/**
 * A replaced version of an instance's counts is remembered this long past the greatest max age asked for (a snapshot
 * holding it is read at most that age after the version was replaced, plus the time its reply takes to be handled).
 */
const REPLACED_KEEP_MS = 2000;

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
  /** Above this many (instance, channel) counts in the last snapshot, builds are done here. @default 4000 */
  scriptBuildPairs?: number;
}

/** One version of an instance's counts (channel → packed count, non-zero only), as one HSET put it in. */
interface Version {
  n: number;
  counts: ReadonlyMap<string, number>;
  /** When a later version was put in (performance.now() ms). */
  replacedAt?: number;
}

/** What this store put in of one instance. */
interface Mine {
  /** Random: versions are `<tag>.<n>`, so another process under the same instance id never matches. */
  tag: string;
  n: number;
  /** Its counts now (the last version's). */
  counts: Map<string, number>;
  /** Versions by n, oldest first: the last one, and those replaced lately. */
  versions: Map<number, Version>;
  /** When its counts lapse (Redis ms, by the clock estimate) and the keep that set it. */
  lapseAt?: number;
  keepMs?: number;
  /** Whether the next write renews the hash's expiry (with a keep). */
  renewDue: boolean;
}

const EMPTY: ReadonlyMap<string, number> = new Map();

/** Versions of one instance's counts remembered at most (the last always). */
const MAX_VERSIONS = 256;

/**
 * Up to this many (instance, channel) counts, the script builds a missing snapshot; above, this store builds it from
 * a plain HGETALL. Measured on Redis 7.0: a build in Lua cost 0.39 ms of Redis time for 500 counts, 1.7 ms for 8,000
 * and 7.9 ms for 50,000 (blocking Redis that long, about four times per TTL); the plain HGETALL of the 50,000 cost
 * 0.09 ms, the adding up moving to the reader (5 ms of its CPU).
 */
const SCRIPT_BUILD_PAIRS = 4000;

/**
 * What a read shows: packed counts and cooldown ends (Redis ms) per channel (a channel not named counts 0), and the
 * version of each instance's counts the sums hold.
 */
interface SummaryView {
  counts: Map<string, string>;
  cooling: Map<string, number>;
  versions: Map<string, string>;
  /** How many (instance, channel) counts it summed: what a build costs. */
  pairs: number;
}

export class RedisLoadSummary {
  constructor(private readonly deps: LoadSummaryDeps) {}

  /** Cooldowns this store set (end, Redis ms) or cleared (0), with when (performance.now() ms). */
  private readonly noted = new Map<string, { end: number; at: number }>();
  private readonly mine = new Map<string, Mine>();
  /**
   * The greatest ages whose snapshot a plain GET last found missing: their reads go to the script, which builds it,
   * until a script read finds one there (with few readers, most reads would otherwise cost a GET and a script call).
   */
  private readonly missing = new Set<number>();
  /** The greatest max age asked for so far: versions are remembered at least that long once replaced. */
  private longest = 0;
  /** The last snapshot parsed (readers of one store often get the same one again). */
  private parsed: { text: string; view: SummaryView } | undefined;
  /** The (instance, channel) counts the last snapshot summed: above SCRIPT_BUILD_PAIRS, builds are done here. */
  private pairs = 0;

  private get buildsHere(): boolean {
    return this.pairs > (this.deps.scriptBuildPairs ?? SCRIPT_BUILD_PAIRS);
  }

  async exchange(ex: LoadExchange): Promise<LoadExchangeReply> {
    const { client, keys, clock, run } = this.deps;
    // (no await once the clock is known: exchanges then put their versions in and send them in the order called)
    if (clock.unknown) await this.deps.seedClock();
    const mine = this.mineOf(ex.instanceId);
    const ids = [...new Set(ex.read)];
    const asked = Math.max(0, Math.ceil(ex.maxAgeMs ?? 0));
    this.longest = Math.max(this.longest, asked);
    const maxAge = ex.fresh === true ? 0 : asked;
    // what goes in: this instance's whole counts after the exchange's changes, as one field (nothing for none)
    const writes = ex.mode !== 'changes' || ex.counts.size > 0 || ex.keepMs !== undefined;
    let version: Version | undefined;
    if (writes) version = this.apply(mine, ex);
    const own = version ?? mine.versions.get(mine.n);
    const write = version ? this.writeOf(mine, version) : undefined;
    const reads = ids.length > 0;
    // A read and a write together go as one script call; a read alone as a GET of the snapshot unless it is known to
    // be missing (or must be fresh), a write alone as an HSET. When many counts make builds costly in Redis, they are
    // done here (a plain HGETALL): a fresh read builds at once (its write, if any, as an HSET); any other read looks
    // for the snapshot first, whatever it found last time, since a build here is costly for this process too.
    const fresh = reads && maxAge === 0;
    const buildHere = fresh && this.buildsHere;
    const byScript =
      reads && !buildHere && (write !== undefined || fresh || (this.missing.has(maxAge) && !this.buildsHere));
    const byGet = reads && !byScript && !buildHere;
    const withTime = reads && clock.claimRefresh(TIME_EVERY_MS);
    const plainWrite = write !== undefined && !byScript;
    const n =
      (byScript || byGet ? 1 : 0) +
      (buildHere ? 2 : 0) +
      (plainWrite ? 1 + (write.expiry !== '' ? 1 : 0) : 0) +
      (withTime ? 1 : 0);
    if (n === 0) return { loads: new Map(), resync: false };
    ex.onSent?.();
    const sentAt = clock.sending();
    const [, plain, scripted, fields, time] = await run('load_read', n, () =>
      Promise.all([
        plainWrite ? this.send(ex.instanceId, write) : undefined,
        byGet ? client.get(keys.loadSnapshot(maxAge)) : undefined,
        byScript ? this.script(maxAge, write && { instanceId: ex.instanceId, ...write }) : undefined,
        buildHere ? this.readFields() : undefined,
        withTime ? client.time() : undefined,
      ]),
    );
    if (time) clock.learn(time as unknown as string[], sentAt);
    if (version) this.confirmed(mine, version);
    let reply = fields ? this.assemble(fields, maxAge) : scripted;
    if (plain === null || reply?.snapshot === null) {
      // no snapshot: built by the script or here (about once per max age across the fleet); the read's own write, if
      // any, went out before
      this.missing.add(maxAge);
      reply = await this.build(maxAge);
    }
    if (ids.length === 0) return { loads: new Map(), resync: false };
    if (reply && !reply.built) this.missing.delete(maxAge);
    let view = this.parse(reply?.snapshot ?? plain ?? null);
    let nowMs = reply?.nowMs;
    let base = this.ownIn(view, ex.instanceId, mine);
    if (base === undefined) {
      // built from a version of this instance's counts it no longer remembers (its reply was handled very late): read
      // the counts as they are now instead, which hold what it last put in
      const exact = await this.build(0);
      view = this.parse(exact.snapshot);
      nowMs = exact.nowMs;
      base = this.ownIn(view, ex.instanceId, mine);
      if (base === undefined) {
        // Redis still holds a version it forgot: an older write that landed after a newer one (one resent after a
        // script reload, say). Its latest counts go in again; meanwhile the view shows the sums as they are.
        this.rewrite(ex.instanceId, mine);
        base = own?.counts ?? EMPTY;
      }
    }
    const now = nowMs ?? clock.now();
    const noted = performance.now() - Math.max(NOTED_MS, this.longest);
    for (const [id, note] of this.noted) if (note.at < noted) this.noted.delete(id);
    const loads = new Map<string, ChannelLoad>();
    for (const id of ids) {
      // the fleet's sum without this instance's counts as the snapshot holds them, with them as it just reported them
      const packed = Number(view.counts.get(id) ?? 0) - (base.get(id) ?? 0) + (own?.counts.get(id) ?? 0);
      const { active, waiting } = unpackCounts(packed);
      const end = this.noted.get(id)?.end ?? view.cooling.get(id) ?? 0;
      const remaining = end > now ? end - now : 0;
      loads.set(id, { active, waiting, coolingDown: remaining > 0, cooldownRemainingMs: remaining });
    }
    return { loads, resync: false };
  }

  /** Puts this instance's counts in again as a new version (one HSET), not waiting for it; a failure is the next's. */
  private rewrite(instanceId: string, mine: Mine): void {
    const version = this.apply(mine, { instanceId, mode: 'changes', counts: new Map(), read: [] });
    const write = this.writeOf(mine, version);
    void this.deps
      .run('load_read', 1 + (write.expiry !== '' ? 1 : 0), () => this.send(instanceId, write))
      .then(() => this.confirmed(mine, version))
      .catch(() => undefined);
  }

  /** Applies the exchange to this instance's counts, as a new version of them. */
  private apply(mine: Mine, ex: LoadExchange): Version {
    const { clock } = this.deps;
    if (ex.mode !== 'changes') mine.counts.clear();
    if (ex.mode !== 'leave') {
      for (const [id, counts] of ex.counts) {
        const packed = packCounts(counts);
        if (packed > 0) mine.counts.set(id, packed);
        else mine.counts.delete(id);
      }
    }
    if (ex.keepMs !== undefined) {
      mine.lapseAt = Math.round(clock.now() + ex.keepMs);
      mine.keepMs = ex.keepMs;
      mine.renewDue = true;
    }
    mine.lapseAt ??= Math.round(clock.now() + DEFAULT_KEEP_MS);
    const version: Version = { n: ++mine.n, counts: new Map(mine.counts) };
    mine.versions.set(version.n, version);
    // (writes failing one after the other are never confirmed: the oldest go first; a snapshot naming one is read
    // again without a max age)
    for (const n of mine.versions.keys()) {
      if (mine.versions.size <= MAX_VERSIONS) break;
      mine.versions.delete(n);
    }
    return version;
  }

  /**
   * What puts this version in: the field (its JSON; '' when it holds nothing: the field is deleted), and the counts
   * hash's new expiry with a keep ('' for none).
   */
  private writeOf(mine: Mine, version: Version): { field: string; expiry: number | '' } {
    const flat: (string | number)[] = [`${mine.tag}.${version.n}`, mine.lapseAt!];
    for (const [id, packed] of version.counts) flat.push(id, packed);
    const keepMs = mine.keepMs;
    // what nobody renews goes by itself: once no live instance holds anything, the hash expires
    const expiry = keepMs !== undefined && mine.renewDue ? keepMs + Math.floor(keepMs / 4) : '';
    mine.renewDue = false;
    return { field: version.counts.size > 0 ? JSON.stringify(flat) : '', expiry };
  }

  /** The write alone: HSET (HDEL for nothing) and PEXPIRE with a keep. */
  private send(instanceId: string, write: { field: string; expiry: number | '' }): Promise<unknown> {
    const { client, keys } = this.deps;
    const key = keys.loadCounts();
    return Promise.all([
      write.field !== '' ? client.hset(key, instanceId, write.field) : client.hdel(key, instanceId),
      write.expiry !== '' ? client.pexpire(key, write.expiry) : undefined,
    ]);
  }

  /**
   * A version was put in: the versions before it are replaced in Redis, and a snapshot built from them is served for
   * at most the greatest max age: they are forgotten a while after that.
   */
  private confirmed(mine: Mine, version: Version): void {
    const now = performance.now();
    for (const [n, v] of mine.versions) {
      if (n >= version.n) break;
      v.replacedAt ??= now;
      if (now - v.replacedAt > this.longest + REPLACED_KEEP_MS) mine.versions.delete(n);
    }
  }

  /** This instance's counts as the snapshot's sums hold them (none: not in it); undefined for a version not known. */
  private ownIn(view: SummaryView, instanceId: string, mine: Mine): ReadonlyMap<string, number> | undefined {
    const version = view.versions.get(instanceId);
    if (version === undefined) return EMPTY;
    const dot = version.lastIndexOf('.');
    // another process under the same id put these in (this one's predecessor, say): they are not this one's to take out
    if (version.slice(0, dot) !== mine.tag) return EMPTY;
    return mine.versions.get(Number(version.slice(dot + 1)))?.counts;
  }

  /**
   * One call of the exchange script: puts `write` in first when given, then reads the snapshot, or builds a missing
   * one unless builds are done here (then the snapshot comes back null).
   */
  private script(
    maxAge: number,
    write?: { instanceId: string; field: string; expiry: number | '' },
    drop: readonly string[] = [],
  ): Promise<SnapshotReply> {
    const { client, keys } = this.deps;
    return SCRIPTS.exchangeLoads.call(
      client,
      [keys.loadCounts(), keys.loadCooling(), keys.loadSnapshot(maxAge)],
      [
        maxAge,
        write?.instanceId ?? '',
        write?.field ?? '',
        write?.expiry ?? '',
        this.buildsHere ? 0 : 1,
        ...drop,
      ],
    );
  }

  /** A snapshot built now: by the script, or here from a plain HGETALL when many counts make it costly in Redis. */
  private async build(maxAge: number): Promise<SnapshotReply> {
    if (!this.buildsHere) {
      const reply = await this.deps.run('load_read', 1, () => this.script(maxAge));
      if (reply.snapshot !== null) return reply;
    }
    return this.assemble(await this.deps.run('load_read', 2, () => this.readFields()), maxAge);
  }

  /** Every instance's field and the cooldown ends, as they are (two plain HGETALLs). */
  private readFields(): Promise<[Record<string, string>, Record<string, string>]> {
    const { client, keys } = this.deps;
    return Promise.all([client.hgetall(keys.loadCounts()), client.hgetall(keys.loadCooling())]);
  }

  /**
   * The snapshot of the fields read, as the script builds it (the lapsed left out), stored for `maxAge` when that is
   * not 0; the lapsed are deleted by the script, which checks them again (one may have come back meanwhile).
   */
  private assemble(
    [fields, cooling]: [Record<string, string>, Record<string, string>],
    maxAge: number,
  ): SnapshotReply {
    const { client, keys, clock, run } = this.deps;
    const now = clock.now();
    const sums = new Map<string, number>();
    const versions: string[] = [];
    const lapsed: string[] = [];
    let pairs = 0;
    for (const [instanceId, text] of Object.entries(fields)) {
      let counts: unknown;
      try {
        counts = JSON.parse(text);
      } catch {
        counts = undefined;
      }
      if (!Array.isArray(counts) || typeof counts[1] !== 'number' || counts[1] <= now) {
        lapsed.push(instanceId);
        continue;
      }
      versions.push(instanceId, String(counts[0]));
      for (let i = 2; i + 1 < counts.length; i += 2) {
        const n = Number(counts[i + 1]);
        if (!Number.isFinite(n)) continue;
        pairs++;
        const id = String(counts[i]);
        sums.set(id, (sums.get(id) ?? 0) + n);
      }
    }
    const l: string[] = [];
    for (const [id, n] of sums) if (n > 0) l.push(id, String(n));
    const snapshot = JSON.stringify({ l, c: Object.entries(cooling).flat(), v: versions, n: pairs });
    const quiet = () => undefined;
    if (maxAge > 0)
      void run('load_read', 1, () => client.set(keys.loadSnapshot(maxAge), snapshot, 'PX', maxAge)).catch(
        quiet,
      );
    if (lapsed.length > 0)
      void run('load_read', 1, () => this.script(0, undefined, lapsed.slice(0, 1000))).catch(quiet);
    return { snapshot, built: true, nowMs: undefined };
  }

  private mineOf(instanceId: string): Mine {
    let m = this.mine.get(instanceId);
    if (!m) {
      m = {
        tag: randomBytes(6).toString('base64url'),
        n: 0,
        counts: new Map(),
        versions: new Map(),
        renewDue: true,
      };
      this.mine.set(instanceId, m);
    }
    return m;
  }

  /** A snapshot (`{"l": [channel, count, …], "c": [channel, end, …], "v": [instance, version, …], "n": count}`). */
  private parse(text: string | null): SummaryView {
    if (text === null) return { counts: new Map(), cooling: new Map(), versions: new Map(), pairs: 0 };
    if (this.parsed?.text === text) return this.parsed.view;
    const { l, c, v, n } = JSON.parse(text) as { l?: unknown; c?: unknown; v?: unknown; n?: unknown };
    const view: SummaryView = {
      counts: new Map(),
      cooling: new Map(),
      versions: new Map(),
      pairs: Number(n) || 0,
    };
    if (Array.isArray(l))
      for (let i = 0; i + 1 < l.length; i += 2) view.counts.set(String(l[i]), String(l[i + 1]));
    if (Array.isArray(c))
      for (let i = 0; i + 1 < c.length; i += 2) view.cooling.set(String(c[i]), Number(c[i + 1]));
    if (Array.isArray(v))
      for (let i = 0; i + 1 < v.length; i += 2) view.versions.set(String(v[i]), String(v[i + 1]));
    this.parsed = { text, view };
    this.pairs = view.pairs;
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
