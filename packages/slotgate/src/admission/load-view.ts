/**
 * The load view: "how loaded is each candidate?", for ordering only. Ownership is always decided live by
 * the acquire script, so nothing here can cause overselling.
 *
 * - a per-channel snapshot cache with a short TTL: a channel is fetched at most once per TTL per instance, however
 *   many candidate sets contain it; reading cached channels issues zero store commands;
 * - coalescing: a read that finds a channel's fetch in flight joins it instead of starting another;
 * - detached fetch rounds with a time-out, at most `maxConcurrentFetches` at once; a caller that cannot get a fetch
 *   slot in time, or whose fetch fails, gets an in-memory fallback (this instance's own counts), never an error;
 * - local correction (local-correction.ts): this instance's own acquires and releases adjust the cached counts between
 *   fetches;
 * - fresh reads bypassing the cache, coalesced per channel set, stored back into the cache;
 * - the load summary (load-summary.ts), where the store has one and `load_summary_enabled`: a fetch round is one
 *   exchange that also puts in this instance's own changed counts and reads every channel wanted lately, so a round
 *   costs one command however many channels it covers;
 * - `load_cache_enabled = false`: every read goes straight to the store, channel by channel (the rollback switch).
 */
import { abortable } from '../core/abort.js';
import { within, type Clock } from '../core/clock.js';
import { pushTo } from '../core/collections.js';
import type { Settings } from '../core/settings.js';
import type { ChannelLoad, SlotStore } from '../store/store.js';
import { LocalCorrection, ZERO, type Corrected } from './local-correction.js';
import { SummaryReports } from './load-summary.js';
import { readRoundIds, reportRoundIds, type Watched } from './round-reads.js';
import { Semaphore } from './semaphore.js';

export interface LocalState {
  active(channelId: string): number;
  waiting(channelId: string): number;
  /** Remaining cooldown this instance knows of, 0 when none. */
  coolingMs(channelId: string): number;
}

export interface LoadViewOptions {
  store: SlotStore;
  clock: Clock;
  settings: () => Settings;
  local: LocalState;
  /** Time-out of a fetch round, including the wait for a fetch slot. @default 3000 */
  fetchTimeoutMs?: number;
  /** Fetch rounds running at once per instance. @default 2 */
  maxConcurrentFetches?: number;
  /** This instance's id: with it, a store with a load summary gets this instance's counts (load-summary.ts). */
  instanceId?: () => string;
}

export interface LoadViewCounters {
  /** Reads served entirely from the cache (zero store commands). */
  hits: number;
  /** Reads that started a fetch round. */
  misses: number;
  /** Reads that only joined fetches already in flight. */
  coalesced: number;
  /** Fresh-read rounds started (a cached snapshot had filtered a whole tier as cooling). */
  freshReads: number;
  /** Reads answered (in part) with the in-memory fallback. */
  fallbacks: number;
  /** Store reads made: fetch rounds, fresh reads and direct reads with the cache off. */
  fetches: number;
  /** Reads straight from the store with load_cache_enabled = false. */
  directReads: number;
  /**
   * Passes ordered by entries past the TTL but recent (peekRecent), with no wait, while a round (counted as a miss, or
   * a coalesced join when one was in flight) refreshes them.
   */
  recentHits: number;
  /** Summary exchanges started only to put this instance's changes in (or renew it), with no read waiting. */
  reports: number;
}

/** A cached channel; a summary round reads the channels wanted lately (round-reads.ts). */
interface Entry extends Corrected, Watched {}

type Round = Promise<Map<string, ChannelLoad> | null>;

/**
 * A pass orders by snapshots up to this many TTLs old (and at most RECENT_SPARE_MS past the TTL) without waiting,
 * while a round refreshes them (peekRecent): an instance that takes a request every few hundred milliseconds would
 * otherwise wait for a read before nearly every acquire. Past it (an instance idle for a while), the pass waits.
 */
const RECENT_TTLS = 5;
const RECENT_SPARE_MS = 1000;

export class LoadView {
  readonly counters: LoadViewCounters = {
    hits: 0,
    misses: 0,
    coalesced: 0,
    freshReads: 0,
    fallbacks: 0,
    fetches: 0,
    directReads: 0,
    reports: 0,
    recentHits: 0,
  };
  private readonly cache = new Map<string, Entry>();
  /** This instance's own changes and tries since each read (local-correction.ts). */
  private readonly local = new LocalCorrection();
  private readonly inflight = new Map<string, Round>();
  /** When a pass last asked for loads. */
  private lastWantedAt = -Infinity;
  private readonly freshInflight = new Map<string, Round>();
  private readonly fetchSlots: Semaphore;
  private readonly fetchTimeoutMs: number;
  /** This instance's reports to the load summary; undefined when the store has none. */
  private readonly reports: SummaryReports | undefined;
  private closed = false;

