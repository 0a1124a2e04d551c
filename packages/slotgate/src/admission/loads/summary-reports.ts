/**
 * This instance's side of the load summary: its changed counts go out with the next read round, or a round of their
 * own within a TTL. Counts are sent whole, so the next report makes good a failed one.
 */
import { within, type Clock, type Timer } from '../../core/clock.js';
import type { Settings } from '../../core/settings.js';
import type { ChannelLoad, LoadExchange, OwnCounts, SlotStore } from '../../store/store.js';

/** Readers share a summary snapshot up to a quarter TTL old: the fleet rebuilds it about four times per TTL. */
const SNAPSHOT_AGE_DIVISOR = 4;
/** After a failed exchange, the next report waits at least this long. */
const RETRY_MS = 1000;

interface SummaryReportsOptions {
  store: SlotStore;
  clock: Clock;
  settings: () => Settings;
  instanceId: () => string;
  counts: (id: string) => OwnCounts;
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
  /** Whether the summary may hold non-zero counts of this instance (their lapse time is renewed). */
  private holding = false;
  private readonly unsubscribe: () => void;

  constructor(private readonly opts: SummaryReportsOptions) {
    // Redis lost its data: the counts go back in with the next keep
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

  /** This instance's count on the channel changed: it goes out with the next exchange, within a TTL. */
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

  /** A round meant to carry the reports got no fetch slot in time: another is scheduled. */
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
      // a timer may fire a little early (Node counts from the loop's cached time): a keep not due yet is put off
      if (this.holding) {
        const quarter = this.keepMs / 4;
        this.schedule(Math.max(1, Math.min(quarter, this.keptAt + quarter - this.opts.clock.now())));
      }
    }, ms);
  }

  /** Stops reporting and takes this instance's counts out of the summary. Nothing is sent after it. */
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
