/**
 * The load summary: one hash field per instance with its whole counts and lapse time, and a snapshot of the sums its
 * readers share, rebuilt (lua/exchangeLoads-3.lua) once older than they allow: one command per exchange, whatever the
 * channel count. A reader swaps its own counts in the sums (by the version the snapshot names) for its latest, so its
 * own changes show at once. Each write holds an instance's whole counts, so the next exchange makes good one that
 * failed, ran twice or was lost; an instance that stops writing lapses out. One hash tag: one Cluster slot.
 */
import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../../../core/clock.js';
import type { ChannelLoad, LoadExchange } from '../../store.js';
import type { KeyBuilder } from '../keys.js';
import { SCRIPTS, type SnapshotReply } from '../scripts.js';
import { parseSnapshot, sumFields, unpackCounts, type SummaryView } from './load-snapshot.js';
import { RedisOffset } from './redis-offset.js';
import { ReportedCounts, type FieldWrite } from './reported-counts.js';

/** A replaced version is remembered this long past the greatest max age (a snapshot may still hold it). */
const REPLACED_KEEP_MS = 2000;

/** A cooldown this store set or cleared shows as set for this long (or the greatest max age), whatever snapshots say. */
const NOTED_MS = 1000;

/** How often a summary read carries a TIME: the Redis clock dates only lapse times and cooldown ends here. */
const TIME_EVERY_MS = 5000;

/** The cooling hash outlives the cooldown just noted by this much. */
const COOLING_KEY_SPARE_MS = 3_600_000;

export interface LoadSummaryDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  clock: Clock;
  run: <T>(purpose: 'load_read' | 'cooldown', n: number, work: () => Promise<T>) => Promise<T>;
  /** @default SCRIPT_BUILD_PAIRS */
  scriptBuildPairs?: number;
}

/**
 * Up to this many (instance, channel) counts the script builds a missing snapshot; above, this store sums a plain
 * HGETALL itself, so a large build does not block Redis (docs/redis.md, "The load summary").
 */
const SCRIPT_BUILD_PAIRS = 4000;

export class RedisLoadSummary {
  private readonly clock: RedisOffset;
  private seeding: Promise<void> | undefined;

  constructor(private readonly deps: LoadSummaryDeps) {
    this.clock = new RedisOffset(deps.clock);
  }

  /** One TIME before the first exchange that needs it, shared by the calls meanwhile. */
  private seedClock(): Promise<void> {
    return (this.seeding ??= this.deps
      .run('load_read', 1, () => this.deps.client.time())
      .then((time) => {
        this.clock.learn(time as unknown as string[]);
        this.clock.claimRefresh(TIME_EVERY_MS);
      })
      .finally(() => (this.seeding = undefined)));
  }

  /** Cooldowns this store set (end, Redis ms) or cleared (0), and when (performance.now()). */
  private readonly noted = new Map<string, { end: number; at: number }>();
  private readonly mine = new Map<string, ReportedCounts>();
  /** Max ages whose snapshot a GET found missing: read by the script (which builds it) until one is there. */
  private readonly missing = new Set<number>();
  private longest = 0;
  /** The last snapshot parsed or built: readers often get the same one again. */
  private parsed: { text: string; view: SummaryView } | undefined;
  /** The (instance, channel) counts the last snapshot summed. */
  private pairs = 0;

  private get buildsHere(): boolean {
    return this.pairs > (this.deps.scriptBuildPairs ?? SCRIPT_BUILD_PAIRS);
  }