  constructor(private readonly opts: LoadViewOptions) {
    this.fetchTimeoutMs = opts.fetchTimeoutMs ?? 3000;
    this.fetchSlots = new Semaphore(opts.maxConcurrentFetches ?? 2, opts.clock);
    const { store, instanceId } = opts;
    if (store.exchangeLoads && instanceId) {
      this.reports = new SummaryReports({
        store,
        clock: opts.clock,
        settings: opts.settings,
        instanceId,
        counts: (id) => this.local.own(id),
        held: () => this.local.held(),
        flush: () => this.flush(),
        leaveTimeoutMs: this.fetchTimeoutMs,
      });
    }
  }

  /** Whether rounds go through the load summary. */
  private summaryOn(): boolean {
    const settings = this.opts.settings();
    return this.reports?.inUse(settings.load_summary_enabled && settings.load_cache_enabled) ?? false;
  }

  /** Whether reads come from the load summary, which every instance reads alike (the pass spreads its picks then). */
  get sharedLoads(): boolean {
    return this.summaryOn();
  }

  /**
   * The loads, synchronously, when every channel has a fresh cached snapshot (a hit, counted as one); undefined
   * otherwise. Lets a pass order and reserve in one synchronous step, so concurrent passes of this instance see each
   * other's reservations instead of all picking the same channel. `countHit` false: a re-read that is not a new
   * selection (a pass that just waited for a fetch takes its loads again) is not counted as a hit. `anyAge`: the
   * last snapshot whatever its age (only to skip cooling channels when no read is worth waiting for).
   */
  peek(ids: readonly string[], countHit = true, anyAge = false): Map<string, ChannelLoad> | undefined {
    const settings = this.opts.settings();
    if (!settings.load_cache_enabled || ids.length === 0) return undefined;
    const now = this.opts.clock.now();
    this.lastWantedAt = now;
    const result = new Map<string, ChannelLoad>();
    for (const id of ids) {
      const entry = this.cache.get(id);
      if (!entry || (!anyAge && now - entry.fetchedAt >= settings.load_cache_ttl_ms)) return undefined;
      entry.wantedAt = now;
      result.set(id, this.local.corrected(id, entry));
    }
    if (countHit) this.counters.hits++;
    return result;
  }

  /**
   * The loads, synchronously, for a pass that found its entries past the TTL (`peek` answered nothing): when every
   * channel has an entry less than RECENT_TTLS TTLs (at most RECENT_SPARE_MS past the TTL) old that shows neither
   * waiters nor a cooldown, a read round for them starts (or is joined) in the background, and the pass orders by what
   * it has instead of waiting a round trip for it. Undefined otherwise (the pass waits for `read`), and with the cache
   * off. A channel with waiters or a cooldown is read first, as before: there the view does more than order (a waiter
   * is turned away by a queue it shows full; a cooling channel leaves its tier), and a stale count would decide. On a
   * channel that shows neither, a count a few TTLs old costs at most a `full` or `cooling` reply from the acquire
   * script, and the next candidate.
   */
  peekRecent(ids: readonly string[]): Map<string, ChannelLoad> | undefined {
    const settings = this.opts.settings();
    if (!settings.load_cache_enabled || ids.length === 0) return undefined;
    const now = this.opts.clock.now();
    const ttl = settings.load_cache_ttl_ms;
    const limit = Math.min(RECENT_TTLS * ttl, ttl + RECENT_SPARE_MS);
    const loads = new Map<string, ChannelLoad>();
    for (const id of ids) {
      const entry = this.cache.get(id);
      if (!entry || now - entry.fetchedAt >= limit) return undefined;
      const load = this.local.corrected(id, entry);
      if (load.waiting > 0 || load.coolingDown) return undefined;
      loads.set(id, load);
    }
    this.lastWantedAt = now;
    for (const id of ids) this.cache.get(id)!.wantedAt = now;
    this.counters.recentHits++;
    this.roundsFor(ids.filter((id) => now - this.cache.get(id)!.fetchedAt >= ttl));
    return loads;
  }

  /**
   * The rounds that read the stale channels: the ones in flight they join, and one new round for the others (counted
   * as a miss; as a coalesced join when every channel had one in flight).
   */
  private roundsFor(stale: readonly string[]): Map<Round, string[]> {
    const waits = new Map<Round, string[]>();
    const missing: string[] = [];
    for (const id of stale) {
      const round = this.inflight.get(id);
      if (round) pushTo(waits, round, id);
      else missing.push(id);
    }
    if (missing.length > 0) {
      this.counters.misses++;
      pushTo(waits, this.startRound(missing, false), ...missing);
    } else {
      this.counters.coalesced++;
    }
    return waits;
  }

