/**
 * How loaded each candidate is, for ordering only: the acquire script alone decides, so nothing here can oversell.
 * Cached: the fleet's load summary read in coalesced rounds, corrected by this instance's own work in between.
 * Direct (`load_cache_enabled: false`): the channels' keys.
 */
import { abortable } from '../../core/abort.js';
import { within, type Clock } from '../../core/clock.js';
import { pushTo } from '../../core/collections.js';
import type { Settings } from '../../core/settings.js';
import type { ChannelLoad, SlotStore } from '../../store/store.js';
import { LocalCorrection, type Corrected } from './local-correction.js';
import { readRoundIds, reportRoundIds, type Watched } from './round-reads.js';
import { Semaphore } from './semaphore.js';
import { SummaryReports } from './summary-reports.js';

interface LocalState {
  active(channelId: string): number;
  waiting(channelId: string): number;
  /** Remaining cooldown this instance knows of, 0 when none. */
  coolingMs(channelId: string): number;
}

interface LoadViewOptions {
  store: SlotStore;
  clock: Clock;
  settings: () => Settings;
  local: LocalState;
  instanceId: () => string;
  /** Time-out of a fetch round, including the wait for a fetch slot. */
  fetchTimeoutMs?: number;
  maxConcurrentFetches?: number;
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
  /** Reads answered (in part) with this instance's own counts. */
  fallbacks: number;
  /** Store reads made: fetch rounds, fresh reads and direct reads. */
  fetches: number;
  /** Reads straight from the store with load_cache_enabled = false. */
  directReads: number;
  /** Rounds started only to put this instance's changes in, with no read waiting. */
  reports: number;
}

interface Entry extends Corrected, Watched {}

