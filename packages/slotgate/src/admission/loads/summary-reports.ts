/**
 * This instance's side of the load summary (`SlotStore.exchangeLoads`, docs/admission.md "The load summary"): which
 * of its own counts changed since it last reported them, when to report them when no load read carries them, when to
 * renew its registration and sweep instances that stopped reporting, and when a full report must replace what the
 * summary holds of it (at first, after Redis lost its data, after the summary took it out as lapsed).
 *
 * A read round puts in whatever changed; a change with no read for `load_cache_ttl_ms` after it gets a round of its
 * own (which also reads, while passes ask for loads: load-view.ts). So another instance sees this one's change within
 * two TTLs (one to report, one of its own cache), and each instance sends about two exchanges per TTL at most whatever
 * the channel count (measured: 1.0–1.3 with 10 admissions/s per instance, bench fleetsim).
 */
import { within, type Clock, type Timer } from '../../core/clock.js';
import type { Settings } from '../../core/settings.js';
import type { ChannelLoad, LoadExchange, OwnCounts, SlotStore } from '../../store/store.js';

/**
 * The summary's readers share a snapshot of it up to a quarter of a load TTL old: so the fleet rebuilds it about four
 * times per TTL whatever its size, and a count reaches another instance's view at most a quarter TTL later than read
 * directly (a report waits up to one TTL, the reader's cache another).
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
  /** The channels where this instance holds or waits now (a full report names them). */
  held: () => Iterable<string>;
  /** Starts a round that carries the pending reports (with whatever it reads). */
  flush: () => void;
  /** The longest wait for the leave on close. */
  leaveTimeoutMs: number;
}

/** What one exchange took out of the pending reports: `settle` puts it back when the exchange failed. */
interface Taken {
  exchange: Omit<LoadExchange, 'read'>;
  dirty: readonly string[];
  full: boolean;
}

export class SummaryReports {
  private readonly dirty = new Set<string>();
  private full = true;
  private keptAt = -Infinity;
  private timer: Timer | undefined;
  private timerAt = Infinity;
  private closed = false;
  /** Whether the summary may hold non-zero counts of this instance (its registration must be kept alive). */
  private holding = false;
  private readonly unsubscribe: () => void;

  constructor(private readonly opts: SummaryReportsOptions) {
    this.unsubscribe = opts.store.onRestart(async () => this.resync());
  }

  /** One exchange: the pending reports in, the channels' loads out. */
  async send(read: string[], fresh: boolean): Promise<Map<string, ChannelLoad>> {
    const taken = this.take();
    const ttl = this.opts.settings().load_cache_ttl_ms;
    let loads: Map<string, ChannelLoad>;
    try {
      loads = await this.opts.store.exchangeLoads({
        ...taken.exchange,
        read,
        maxAgeMs: fresh ? 0 : Math.max(1, Math.floor(ttl / SNAPSHOT_AGE_DIVISOR)),
      });
    } catch (err) {
      this.settle(taken, false);
      throw err;
    }
    this.settle(taken, true);
    return loads;
  }

  /** This instance's count on the channel changed: it goes out with the next exchange, within one TTL. */
  changed(id: string): void {
    if (this.closed) return;
    this.dirty.add(id);
    this.schedule(this.opts.settings().load_cache_ttl_ms);
  }

  /** Redis lost its data, or the summary was off: the next exchange replaces everything (soon). */
  resync(): void {
    // the summary holds nothing of an instance that never reported anything: nothing to put back
    if (this.closed || (!this.holding && this.dirty.size === 0)) return;
    this.full = true;
    this.schedule(0);
  }

  /** The reports the next exchange carries, taken out of the pending ones. */
  private take(): Taken {
    const { clock, settings, counts, held, instanceId } = this.opts;
    const now = clock.now();
    const keepMs = settings().lease_ttl_ms;
    // the first counts of an instance the summary holds nothing of go as a full report: a change from an instance it
    // does not know is turned away (resync), which would cost one more exchange
    const full = this.full || (!this.holding && this.dirty.size > 0);
    const dirty = full ? [] : [...this.dirty];
    const ids = full ? [...new Set([...held(), ...this.dirty])] : dirty;
    const reported = new Map<string, OwnCounts>();
    for (const id of ids) {
      const c = counts(id);
      if (full && c.active <= 0 && c.waiting <= 0) continue;
      reported.set(id, c);
    }
    this.dirty.clear();
    this.full = false;
    // what this exchange carries needs no report of its own: a change made after it waits a TTL (or the next read)
    this.timer?.cancel();
    this.timer = undefined;
    this.timerAt = Infinity;
    // A full report of nothing, from an instance that never reported anything, has nothing to replace: a plain read.
    const idle = full && reported.size === 0 && !this.holding;
    this.holding ||= reported.size > 0;
    // a keep renews the registration (and tells whether the summary still knows this instance) every quarter of it
    const keep = this.holding && (full || now - this.keptAt >= keepMs / 4);
    if (keep) this.keptAt = now;
    return {
      exchange: {
        instanceId: instanceId(),
        mode: full && !idle ? 'full' : 'changes',
        counts: reported,
        ...(keep ? { keepMs } : {}),
      },
      dirty: full ? ids : dirty,
      full,
    };
  }

  /**
   * A round meant to carry the pending reports went out with nothing (it got no fetch slot in time): they are not lost,
   * but nothing else may be due to send them, so a round is scheduled again.
   */
  missed(): void {
    if (this.due) this.schedule(Math.max(RETRY_MS, this.opts.settings().load_cache_ttl_ms));
  }

  /** Whether a round now would put anything in, or renew the registration. */
  get due(): boolean {
    if (this.full || this.dirty.size > 0) return true;
    const { clock, settings } = this.opts;
    return this.holding && clock.now() - this.keptAt >= settings().lease_ttl_ms / 4;
  }

  /** The exchange came back, or failed (`ok` false). */
  private settle(taken: Taken, ok: boolean): void {
    if (!ok) {
      // unknown whether it was put in: the counts are absolute, so sending them again is exact either way
      for (const id of taken.dirty) this.dirty.add(id);
      if (taken.full) this.full = true;
      if (taken.exchange.keepMs !== undefined) {
        this.keptAt = -Infinity;
        // Its keep may have registered this instance afresh where the summary had lost it (the reply, saying so, is
        // what was lost): the next keep would then find it known, and the counts it does not name would stay out of
        // the summary for good. Only a full report is right whatever happened.
        if (this.holding) this.full = true;
      }
      this.schedule(Math.max(RETRY_MS, this.opts.settings().load_cache_ttl_ms));
      return;
    }
    // the registration must outlive the counts the summary holds of this instance
    if (this.holding)
      this.schedule(Math.max(0, this.keptAt + this.opts.settings().lease_ttl_ms / 4 - this.opts.clock.now()));
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
      // A timer may fire a little before the clock says its time has come (Node counts it from the event loop's
      // cached time, which lags behind on a busy loop): a keep not due yet by the clock is put off, never dropped.
      if (!this.due) {
        if (this.holding && !this.closed) {
          // (at most a quarter lease TTL: a clock set back must not put the keep off for longer)
          const quarter = this.opts.settings().lease_ttl_ms / 4;
          this.schedule(Math.max(1, Math.min(quarter, this.keptAt + quarter - this.opts.clock.now())));
        }
        return;
      }
      this.opts.flush();
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