  /** Loads of the given (bounded) channels. Never throws for store trouble; rejects only when `signal` aborts. */
  async read(ids: readonly string[], signal?: AbortSignal): Promise<Map<string, ChannelLoad>> {
    const result = new Map<string, ChannelLoad>();
    if (ids.length === 0) return result;
    const settings = this.opts.settings();
    if (!settings.load_cache_enabled) return this.readDirect(ids, signal);

    const now = this.opts.clock.now();
    this.lastWantedAt = now;
    const stale: string[] = [];
    for (const id of ids) {
      const entry = this.cache.get(id);
      if (entry) entry.wantedAt = now;
      if (entry && now - entry.fetchedAt < settings.load_cache_ttl_ms) {
        result.set(id, this.local.corrected(id, entry));
      } else {
        stale.push(id);
      }
    }
    if (stale.length === 0) {
      this.counters.hits++;
      return result;
    }
    const waits = this.roundsFor(stale);
    let fellBack = false;
    await abortable(
      Promise.all(
        [...waits].map(async ([round, roundIds]) => {
          const loads = await round;
          for (const id of roundIds) {
            const entry = loads && this.cache.get(id);
            if (entry) result.set(id, this.local.corrected(id, entry));
            else {
              result.set(id, this.fallback(id));
              fellBack = true;
            }
          }
        }),
      ),
      signal,
    );
    if (fellBack) this.counters.fallbacks++;
    return result;
  }

  /**
   * Re-reads the channels bypassing the cache (coalesced per channel set) and stores the result in the cache.
   * Returns null when the read failed: the caller keeps what it had.
   */
  async readFresh(ids: readonly string[], signal?: AbortSignal): Promise<Map<string, ChannelLoad> | null> {
    if (ids.length === 0) return new Map();
    const key = [...ids].sort().join('\u0000');
    let round = this.freshInflight.get(key);
    if (!round) {
      round = this.startRound([...ids], true);
      this.freshInflight.set(key, round);
      const started = round;
      void started.finally(() => {
        if (this.freshInflight.get(key) === started) this.freshInflight.delete(key);
      });
    }
    const loads = await abortable(round, signal);
    if (!loads) return null;
    const result = new Map<string, ChannelLoad>();
    for (const id of ids) {
      const entry = this.cache.get(id);
      result.set(id, entry ? this.local.corrected(id, entry) : loads.get(id)!);
    }
    return result;
  }

  /**
   * A detached fetch round: waits for a fetch slot, reads the store, fills the cache; null on any failure. Through
   * the load summary, the round also puts in this instance's pending reports and reads every channel wanted lately.
   */
  private startRound(requested: string[], fresh: boolean, report = false): Round {
    if (fresh) this.counters.freshReads++;
    const summary = this.summaryOn();
    // through the summary a read also refreshes what was wanted lately, and a report reads while passes ask for loads
    const now = this.opts.clock.now();
    const ttl = this.opts.settings().load_cache_ttl_ms;
    const ids = !summary
      ? requested
      : report
        ? reportRoundIds(this.cache, this.lastWantedAt, now, ttl)
        : readRoundIds(this.cache, requested, now, ttl);
    const deadline = now + this.fetchTimeoutMs;
    const round: Round = (async () => {
      if (!(await this.fetchSlots.acquire(this.fetchTimeoutMs))) {
        // a summary round's timer was spent on it: the reports it was to carry get another one
        if (summary) this.reports!.missed();
        return null;
      }
      if (summary && this.closed) {
        // closing: its leave must be the last word this instance says to the summary
        this.fetchSlots.release();
        return null;
      }
      this.counters.fetches++;
      // The base is where this instance's counters stand when the read goes out (the store reports it): every release
      // queued before then is out of the result and already counted; an acquire still in flight then is in the
      // result and counted again when it is confirmed, so the view errs towards showing a channel fuller, never
      // emptier, than it is (a reservation is never part of the base). Through the summary, the base is the counts
      // this round puts in (the summary holds them once it answers), or nothing when it did not know this instance.
      const snapshot = () => ids.map((id) => this.local.base(id));
      let bases = snapshot();
      let read: Promise<Map<string, ChannelLoad>>;
      try {
        read = summary
          ? this.reports!.send(ids, fresh).then((reply) => {
              if (reply.resync) bases = ids.map(() => ZERO);
              return reply.loads;
            })
          : this.opts.store.readLoads(ids, { onSent: () => (bases = snapshot()) });
      } catch (err) {
        read = Promise.reject(err as Error); // a store that throws at once must not keep the fetch slot
      }
      // The slot is held until the store call itself settles, so slow reads never pile up past the bound.
      void read.then(
        () => this.fetchSlots.release(),
        () => this.fetchSlots.release(),
      );
      const loads = await within(this.opts.clock, read, Math.max(1, deadline - this.opts.clock.now()));
      if (!loads) return null;
      const fetchedAt = this.opts.clock.now();
      ids.forEach((id, i) => {
        const load = loads.get(id);
        const wantedAt = this.cache.get(id)?.wantedAt ?? fetchedAt;
        if (load) this.cache.set(id, { load, fetchedAt, base: bases[i]!, wantedAt });
      });
      return loads;
    })().catch(() => null);
    if (!fresh) {
      for (const id of ids) this.inflight.set(id, round);
      void round.finally(() => {
        for (const id of ids) if (this.inflight.get(id) === round) this.inflight.delete(id);
      });
    }
    return round;
  }

