/**
 * This instance's side of the load summary (`SlotStore.exchangeLoads`): which of its own counts changed since it
 * last reported them, when to report them when no load read carries them, and when to renew its counts' lapse time.
 * A read round puts in whatever changed; a change with no read for `load_cache_ttl_ms` gets a round of its own. So
 * another instance sees this one's change within two TTLs, and an instance sends about two exchanges per TTL at most,
 * whatever the channel count. The store keeps an instance's whole counts and writes them whole, so a report that
 * failed, or a summary that lost its data, is made good by the next report.
 */
import { within, type Clock, type Timer } from '../../core/clock.js';
import type { Settings } from '../../core/settings.js';
import type { ChannelLoad, LoadExchange, OwnCounts, SlotStore } from '../../store/store.js';

/**
 * Readers share a snapshot of the summary up to a quarter of a load TTL old: the fleet rebuilds it about four times
 * per TTL whatever its size, and a count reaches another instance at most a quarter TTL later than read directly.
 */
const SNAPSHOT_AGE_DIVISOR = 4;
/** After a failed exchange, the next report waits at least this long. */
const RETRY_MS = 1000;

export interface SummaryReportsOptions {
  store: SlotStore;
  clock: Clock;
  settings: () => Settings;
  instanceId: () => string;
  /** This instance's own counts on the channel now. */
  counts: (id: string) => OwnCounts;
  /** Starts a round that carries the pending reports (with whatever it reads). */
  flush: () => void;
  /** The longest wait for the leave on close. */
  leaveTimeoutMs: number;
}

export class SummaryReports {
  private readonly dirty = new Set<string>();
  private keptAt = -Infinity;
  private timer: Timer | undefined;
  private timerAt = Infinity;
  private closed = false;
  /** Whether the summary may hold non-zero counts of this instance (their lapse time must be renewed). */
  private holding = false;
  private readonly unsubscribe: () => void;

  constructor(private readonly opts: SummaryReportsOptions) {
    // Redis lost its data: this instance's counts go back in soon, with its next keep
    this.unsubscribe = opts.store.onRestart(async () => {
      if (!this.holding) return;
      this.keptAt = -Infinity;
      this.schedule(0);
    });
  }

  private get keepMs(): number {
    return this.opts.settings().lease_ttl_ms;
  }

  /** One exchange: the pending reports in, the channels' loads out. */
  async send(read: string[], fresh: boolean): Promise<Map<string, ChannelLoad>> {
    const { exchange, dirty } = this.take();
    const ttl = this.opts.settings().load_cache_ttl_ms;
    try {
      const maxAgeMs = fresh ? 0 : Math.max(1, Math.floor(ttl / SNAPSHOT_AGE_DIVISOR));
      const loads = await this.opts.store.exchangeLoads({ ...exchange, read, maxAgeMs });
      // the counts must not lapse while the summary holds them
      if (this.holding) this.schedule(Math.max(0, this.keptAt + this.keepMs / 4 - this.opts.clock.now()));
      return loads;
    } catch (err) {
      // unknown whether it was put in: the counts are absolute, so sending them again is exact either way
      for (const id of dirty) this.dirty.add(id);
      if (exchange.keepMs !== undefined) this.keptAt = -Infinity;
      this.schedule(Math.max(RETRY_MS, ttl));
      throw err;
    }
  }

  /** This instance's count on the channel changed: it goes out with the next exchange, within one TTL. */
  changed(id: string): void {
    if (this.closed) return;
    this.dirty.add(id);
    this.schedule(this.opts.settings().load_cache_ttl_ms);
  }

  /** The reports the next exchange carries, taken out of the pending ones. */
  private take(): { exchange: Omit<LoadExchange, 'read'>; dirty: string[] } {
    const now = this.opts.clock.now();
    const dirty = [...this.dirty];
    const counts = new Map(dirty.map((id): [string, OwnCounts] => [id, this.opts.counts(id)]));
    this.dirty.clear();
    this.timer?.cancel();
    this.timer = undefined;
    this.timerAt = Infinity;
    this.holding ||= [...counts.values()].some((c) => c.active > 0 || c.waiting > 0);
    // a keep renews the counts' lapse time, every quarter of it
    const keep = this.holding && now - this.keptAt >= this.keepMs / 4;
    if (keep) this.keptAt = now;
    const keepMs = keep ? { keepMs: this.keepMs } : {};
    return { exchange: { instanceId: this.opts.instanceId(), mode: 'changes', counts, ...keepMs }, dirty };
  }

  /** A round meant to carry the pending reports got no fetch slot in time: another is scheduled. */
  missed(): void {
    if (this.due) this.schedule(Math.max(RETRY_MS, this.opts.settings().load_cache_ttl_ms));
  }

  /** Whether a round now would put anything in, or renew the lapse time. */
  get due(): boolean {
    return this.dirty.size > 0 || (this.holding && this.opts.clock.now() - this.keptAt >= this.keepMs / 4);
  }

  private schedule(ms: number): void {
    if (this.closed) return;
    const at = this.opts.clock.now() + ms;
    if (this.timer && this.timerAt <= at) return;
    this.timer?.cancel();
    this.timerAt = at;
    this.timer = this.opts.clock.setTimer(() => {
      this.timer = undefined;
      this.timerAt = Infinity;
      if (this.due) return this.opts.flush();
      // A timer may fire a little before the clock says its time has come (Node counts from the event loop's cached
      // time): a keep not due yet is put off, at most a quarter lease TTL, never dropped.
      if (this.holding) {
        const quarter = this.keepMs / 4;
        this.schedule(Math.max(1, Math.min(quarter, this.keptAt + quarter - this.opts.clock.now())));
      }
    }, ms);
  }

  /**
   * Stops reporting and takes this instance's counts out of the summary when it may hold any (bounded by
   * `leaveTimeoutMs`). Nothing is sent after it: a round that has not sent yet sends nothing (the view checks).
   */
  async close(): Promise<void> {
    this.closed = true;
    this.unsubscribe();
    this.timer?.cancel();
    this.timer = undefined;
    if (!this.holding) return;
    const { store, instanceId, clock, leaveTimeoutMs } = this.opts;
    const left = store.exchangeLoads({
      instanceId: instanceId(),
      mode: 'leave',
      counts: new Map(),
      read: [],
    });
    await within(
      clock,
      left.catch(() => undefined),
      leaveTimeoutMs,
    );
  }
}