  async exchange(ex: LoadExchange): Promise<Map<string, ChannelLoad>> {
    const { client, keys, run } = this.deps;
    const clock = this.clock;
    // no await once the clock is known: exchanges must send their versions in the order called
    if (clock.unknown) await this.seedClock();
    const mine = this.mineOf(ex.instanceId);
    const ids = [...new Set(ex.read)];
    const maxAge = Math.max(0, Math.ceil(ex.maxAgeMs ?? 0));
    this.longest = Math.max(this.longest, maxAge);
    const writes = ex.mode !== 'changes' || ex.counts.size > 0 || ex.keepMs !== undefined;
    const version = writes ? mine.apply(ex, clock.now()) : undefined;
    const own = version ?? mine.last;
    const write = version ? mine.writeOf(version) : undefined;
    const reads = ids.length > 0;
    // Read and write: one script call; a read alone: a GET unless the snapshot is missing or must be fresh; a write
    // alone: an HSET. When builds are done here, only a fresh read builds at once (they cost this process too).
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
      // no snapshot: built (about once per max age across the fleet); the read's write went out before
      this.missing.add(maxAge);
      reply = await this.build(maxAge);
    }
    if (ids.length === 0) return new Map();
    if (reply && !reply.built) this.missing.delete(maxAge);
    let view = this.parse(reply?.snapshot ?? plain ?? null);
    let nowMs = reply?.nowMs;
    let base = mine.ownIn(view, ex.instanceId);
    if (base === undefined) {
      // built from a version of this instance's counts it no longer remembers: read them as they are now
      const exact = await this.build(0);
      view = this.parse(exact.snapshot);
      nowMs = exact.nowMs;
      base = mine.ownIn(view, ex.instanceId);
      if (base === undefined) {
        // an older write landed after a newer one (resent after a script reload, say): write the latest again
        this.rewrite(ex.instanceId, mine);
        base = own?.counts ?? new Map<string, number>();
      }
    }
    const now = nowMs ?? clock.now();
    const noted = performance.now() - Math.max(NOTED_MS, this.longest);
    for (const [id, note] of this.noted) if (note.at < noted) this.noted.delete(id);
    const loads = new Map<string, ChannelLoad>();
    for (const id of ids) {
      // this instance's counts as the snapshot holds them swapped for its latest
      const packed = Number(view.counts.get(id) ?? 0) - (base.get(id) ?? 0) + (own?.counts.get(id) ?? 0);
      const { active, waiting } = unpackCounts(packed);
      // a snapshot built for a read with no max age holds this store's cooldowns already
      const end = (maxAge > 0 ? this.noted.get(id)?.end : undefined) ?? view.cooling.get(id) ?? 0;
      const remaining = end > now ? end - now : 0;
      loads.set(id, { active, waiting, coolingDown: remaining > 0, cooldownRemainingMs: remaining });
    }
    return loads;
  }

  /** Writes this instance's counts again as a new version, not waiting for it. */
  private rewrite(instanceId: string, mine: ReportedCounts): void {
    const version = mine.apply({ mode: 'changes', counts: new Map() }, this.clock.now());
    const write = mine.writeOf(version);
    void this.deps
      .run('load_read', 1 + (write.expiry !== '' ? 1 : 0), () => this.send(instanceId, write))
      .then(() => mine.confirmed(version, this.longest + REPLACED_KEEP_MS))
      .catch(() => undefined);
  }

  private send(instanceId: string, write: FieldWrite): Promise<unknown> {
    const { client, keys } = this.deps;
    const key = keys.loadCounts();
    return Promise.all([
      write.field !== '' ? client.hset(key, instanceId, write.field) : client.hdel(key, instanceId),
      write.expiry !== '' ? client.pexpire(key, write.expiry) : undefined,
    ]);
  }

  /** Writes `write` first, then reads the snapshot, or builds a missing one unless builds are done here (null). */
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

  private async build(maxAge: number): Promise<SnapshotReply> {
    if (!this.buildsHere) {
      const reply = await this.deps.run('load_read', 1, () => this.script(maxAge));
      if (reply.snapshot !== null) return reply;
    }
    return this.assemble(await this.deps.run('load_read', 2, () => this.readFields()), maxAge);
  }

  private readFields(): Promise<[Record<string, string>, Record<string, string>]> {
    const { client, keys } = this.deps;
    return Promise.all([client.hgetall(keys.loadCounts()), client.hgetall(keys.loadCooling())]);
  }

  /** The snapshot as the script builds it, stored for `maxAge`; the script deletes the lapsed after checking again. */
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

  private parse(text: string | null): SummaryView {
    if (text !== null && this.parsed?.text === text) return this.parsed.view;
    const view = parseSnapshot(text);
    if (text !== null) this.seen(text, view);
    return view;
  }

  private seen(text: string, view: SummaryView): void {
    this.parsed = { text, view };
    this.pairs = view.pairs;
  }

  /**
   * The cooldown's end for the summary's readers. The hash expires an hour past this cooldown, which may drop a
   * longer one from their view; the cooldown key, which the acquire script checks, keeps it.
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