  /** A report is due and no read carried it: a round of its own, which also refreshes what was wanted lately. */
  private flush(): void {
    // a read round since the timer was set may have carried everything: then there is nothing to send
    if (this.closed || !this.summaryOn() || !this.reports!.due) return;
    this.counters.reports++;
    void this.startRound([], false, true);
  }

  /** Stops reporting to the load summary and takes this instance's counts out of it (bounded by the fetch time-out). */
  async close(): Promise<void> {
    this.closed = true;
    await this.reports?.close();
  }

  private async readDirect(ids: readonly string[], signal?: AbortSignal): Promise<Map<string, ChannelLoad>> {
    this.counters.directReads++;
    this.counters.fetches++;
    const read = this.opts.store.readLoads(ids).catch(() => null);
    const loads = await abortable(within(this.opts.clock, read, this.fetchTimeoutMs), signal);
    if (loads) return loads;
    this.counters.fallbacks++;
    return new Map(ids.map((id) => [id, this.fallback(id)]));
  }

  /** This instance's own knowledge: its leases, its waiters, the cooldowns it set. Unknown = 0. */
  fallback(id: string): ChannelLoad {
    const cooling = this.opts.local.coolingMs(id);
    return {
      active: this.opts.local.active(id),
      waiting: this.opts.local.waiting(id),
      coolingDown: cooling > 0,
      cooldownRemainingMs: cooling,
    };
  }

  /** Local correction: this instance took (+1, when the store admitted it) or gave back (-1) a slot on the channel. */
  noteActive(id: string, change: 1 | -1): void {
    this.local.noteActive(id, change);
    if (this.reports && this.summaryOn()) this.reports.changed(id);
  }

  /**
   * A pass of this instance is about to try the channel (+1), or its try came back (-1): shown as taken meanwhile,
   * so concurrent passes spread out. Never part of a fetch's base.
   */
  reserve(id: string, change: 1 | -1): void {
    this.local.reserve(id, change);
  }

  /** Local correction: this instance registered (+1) or removed (-1) a waiter on the channel. */
  noteWaiter(id: string, change: 1 | -1): void {
    this.local.noteWaiter(id, change);
    if (this.reports && this.summaryOn()) this.reports.changed(id);
  }

  /**
   * The acquire script found the channel full: until the next fetch, this instance's view shows it at `max`
   * (other instances' slots are invisible to the cached snapshot otherwise).
   */
  noteFull(id: string, max: number): void {
    const entry = this.cache.get(id);
    if (entry) this.local.showAtLeast(id, entry, 'active', max);
  }

  /**
   * The channel's wait queue turned a waiter away: until the next fetch, this instance's view shows it at
   * `maxWaiting`, so its next waiters do not ask a queue that is known to be full.
   */
  noteQueueFull(id: string, maxWaiting: number): void {
    const entry = this.cache.get(id);
    if (entry) this.local.showAtLeast(id, entry, 'waiting', maxWaiting);
  }

  /** The acquire script (or this instance) found the channel cooling: later passes skip it until the next fetch. */
  noteCooling(id: string, remainingMs: number): void {
    const entry = this.cache.get(id);
    if (entry) entry.load = { ...entry.load, coolingDown: true, cooldownRemainingMs: remainingMs };
  }

  noteCooldownCleared(id: string): void {
    const entry = this.cache.get(id);
    if (entry) entry.load = { ...entry.load, coolingDown: false, cooldownRemainingMs: 0 };
  }
}
