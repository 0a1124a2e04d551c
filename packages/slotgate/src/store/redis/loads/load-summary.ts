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
import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../../../core/clock.js';
import type { ChannelLoad, LoadExchange } from '../../store.js';
import type { KeyBuilder } from '../keys.js';
import { SCRIPTS, type SnapshotReply } from '../scripts.js';
import { parseSnapshot, sumFields, unpackCounts, type SummaryView } from './load-snapshot.js';
import { RedisOffset } from './redis-offset.js';
import { ReportedCounts, type FieldWrite } from './reported-counts.js';

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

export interface LoadSummaryDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  clock: Clock;
  /** Runs the work under the store's time bound, counting `n` commands for the purpose. */
  run: <T>(purpose: 'load_read' | 'cooldown', n: number, work: () => Promise<T>) => Promise<T>;
  /** Above this many (instance, channel) counts in the last snapshot, builds are done here. @default 4000 */
  scriptBuildPairs?: number;
}

/**
 * Up to this many (instance, channel) counts, the script builds a missing snapshot; above, this store builds it from
 * a plain HGETALL. Measured on Redis 7.0: a build in Lua cost 0.39 ms of Redis time for 500 counts, 1.7 ms for 8,000
 * and 7.9 ms for 50,000 (blocking Redis that long, about four times per TTL); the plain HGETALL of the 50,000 cost
 * 0.09 ms, the adding up moving to the reader (5 ms of its CPU).
 */
const SCRIPT_BUILD_PAIRS = 4000;

export class RedisLoadSummary {
  /** The Redis clock, by its offset to this process's. */
  private readonly clock: RedisOffset;
  private seeding: Promise<void> | undefined;

  constructor(private readonly deps: LoadSummaryDeps) {
    this.clock = new RedisOffset(deps.clock);
  }

  /** Reads the Redis clock once before the first exchange that needs it (shared by the calls meanwhile). */
  private seedClock(): Promise<void> {
    return (this.seeding ??= this.deps
      .run('load_read', 1, () => this.deps.client.time())
      .then((time) => {
        this.clock.learn(time as unknown as string[]);
        this.clock.claimRefresh(TIME_EVERY_MS);
      })
      .finally(() => (this.seeding = undefined)));
  }

  /** Cooldowns this store set (end, Redis ms) or cleared (0), with when (performance.now() ms). */
  private readonly noted = new Map<string, { end: number; at: number }>();
  private readonly mine = new Map<string, ReportedCounts>();
  /**
   * The greatest ages whose snapshot a plain GET last found missing: their reads go to the script, which builds it,
   * until a script read finds one there (with few readers, most reads would otherwise cost a GET and a script call).
   */
  private readonly missing = new Set<number>();
  /** The greatest max age asked for so far: versions are remembered at least that long once replaced. */
  private longest = 0;
  /** The last snapshot parsed or built (readers of one store often get the same one again). */
  private parsed: { text: string; view: SummaryView } | undefined;
  /** The (instance, channel) counts the last snapshot summed: above SCRIPT_BUILD_PAIRS, builds are done here. */
  private pairs = 0;

  private get buildsHere(): boolean {
    return this.pairs > (this.deps.scriptBuildPairs ?? SCRIPT_BUILD_PAIRS);
  }