type Round = Promise<Map<string, ChannelLoad> | null>;

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
  };
  private readonly cache = new Map<string, Entry>();
  private readonly local = new LocalCorrection();
  private readonly inflight = new Map<string, Round>();
  private readonly freshInflight = new Map<string, Round>();
  private lastWantedAt = -Infinity;
  private readonly fetchSlots: Semaphore;
  private readonly fetchTimeoutMs: number;
  private readonly reports: SummaryReports;
  private closed = false;

  constructor(private readonly opts: LoadViewOptions) {
    this.fetchTimeoutMs = opts.fetchTimeoutMs ?? 3000;
    this.fetchSlots = new Semaphore(opts.maxConcurrentFetches ?? 2, opts.clock);
    this.reports = new SummaryReports({
      store: opts.store,
      clock: opts.clock,
      settings: opts.settings,
      instanceId: opts.instanceId,
      counts: (id) => this.local.own(id),
      flush: () => this.flush(),
      leaveTimeoutMs: this.fetchTimeoutMs,
    });
  }

  /** Whether reads come from the load summary, which every instance reads alike. */
  get sharedLoads(): boolean {
    return this.opts.settings().load_cache_enabled;
  }

  /**
   * The loads, synchronously, when every channel has a fresh cached entry; else undefined. Synchronous so a pass
   * orders and reserves in one step, seeing concurrent passes' reservations. `anyAge`: the last entry, however old.
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

  /** Loads of the given (bounded) channels. Never throws for store trouble; rejects only when `signal` aborts. */
  async read(ids: readonly string[], signal?: AbortSignal): Promise<Map<string, ChannelLoad>> {
    const result = new Map<string, ChannelLoad>();
    if (ids.length === 0) return result;
    if (!this.opts.settings().load_cache_enabled) return this.readDirect(ids, signal);
    const settings = this.opts.settings();
    const now = this.opts.clock.now();
    this.lastWantedAt = now;
    const stale: string[] = [];
    for (const id of ids) {
      const entry = this.cache.get(id);
      if (entry) entry.wantedAt = now;
      if (entry && now - entry.fetchedAt < settings.load_cache_ttl_ms)
        result.set(id, this.local.corrected(id, entry));
      else stale.push(id);
    }
    if (stale.length === 0) {
      this.counters.hits++;
      return result;
    }
    let fellBack = false;
    const rounds = [...this.roundsFor(stale)].map(async ([round, roundIds]) => {
      const loads = await round;
      for (const id of roundIds) {
        const entry = loads && this.cache.get(id);
        if (entry) result.set(id, this.local.corrected(id, entry));
        else {
          result.set(id, this.fallback(id));
          fellBack = true;
        }
      }
    });
    await abortable(Promise.all(rounds), signal);
    if (fellBack) this.counters.fallbacks++;
    return result;
  }

  /** The rounds that read the stale channels: those in flight, and one new round for the others. */
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
    } else this.counters.coalesced++;
    return waits;
  }

  /** Re-reads the channels now (coalesced per channel set) into the cache; null when the read failed. */
  async readFresh(ids: readonly string[], signal?: AbortSignal): Promise<Map<string, ChannelLoad> | null> {
    if (ids.length === 0) return new Map();
    const key = [...ids].sort().join('\u0000');
    let round = this.freshInflight.get(key);
    if (!round) {
      const started = (round = this.startRound([...ids], true));
      this.freshInflight.set(key, started);
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

  /** A detached round: a fetch slot, one exchange with the load summary, the cache filled; null on any failure. */
  private startRound(requested: string[], fresh: boolean, report = false): Round {
    if (fresh) this.counters.freshReads++;
    const now = this.opts.clock.now();
    const ttl = this.opts.settings().load_cache_ttl_ms;
    const ids = fresh
      ? requested
      : report
        ? reportRoundIds(this.cache, this.lastWantedAt, now, ttl)
        : readRoundIds(this.cache, requested, now, ttl);
    const deadline = now + this.fetchTimeoutMs;
    const round: Round = (async () => {
      if (!(await this.fetchSlots.acquire(this.fetchTimeoutMs))) {
        this.reports.missed(); // the reports it was to carry get another round
        return null;
      }
      if (this.closed) {
        this.fetchSlots.release(); // the leave on close is the last word to the summary
        return null;
      }
      this.counters.fetches++;
      // the base is where this instance's counters stand as the exchange (which reports them) goes out
      const bases = ids.map((id) => this.local.base(id));
      let read: Promise<Map<string, ChannelLoad>>;
      try {
        read = this.reports.send(ids, fresh);
      } catch (err) {
        read = Promise.reject(err as Error);
      }
      // the fetch slot is held until the store call itself settles, so slow reads never pile up past the bound
      const free = () => this.fetchSlots.release();
      void read.then(free, free);
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

  /** A report is due and no read carried it: a round of its own. */
  private flush(): void {
    if (this.closed || !this.opts.settings().load_cache_enabled || !this.reports.due) return;
    this.counters.reports++;
    void this.startRound([], false, true);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.reports.close();
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

  /** This instance's own knowledge: its leases, waiters and cooldowns. */
  fallback(id: string): ChannelLoad {
    const cooling = this.opts.local.coolingMs(id);
    return {
      active: this.opts.local.active(id),
      waiting: this.opts.local.waiting(id),
      coolingDown: cooling > 0,
      cooldownRemainingMs: cooling,
    };
  }

  /** Waiters on the channel as last shown (however old), or as this instance counts them if more: no store read. */
  shownWaiting(id: string): number {
    const entry = this.cache.get(id);
    const shown = entry ? this.local.corrected(id, entry).waiting : 0;
    return Math.max(shown, this.opts.local.waiting(id));
  }

  noteActive(id: string, change: 1 | -1): void {
    this.local.noteActive(id, change);
    this.reports.changed(id);
  }

  /** A pass is about to try the channel (+1), or its try came back (-1): shown as taken meanwhile. */
  reserve(id: string, change: 1 | -1): void {
    this.local.reserve(id, change);
  }

  noteWaiter(id: string, change: 1 | -1): void {
    this.local.noteWaiter(id, change);
    this.reports.changed(id);
  }

  /** The acquire script found the channel full: shown at `max` until the next read. */
  noteFull(id: string, max: number): void {
    const entry = this.cache.get(id);
    if (entry) this.local.showAtLeast(id, entry, 'active', max);
  }

  /** The channel's queue turned a waiter away: shown at `maxWaiting` until the next read. */
  noteQueueFull(id: string, maxWaiting: number): void {
    const entry = this.cache.get(id);
    if (entry) this.local.showAtLeast(id, entry, 'waiting', maxWaiting);
  }

  noteCooling(id: string, remainingMs: number): void {
    const entry = this.cache.get(id);
    if (entry) entry.load = { ...entry.load, coolingDown: true, cooldownRemainingMs: remainingMs };
  }

  noteCooldownCleared(id: string): void {
    const entry = this.cache.get(id);
    if (entry) entry.load = { ...entry.load, coolingDown: false, cooldownRemainingMs: 0 };
  }
}