  async exchange(ex: LoadExchange): Promise<Map<string, ChannelLoad>> {
    const { client, keys, run } = this.deps;
    const clock = this.clock;
    // (no await once the clock is known: exchanges then put their versions in and send them in the order called)
    if (clock.unknown) await this.seedClock();
    const mine = this.mineOf(ex.instanceId);
    const ids = [...new Set(ex.read)];
    const maxAge = Math.max(0, Math.ceil(ex.maxAgeMs ?? 0));
    this.longest = Math.max(this.longest, maxAge);
    // what goes in: this instance's whole counts after the exchange's changes, as one field (nothing for none)
    const writes = ex.mode !== 'changes' || ex.counts.size > 0 || ex.keepMs !== undefined;
    const version = writes ? mine.apply(ex, clock.now()) : undefined;
    const own = version ?? mine.last;
    const write = version ? mine.writeOf(version) : undefined;
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
    if (n === 0) return new Map();
    const [, plain, scripted, fields, time] = await run('load_read', n, () =>
      Promise.all([
        plainWrite ? this.send(ex.instanceId, write) : undefined,
        byGet ? client.get(keys.loadSnapshot(maxAge)) : undefined,
        byScript ? this.script(maxAge, write && { instanceId: ex.instanceId, ...write }) : undefined,
        buildHere ? this.readFields() : undefined,
        withTime ? client.time() : undefined,
      ]),
    );
    if (time) clock.learn(time as unknown as string[]);
    if (version) mine.confirmed(version, this.longest + REPLACED_KEEP_MS);
    let reply = fields ? this.assemble(fields, maxAge) : scripted;
    if (plain === null || reply?.snapshot === null) {
      // no snapshot: built by the script or here (about once per max age across the fleet); the read's own write, if
      // any, went out before
      this.missing.add(maxAge);
      reply = await this.build(maxAge);
    }
    if (ids.length === 0) return new Map();
    if (reply && !reply.built) this.missing.delete(maxAge);
    let view = this.parse(reply?.snapshot ?? plain ?? null);
    let nowMs = reply?.nowMs;
    let base = mine.ownIn(view, ex.instanceId);
    if (base === undefined) {
      // built from a version of this instance's counts it no longer remembers (its reply was handled very late): read
      // the counts as they are now instead, which hold what it last put in
      const exact = await this.build(0);
      view = this.parse(exact.snapshot);
      nowMs = exact.nowMs;
      base = mine.ownIn(view, ex.instanceId);
      if (base === undefined) {
        // Redis still holds a version it forgot: an older write that landed after a newer one (one resent after a
        // script reload, say). Its latest counts go in again; meanwhile the view shows the sums as they are.
        this.rewrite(ex.instanceId, mine);
        base = own?.counts ?? new Map<string, number>();
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
      // (a snapshot built now, for a read with no max age, holds this store's own cooldowns already)
      const end = (maxAge > 0 ? this.noted.get(id)?.end : undefined) ?? view.cooling.get(id) ?? 0;
      const remaining = end > now ? end - now : 0;
      loads.set(id, { active, waiting, coolingDown: remaining > 0, cooldownRemainingMs: remaining });
    }
    return loads;
  }

  /** Puts this instance's counts in again as a new version (one HSET), not waiting for it; a failure is the next's. */
  private rewrite(instanceId: string, mine: ReportedCounts): void {
    const version = mine.apply({ mode: 'changes', counts: new Map() }, this.clock.now());
    const write = mine.writeOf(version);
    void this.deps
      .run('load_read', 1 + (write.expiry !== '' ? 1 : 0), () => this.send(instanceId, write))
      .then(() => mine.confirmed(version, this.longest + REPLACED_KEEP_MS))
      .catch(() => undefined);
  }

  /** The write alone: HSET (HDEL for nothing) and PEXPIRE with a keep. */
  private send(instanceId: string, write: FieldWrite): Promise<unknown> {
    const { client, keys } = this.deps;
    const key = keys.loadCounts();
    return Promise.all([
      write.field !== '' ? client.hset(key, instanceId, write.field) : client.hdel(key, instanceId),
      write.expiry !== '' ? client.pexpire(key, write.expiry) : undefined,
    ]);
  }

  /**
   * One call of the exchange script: puts `write` in first when given, then reads the snapshot, or builds a missing
   * one unless builds are done here (then the snapshot comes back null).
   */
  private script(
    maxAge: number,
    write?: FieldWrite & { instanceId: string },
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
    const { client, keys, run } = this.deps;
    const clock = this.clock;
    const { text, view, lapsed } = sumFields(fields, cooling, clock.now());
    this.seen(text, view);
    const quiet = () => undefined;
    if (maxAge > 0)
      void run('load_read', 1, () => client.set(keys.loadSnapshot(maxAge), text, 'PX', maxAge)).catch(quiet);
    if (lapsed.length > 0)
      void run('load_read', 1, () => this.script(0, undefined, lapsed.slice(0, 1000))).catch(quiet);
    return { snapshot: text, built: true, nowMs: undefined };
  }

  private mineOf(instanceId: string): ReportedCounts {
    let m = this.mine.get(instanceId);
    if (!m) this.mine.set(instanceId, (m = new ReportedCounts()));
    return m;
  }

  /** A snapshot's text as a view, parsed once for as long as the same text comes back. */
  private parse(text: string | null): SummaryView {
    if (text !== null && this.parsed?.text === text) return this.parsed.view;
    const view = parseSnapshot(text);
    if (text !== null) this.seen(text, view);
    return view;
  }

  /** The snapshot last parsed or built: what a build costs follows its count of (instance, channel) counts. */
  private seen(text: string, view: SummaryView): void {
    this.parsed = { text, view };
    this.pairs = view.pairs;
  }

  /**
   * The cooldown's end, on the Redis clock as last read, for the summary's readers: `HSET`, and a `PEXPIRE` of the
   * hash to an hour past this cooldown (a longer cooldown set before may drop out of the readers' view then; the
   * cooldown key itself, which the acquire script checks, keeps it).
   */
  async noteCooldown(channelId: string, ms: number): Promise<void> {
    if (this.clock.unknown) await this.seedClock();
    const end = Math.round(this.clock.now() + ms);
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
