/**
 * The admission engine (spec §2, §5): picks the best channel of a candidate set, takes a slot with one atomic store
 * call, waits briefly in a bounded queue when everything is full, and fails with a typed error it cannot serve.
 */
import { systemClock, type Clock } from '../core/clock.js';
import { isBounded, priorityOf, type Candidate } from '../core/channel.js';
import { CapacityError, NoChannelError, SlotgateError, StoreUnavailableError } from '../core/errors.js';
import { jitter, nextInterval } from '../core/backoff.js';
import { LazyOrder, tiers, weightedPick, type Random } from '../core/order.js';
import { admissionSettings, type Settings, type SettingsUpdate } from '../core/settings.js';
import { LeaseManager, type Lease, type LeaseEvent } from '../store/leases.js';
import type { AcquireTarget, ChannelLoad, SlotStore } from '../store/store.js';
import { LoadView, abortable } from './load-view.js';
import { StatsRecorder, type AdmissionStats, type ChannelStats, type Outcome } from './stats.js';
import { LocalWaiters, type Waker } from './waiters.js';

export interface AdmissionOptions {
  store: SlotStore;
  /** Initial settings (validated; unknown keys or out-of-range values throw). */
  settings?: SettingsUpdate;
  clock?: Clock;
  random?: Random;
  instanceId?: string;
  /** Load fetch time-out, including the wait for a fetch slot. @default 3000 */
  loadFetchTimeoutMs?: number;
  /** Load fetch rounds at once. @default 2 */
  maxConcurrentFetches?: number;
  onEvent?: (event: AdmissionEvent) => void;
  /** Called once per acquire with its outcome and latency (metrics exporters observe histograms here). */
  onAdmission?: (admission: AdmissionRecord) => void;
}

export interface AdmissionRecord {
  outcome: Outcome;
  latencyMs: number;
  /** Time in the wait queue, when the pass waited. */
  waitedMs?: number;
}

export type AdmissionEvent = LeaseEvent | { type: 'settings_changed'; settings: Settings };

export interface AcquireRequest<C extends Candidate> {
  candidates: readonly C[];
  /** Abort while waiting → CapacityError reason 'aborted'. */
  signal?: AbortSignal;
  /** Channel ids to skip in this pass (already tried by the caller's retry chain). */
  exclude?: ReadonlySet<string>;
}

export interface Ticket<C extends Candidate> {
  channel: C;
  /** The lease token for a bounded channel; undefined for an unlimited one. */
  token: string | undefined;
  /** Time spent in the wait queue (0 when admitted at once). */
  waitedMs: number;
  /**
   * Gives the slot back exactly once (idempotent), detached from any request cancellation. `handoff: false` when the
   * work it guarded may still be running where the caller cannot see it (an upstream call aborted mid-flight): the
   * slot then goes back through Redis, never straight to another request of this instance in the same turn.
   */
  release(options?: { handoff?: boolean }): Promise<void>;
}

const WAITER_TTL_MARGIN_MS = 2000;
/** The abort reason of a waiter's nap cut short by a local release (a constant: no DOMException per wake-up). */
const WOKEN = Object.freeze({ woken: true });

interface Prepared<C extends Candidate> {
  /** A copy of the array it was made from, and what each element looked like, to detect a caller mutating them. */
  source: readonly C[];
  shape: readonly Shape[];
  candidates: C[];
  byTier: C[][];
  bounded: C[];
  ids: string[];
  /** Bounded channels by id, with their tier's index in byTier (for handoffs). */
  tierOf: Map<string, { channel: C; tier: number }>;
}

/**
 * Rejects a candidate the pass could not use correctly, naming the field, what it expects and what came in (checked
 * when a candidate set is prepared, so a set passed again costs nothing).
 */
function validateCandidate(c: Candidate): void {
  const bad = (field: string, expected: string, got: unknown) =>
    new TypeError(
      `Expected candidate \`${field}\` to be ${expected}, got ${JSON.stringify(got) ?? String(got)}`,
    );
  if (typeof c !== 'object' || c === null) throw bad('(candidate)', 'an object', c);
  if (typeof c.id !== 'string' || c.id.length === 0) throw bad('id', 'a non-empty string', c.id);
  const int = (v: unknown, min: number) => typeof v === 'number' && Number.isInteger(v) && v >= min;
  if (c.maxConcurrency !== undefined && !int(c.maxConcurrency, -Infinity)) {
    throw bad(`maxConcurrency of ${c.id}`, 'an integer (≤ 0 = unlimited)', c.maxConcurrency);
  }
  if (c.maxWaiting !== undefined && !int(c.maxWaiting, 1)) {
    throw bad(`maxWaiting of ${c.id}`, 'an integer ≥ 1', c.maxWaiting);
  }
  if (c.priority !== undefined && !(typeof c.priority === 'number' && Number.isFinite(c.priority))) {
    throw bad(`priority of ${c.id}`, 'a finite number', c.priority);
  }
  if (c.weight !== undefined && !(typeof c.weight === 'number' && Number.isFinite(c.weight))) {
    throw bad(`weight of ${c.id}`, 'a finite number (≤ 0 = last resort)', c.weight);
  }
}

/** The fields the prepared structures depend on (weights and maxWaiting are read live). */
interface Shape {
  id: string;
  enabled: boolean;
  max: number;
  priority: number;
}

function shapeOf(c: Candidate): Shape {
  return { id: c.id, enabled: c.enabled !== false, max: c.maxConcurrency ?? 0, priority: c.priority ?? 0 };
}

function unchanged<C extends Candidate>(p: Prepared<C>, given: readonly C[]): boolean {
  if (p.source.length !== given.length) return false;
  for (let i = 0; i < given.length; i++) {
    const c = given[i]!;
    const s = p.shape[i]!;
    if (
      p.source[i] !== c ||
      s.id !== c.id ||
      s.enabled !== (c.enabled !== false) ||
      s.max !== (c.maxConcurrency ?? 0) ||
      s.priority !== (c.priority ?? 0)
    ) {
      return false;
    }
  }
  return true;
}

/** Queues tried by one waiter before it gives up with queue_full. */
const WAIT_QUEUE_TRIES = 3;

/**
 * Wait candidates, emptiest queue first by the load view (relative to its size; stable for ties), so concurrent
 * passes spread their waiters instead of filling one queue and getting queue_full.
 */
function byFewerWaiters<C extends Candidate>(pool: C[], loads: ReadonlyMap<string, ChannelLoad>): C[] {
  const ratio = (c: C) => (loads.get(c.id)?.waiting ?? 0) / (c.maxWaiting ?? c.maxConcurrency!);
  return pool.sort((a, b) => ratio(a) - ratio(b));
}

/** Whether the load view shows a free slot on a bounded channel. */
function hasRoom(c: Candidate, loads: ReadonlyMap<string, ChannelLoad>): boolean {
  const load = loads.get(c.id);
  return !load || load.active < c.maxConcurrency!;
}
const DEFAULT_RETRY_AFTER_MS = 1000;

export interface Admission {
  acquire<C extends Candidate>(request: AcquireRequest<C>): Promise<Ticket<C>>;
  /** Starts a cooldown: in the store for a bounded (or unknown) channel, in process memory for an unlimited one. */
  cooldown(channel: string | Candidate, opts?: { ms?: number; reason?: string }): Promise<void>;
  clearCooldown(channel: string | Candidate): Promise<void>;
  /** Validates the whole update (throws SettingsError and changes nothing on bad input) and applies it. */
  updateSettings(update: unknown): Settings;
  readonly settings: Settings;
  readonly instanceId: string;
  /** Live loads straight from the store (admin views); unlimited channels from this process. */
  readLoads(channels: readonly Candidate[]): Promise<Map<string, ChannelLoad>>;
  /**
   * Loads through the load view: cached snapshots with this instance's corrections, fetched (coalesced) when stale,
   * in-memory fallback on store trouble. Free while the cache is warm; for dashboards and metrics.
   */
  viewLoads(channels: readonly Candidate[]): Promise<Map<string, ChannelLoad>>;
  stats(): AdmissionStats;
  close(): Promise<void>;
}

export function createAdmission(options: AdmissionOptions): Admission {
  return new AdmissionEngine(options);
}

export class AdmissionEngine implements Admission {
  readonly instanceId: string;
  private current: Settings;
  private readonly store: SlotStore;
  private readonly clock: Clock;
  private readonly random: Random;
  private readonly leases: LeaseManager;
  private readonly view: LoadView;
  private readonly waiters = new LocalWaiters();
  private readonly recorder = new StatsRecorder();
  private readonly emit: (event: AdmissionEvent) => void;
  private readonly onAdmission: ((record: AdmissionRecord) => void) | undefined;
  /** Cooldowns this instance knows of: the only record for unlimited channels, a hint for bounded ones. */
  private readonly localCooldowns = new Map<string, number>();
  /** Whether each channel id seen so far is bounded (for cooldown(id) given only an id). */
  private readonly known = new Map<string, boolean>();
  private readonly unlimitedActive = new Map<string, number>();
  private readonly prepared = new WeakMap<readonly Candidate[], Prepared<Candidate>>();
  private closed = false;

  constructor(options: AdmissionOptions) {
    this.current = admissionSettings.merge(admissionSettings.defaults, options.settings ?? {});
    this.store = options.store;
    this.clock = options.clock ?? systemClock;
    this.random = options.random ?? Math.random;
    this.emit = options.onEvent ?? (() => {});
    this.onAdmission = options.onAdmission;
    this.leases = new LeaseManager({
      store: this.store,
      clock: this.clock,
      leaseTtlMs: () => this.current.lease_ttl_ms,
      onEvent: (event) => {
        if (event.type === 'lease_lost') {
          this.recorder.leasesLost++;
          this.view.noteActive(event.channelId, -1);
        }
        this.emit(event);
      },
      ...(options.instanceId ? { instanceId: options.instanceId } : {}),
    });
    this.instanceId = this.leases.instanceId;
    this.view = new LoadView({
      store: this.store,
      clock: this.clock,
      settings: () => this.current,
      local: {
        active: (id) => this.leases.localCount(id),
        waiting: (id) => this.waiters.count(id),
        coolingMs: (id) => this.localCoolingMs(id),
      },
      ...(options.loadFetchTimeoutMs !== undefined ? { fetchTimeoutMs: options.loadFetchTimeoutMs } : {}),
      ...(options.maxConcurrentFetches !== undefined
        ? { maxConcurrentFetches: options.maxConcurrentFetches }
        : {}),
    });
  }

  get settings(): Settings {
    return this.current;
  }

  /** The load view, for tests and the admin API. */
  get loadView(): LoadView {
    return this.view;
  }

  updateSettings(update: unknown): Settings {
    const next = admissionSettings.merge(this.current, update);
    this.current = next;
    this.emit({ type: 'settings_changed', settings: next });
    return next;
  }

  async acquire<C extends Candidate>(request: AcquireRequest<C>): Promise<Ticket<C>> {
    const started = this.clock.now();
    let outcome: Outcome | undefined = 'acquired';
    let waitedMs: number | undefined;
    try {
      const ticket = await this.pass(request, started);
      if (ticket.waitedMs > 0) waitedMs = ticket.waitedMs;
      return ticket;
    } catch (err) {
      if (err instanceof CapacityError) outcome = `capacity_${err.reason}`;
      else if (err instanceof StoreUnavailableError) outcome = 'store_unavailable';
      else if (err instanceof NoChannelError) outcome = 'no_channel';
      else outcome = undefined; // not an admission outcome: a bug, surfaced as it is
      throw err;
    } finally {
      if (outcome !== undefined) {
        const latencyMs = this.clock.now() - started;
        this.recorder.outcomes[outcome]++;
        this.recorder.admissionLatency.observe(latencyMs);
        this.onAdmission?.({ outcome, latencyMs, ...(waitedMs !== undefined ? { waitedMs } : {}) });
      }
    }
  }

  private async pass<C extends Candidate>(request: AcquireRequest<C>, started: number): Promise<Ticket<C>> {
    if (this.closed) throw new StoreUnavailableError('acquire', 'the admission engine is closed');
    const { signal } = request;
    const prepared = this.prepare(request);
    const { candidates, byTier, bounded, ids } = prepared;
    if (candidates.length === 0) throw new NoChannelError();
    const settings = this.current;

    // No bounded channel: weighted random in the highest tier with a channel not cooling, zero store commands.
    if (bounded.length === 0) {
      for (const tier of byTier) {
        const pick = weightedPick(
          tier.filter((c) => !this.isCooling(c)),
          this.random,
        );
        if (pick) return this.unlimitedTicket(pick);
      }
      throw this.capacityError('full', candidates, [], settings);
    }

    // A slot this instance released in this turn on a channel of the first tier is taken over before any load read:
    // nothing ranks above that tier, and the handoff needs no load (cooling: the last snapshot and local cooldowns).
    // (With the cache off, the rollback mode, every selection reads Redis first, as before the load view.)
    let firstTierChecked = false;
    if (settings.slot_handoff_enabled && settings.load_cache_enabled && this.leases.hasHandoffs) {
      const handed = this.takeHandoff(prepared, this.view.peek(ids, false, true), (t) => t === 0, 0, signal);
      if (handed) return handed;
      firstTierChecked = true;
    }
    let loads = this.view.peek(ids);
    if (!loads) {
      firstTierChecked = false; // slots may have been released while the read was under way
      const read = await this.withAbort(this.view.read(ids), signal);
      // Peeked again after the wait: the passes that waited for the same fetch resume one after another, and each
      // must see the slots the ones before it just reserved (the read's result was built before any of them ran).
      loads = this.view.peek(ids, false) ?? read;
    }
    let budget = settings.max_acquire_attempts;
    /** Channels a waiter could queue on: found full, or skipped for lack of budget (never cooling ones). */
    const waitPool = new Set<C>();
    const saturated: C[] = [];
    // A store failure fails bounded channels closed, but the walk goes on to admit an unlimited one (I4).
    let storeDown: StoreUnavailableError | undefined;

    for (let t = 0; t < byTier.length; t++) {
      const tier = byTier[t]!;
      // A slot this instance released in this turn, on a channel of this tier: taken over, no store command.
      // (The first tier was looked at before the loads, with no wait since: not twice.)
      if (
        settings.slot_handoff_enabled &&
        this.leases.hasHandoffs &&
        !storeDown &&
        !(t === 0 && firstTierChecked)
      ) {
        const handed = this.takeHandoff(prepared, loads, (tierOf) => tierOf === t, 0, signal);
        if (handed) return handed;
      }
      let order = this.orderTier(tier, loads);
      // (With the cache off every read is already fresh: no second read.)
      if (order.size === 0 && settings.load_cache_enabled && !storeDown) {
        const tierBounded = tier.filter(isBounded);
        if (tierBounded.some((c) => this.isCooling(c, loads))) {
          const fresh = await this.withAbort(this.view.readFresh(tierBounded.map((c) => c.id)), signal);
          if (fresh) {
            for (const [id, load] of fresh) loads.set(id, load);
            order = this.orderTier(tier, loads);
          }
        }
      }

      let c = order.next();
      while (c) {
        if (!isBounded(c)) return this.unlimitedTicket(c);
        if (storeDown || budget <= 0) {
          if (!storeDown) waitPool.add(c);
          c = order.next();
          continue;
        }
        // A run of bounded channels tried in one store call, as far as the budget and the store allow.
        // It stops after the second channel the load view shows room on (one spare for a stale view); with every
        // channel full by the view it carries the whole remaining budget, saving round trips.
        const batch: C[] = [c];
        const room = Math.min(budget, this.store.maxChannelsPerAcquire);
        let roomy = hasRoom(c, loads) ? 1 : 0;
        c = undefined;
        while (batch.length < room && roomy < 2) {
          const next = order.next();
          if (!next || !isBounded(next)) {
            c = next; // an unlimited channel (or the end) comes after this batch
            break;
          }
          batch.push(next);
          if (hasRoom(next, loads)) roomy++;
        }
        // Concurrent passes of this instance see the slot this pass expects to take, so they spread out.
        const expected = batch.find((b) => hasRoom(b, loads));
        if (expected) this.view.reserve(expected.id, 1);
        let outcome;
        try {
          outcome = await this.tryAcquire(batch, settings);
        } catch (err) {
          if (!(err instanceof StoreUnavailableError)) throw err;
          storeDown = err;
          c ??= order.next();
          continue;
        } finally {
          if (expected) this.view.reserve(expected.id, -1);
        }
        if (signal?.aborted) {
          if (outcome.lease) void this.leases.release(outcome.lease);
          throw this.capacityError('aborted', candidates, saturated, settings);
        }
        budget -= outcome.replies.length;
        outcome.replies.forEach((reply, k) => {
          const channel = batch[k]!;
          if (reply === 'full') {
            saturated.push(channel);
            waitPool.add(channel);
            this.view.noteFull(channel.id, channel.maxConcurrency!);
            loads.set(channel.id, { ...loads.get(channel.id)!, active: channel.maxConcurrency! });
          } else if (reply === 'cooling') {
            this.view.noteCooling(channel.id, settings.load_cache_ttl_ms);
          }
        });
        if (outcome.lease) {
          return this.boundedTicket(batch[outcome.replies.length - 1]!, outcome.lease, 0, signal);
        }
        c ??= order.next();
      }
    }

    if (storeDown) throw storeDown;
    if (waitPool.size > 0 && settings.wait_enabled && settings.wait_timeout_ms > 0) {
      return this.wait(byFewerWaiters([...waitPool], loads), prepared, saturated, started, settings, signal);
    }
    throw this.capacityError('full', candidates, saturated, settings);
  }

  /**
   * The candidate set's derived structures. A set passed again without `exclude` (the gateway passes the same array
   * for every request of a (group, model)) is prepared once and reused while its elements are the same objects in
   * the same order — checked on every call, so a caller that mutates its array is never served a stale copy.
   */
  private prepare<C extends Candidate>(request: AcquireRequest<C>): Prepared<C> {
    const { candidates: given, exclude } = request;
    const cacheable = !exclude || exclude.size === 0;
    if (cacheable) {
      const hit = this.prepared.get(given) as Prepared<C> | undefined;
      if (hit && unchanged(hit, given)) return hit;
    }
    for (const c of given) validateCandidate(c);
    const candidates = given.filter((c) => c.enabled !== false && !exclude?.has(c.id));
    for (const c of candidates) this.known.set(c.id, isBounded(c));
    const bounded = candidates.filter(isBounded);
    const prepared: Prepared<C> = {
      source: [...given],
      shape: given.map(shapeOf),
      candidates,
      byTier: tiers(candidates),
      bounded,
      ids: bounded.map((c) => c.id),
      tierOf: new Map(),
    };
    prepared.byTier.forEach((tier, i) => {
      for (const c of tier) if (isBounded(c)) prepared.tierOf.set(c.id, { channel: c, tier: i });
    });
    if (cacheable) this.prepared.set(given, prepared);
    return prepared;
  }

  /** Drops cooling channels; the rest in order of load rate with a weighted shuffle among equal loads, lazily. */
  private orderTier<C extends Candidate>(tier: readonly C[], loads: Map<string, ChannelLoad>): LazyOrder<C> {
    const usable = tier.filter((c) => !this.isCooling(c, loads));
    return new LazyOrder(
      usable,
      (c) => {
        if (!isBounded(c)) return 0;
        const load = loads.get(c.id);
        return load ? (load.active + load.waiting) / c.maxConcurrency! : 0;
      },
      this.random,
    );
  }

  private async tryAcquire<C extends Candidate>(batch: readonly C[], settings: Settings) {
    const targets: AcquireTarget[] = batch.map((c) => ({ channelId: c.id, max: c.maxConcurrency! }));
    this.recorder.acquireCalls++;
    const outcome = await this.leases.acquireFirst(targets, settings.cooldown_enabled);
    this.recorder.acquireAttempts += outcome.replies.length;
    return outcome;
  }

  /**
   * Waits on the first of `pool` whose queue has room (at most WAIT_QUEUE_TRIES registrations, emptiest queue by the
   * load view first), then polls until a slot comes free, the deadline passes or the caller aborts.
   */
  private async wait<C extends Candidate>(
    pool: readonly C[],
    prepared: Prepared<C>,
    saturated: readonly C[],
    started: number,
    settings: Settings,
    signal?: AbortSignal,
  ): Promise<Ticket<C>> {
    const { candidates } = prepared;
    let channel: C | undefined;
    let token = '';
    for (const option of pool.slice(0, WAIT_QUEUE_TRIES)) {
      if (signal?.aborted) throw this.capacityError('aborted', candidates, saturated, settings, option);
      const maxWaiting =
        option.maxWaiting ??
        (settings.max_waiting_per_channel > 0 ? settings.max_waiting_per_channel : option.maxConcurrency!);
      token = this.leases.nextToken();
      // Counted before the call, so concurrent passes of this instance already see this place as taken.
      this.view.noteWaiter(option.id, 1);
      let registered = false;
      try {
        registered = await this.store.registerWaiter(
          option.id,
          token,
          maxWaiting,
          settings.wait_timeout_ms + WAITER_TTL_MARGIN_MS,
        );
      } finally {
        if (!registered) this.view.noteWaiter(option.id, -1);
      }
      if (registered) {
        channel = option;
        break;
      }
    }
    if (!channel) throw this.capacityError('queue_full', candidates, saturated, settings, pool[0]);

    const waitStart = this.clock.now();
    const deadline = waitStart + settings.wait_timeout_ms;
    let napping: AbortController | undefined;
    const waker: Waker = {
      wake: () => {
        if (!napping) return false;
        napping.abort(WOKEN);
        return true;
      },
    };
    const listensTo = candidates.filter(isBounded).map((c) => c.id);
    this.waiters.add(channel.id, listensTo, waker);
    try {
      let interval = settings.wait_interval_ms;
      for (;;) {
        const remaining = deadline - this.clock.now();
        // An abort that came while the last attempt was in flight has already fired: no listener would see it.
        if (signal?.aborted) throw this.capacityError('aborted', candidates, saturated, settings, channel);
        if (remaining > 0) {
          napping = new AbortController();
          const nap = napping;
          const onAbort = () => nap.abort(signal?.reason);
          signal?.addEventListener('abort', onAbort, { once: true });
          try {
            await this.clock.sleep(Math.min(jitter(interval, this.random), remaining), nap.signal);
          } catch {
            // woken by a local release or by the caller's abort
          } finally {
            signal?.removeEventListener('abort', onAbort);
            napping = undefined;
          }
        }
        if (signal?.aborted) throw this.capacityError('aborted', candidates, saturated, settings, channel);
        const unlimited = this.firstUsableUnlimited(candidates);
        if (unlimited) return this.unlimitedTicket(unlimited);
        if (settings.slot_handoff_enabled && this.leases.hasHandoffs) {
          const waited = this.clock.now() - waitStart;
          const handed = this.takeHandoff(prepared, this.view.peek(prepared.ids), () => true, waited, signal);
          if (handed) {
            this.recorder.waitTime.observe(waited);
            return handed;
          }
        }
        const targets = await this.pollTargets(candidates, channel);
        const outcome = await this.tryAcquire(targets, settings);
        outcome.replies.forEach((reply, k) => {
          const target = targets[k]!;
          if (reply === 'full') this.view.noteFull(target.id, target.maxConcurrency!);
          else if (reply === 'cooling') this.view.noteCooling(target.id, settings.load_cache_ttl_ms);
        });
        if (outcome.lease) {
          const waited = this.clock.now() - waitStart;
          this.recorder.waitTime.observe(waited);
          return this.boundedTicket(targets[outcome.replies.length - 1]!, outcome.lease, waited, signal);
        }
        if (this.clock.now() >= deadline) {
          throw this.capacityError('wait_timeout', candidates, saturated, settings, channel);
        }
        interval = nextInterval(interval, settings.wait_interval_ms);
      }
    } catch (err) {
      if (!(err instanceof SlotgateError)) throw err;
      if (err instanceof CapacityError) this.recorder.waitTime.observe(this.clock.now() - waitStart);
      throw err;
    } finally {
      this.waiters.remove(channel.id, listensTo, waker);
      this.view.noteWaiter(channel.id, -1);
      void this.store.unregisterWaiter(channel.id, token).catch(() => {
        // the registration expires by its score; nothing drifts
      });
    }
  }

  /**
   * What one poll tries, in one store call: the channel the waiter is registered with (its place in that queue), then
   * the channel the load view ranks best if it shows room there (a slot may have come free on another candidate).
   * Reading the view is free while its snapshot is cached, so a poll stays one script call.
   */
  private async pollTargets<C extends Candidate>(candidates: readonly C[], registeredOn: C): Promise<C[]> {
    const bounded = candidates.filter(isBounded);
    // With the cache off (rollback mode) a view read is a full store read: polls try their own channel only.
    if (bounded.length === 1 || this.store.maxChannelsPerAcquire < 2 || !this.current.load_cache_enabled) {
      return [registeredOn];
    }
    const ids = bounded.map((c) => c.id);
    let loads = this.view.peek(ids);
    if (!loads) {
      const read = await this.view.read(ids);
      loads = this.view.peek(ids, false) ?? read; // as in the pass: see what waiters resumed before this one reserved
    }
    let best: C | undefined;
    let bestRate = Infinity;
    for (const c of bounded) {
      const load = loads.get(c.id);
      if (c === registeredOn || !load || this.isCooling(c, loads) || !hasRoom(c, loads)) continue;
      const rate = (load.active + load.waiting) / c.maxConcurrency!;
      // higher priority first, then lower load
      if (
        !best ||
        priorityOf(c) > priorityOf(best) ||
        (priorityOf(c) === priorityOf(best) && rate < bestRate)
      ) {
        best = c;
        bestRate = rate;
      }
    }
    return best ? [registeredOn, best] : [registeredOn];
  }

  private firstUsableUnlimited<C extends Candidate>(candidates: readonly C[]): C | undefined {
    return candidates.find((c) => !isBounded(c) && !this.isCooling(c));
  }

  /**
   * A slot this instance released in the current event-loop turn, on a usable channel of the candidate set (in a
   * tier `inTier` accepts), taken over with no store command (LeaseManager.takeOver). The release would have gone to
   * Redis at the end of this turn, ahead of this pass's acquire in the same pipeline, so the pass would have found
   * that slot free anyway; no other instance could have taken it in between.
   */
  private takeHandoff<C extends Candidate>(
    prepared: Prepared<C>,
    loads: ReadonlyMap<string, ChannelLoad> | undefined,
    inTier: (tier: number) => boolean,
    waitedMs: number,
    signal?: AbortSignal,
  ): Ticket<C> | undefined {
    if (signal?.aborted) return undefined;
    for (const id of this.leases.handoffChannels()) {
      const entry = prepared.tierOf.get(id);
      if (!entry || !inTier(entry.tier)) continue;
      const c = entry.channel;
      if (this.isCooling(c, loads) || (this.current.cooldown_enabled && this.localCoolingMs(id) > 0))
        continue;
      const lease = this.leases.takeOver(id, c.maxConcurrency!);
      if (!lease) continue;
      this.recorder.handoffs++;
      return this.boundedTicket(c, lease, waitedMs, signal);
    }
    return undefined;
  }

  private boundedTicket<C extends Candidate>(
    channel: C,
    lease: Lease,
    waitedMs: number,
    signal?: AbortSignal,
  ): Ticket<C> {
    this.view.noteActive(channel.id, 1);
    let released: Promise<void> | undefined;
    const ticket: Ticket<C> = {
      channel,
      token: lease.token,
      waitedMs,
      release: (options) => {
        if (!released) {
          const handoff = options?.handoff !== false && this.current.slot_handoff_enabled;
          const removal = this.leases.release(lease, handoff);
          // Counted as given back now: the removal goes out with this turn's commands, ahead of any later load read.
          this.view.noteActive(channel.id, -1);
          // Woken now, a local waiter can take the slot over in this turn, or poll right behind the removal.
          this.waiters.wakeOne(channel.id);
          // With handoff on, on a store that sends the removals of a turn together, the slot is given back once its
          // removal is queued: it goes out at the end of this turn (ahead of every later command of the store) or to
          // a pass of this instance that takes it over, and a failure is retried in the background (LeaseManager).
          // Resolving here lets the caller's next request, in this same turn, take the slot over with no Redis
          // command. (Handoff off: resolved once Redis confirmed the removal, as before.)
          released = this.store.withdrawRelease && handoff ? Promise.resolve() : removal;
        }
        return released;
      },
    };
    if (signal?.aborted) {
      // The caller gave up while the store admitted it: hand the slot straight back.
      void ticket.release();
      throw this.capacityError('aborted', [channel], [], this.current, channel);
    }
    return ticket;
  }

  private unlimitedTicket<C extends Candidate>(channel: C): Ticket<C> {
    this.unlimitedActive.set(channel.id, (this.unlimitedActive.get(channel.id) ?? 0) + 1);
    let released = false;
    return {
      channel,
      token: undefined,
      waitedMs: 0,
      release: async () => {
        if (released) return;
        released = true;
        const n = (this.unlimitedActive.get(channel.id) ?? 1) - 1;
        if (n > 0) this.unlimitedActive.set(channel.id, n);
        else this.unlimitedActive.delete(channel.id);
      },
    };
  }

  private async withAbort<T>(work: Promise<T>, signal?: AbortSignal): Promise<T> {
    try {
      return await abortable(work, signal);
    } catch (err) {
      if (signal?.aborted) throw this.capacityError('aborted', [], [], this.current);
      throw err;
    }
  }

  private capacityError(
    reason: 'full' | 'queue_full' | 'wait_timeout' | 'aborted',
    candidates: readonly Candidate[],
    saturated: readonly Candidate[],
    settings: Settings,
    waitedOn?: Candidate,
  ): CapacityError {
    const ids = saturated.map((c) => c.id);
    const cooling = candidates.filter((c) => !saturated.includes(c)).map((c) => c.id);
    const full = ids.length ? `channels at max concurrency: ${ids.join(', ')}` : '';
    const rest = cooling.length ? `cooling down or skipped: ${cooling.join(', ')}` : '';
    const detail = [full, rest].filter(Boolean).join('; ');
    let message: string;
    switch (reason) {
      case 'queue_full':
        message = `wait queue of channel ${waitedOn!.id} is full`;
        break;
      case 'wait_timeout':
        message = `no slot came free on channel ${waitedOn!.id} within ${settings.wait_timeout_ms} ms`;
        break;
      case 'aborted':
        message = 'the request was aborted while waiting for a channel slot';
        break;
      default:
        message = 'every candidate channel is at capacity';
    }
    const retryAfterMs = saturated.length
      ? DEFAULT_RETRY_AFTER_MS
      : Math.max(
          DEFAULT_RETRY_AFTER_MS,
          ...candidates.map((c) => this.localCoolingMs(c.id)).filter((ms) => ms > 0),
        );
    // A capacity error is an expected answer under load, not a bug: no stack trace (costly at thousands a second).
    const stackTraceLimit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      return new CapacityError(reason, detail ? `${message} (${detail})` : message, {
        retryAfterMs,
        channels: ids,
      });
    } finally {
      Error.stackTraceLimit = stackTraceLimit;
    }
  }

  /**
   * Whether selection skips the channel: a bounded channel by the load snapshot, an unlimited one by this process's
   * memory. With cooldown_enabled = false nothing cools (the master switch).
   */
  private isCooling(c: Candidate, loads?: ReadonlyMap<string, ChannelLoad>): boolean {
    if (!this.current.cooldown_enabled) return false;
    return isBounded(c) ? loads?.get(c.id)?.coolingDown === true : this.localCoolingMs(c.id) > 0;
  }

  private localCoolingMs(id: string): number {
    const until = this.localCooldowns.get(id);
    if (until === undefined) return 0;
    const remaining = until - this.clock.now();
    if (remaining > 0) return remaining;
    this.localCooldowns.delete(id);
    return 0;
  }

  private isBoundedId(channel: string | Candidate): { id: string; bounded: boolean } {
    if (typeof channel !== 'string') return { id: channel.id, bounded: isBounded(channel) };
    return { id: channel, bounded: this.known.get(channel) ?? true };
  }

  async cooldown(channel: string | Candidate, opts: { ms?: number; reason?: string } = {}): Promise<void> {
    if (!this.current.cooldown_enabled) return;
    const { id, bounded } = this.isBoundedId(channel);
    const ms = Math.max(1, Math.round(opts.ms ?? this.current.cooldown_seconds * 1000));
    this.localCooldowns.set(id, this.clock.now() + ms);
    this.view.noteCooling(id, ms);
    if (bounded) await this.store.setCooldown(id, ms, opts.reason ?? 'cooldown');
  }

  async clearCooldown(channel: string | Candidate): Promise<void> {
    const { id, bounded } = this.isBoundedId(channel);
    this.localCooldowns.delete(id);
    this.view.noteCooldownCleared(id);
    if (bounded) await this.store.clearCooldown(id);
  }

  async readLoads(channels: readonly Candidate[]): Promise<Map<string, ChannelLoad>> {
    const bounded = channels.filter(isBounded).map((c) => c.id);
    const loads = bounded.length ? await this.store.readLoads(bounded) : new Map<string, ChannelLoad>();
    return this.withUnlimited(channels, loads);
  }

  async viewLoads(channels: readonly Candidate[]): Promise<Map<string, ChannelLoad>> {
    return this.withUnlimited(channels, await this.view.read(channels.filter(isBounded).map((c) => c.id)));
  }

  /** Adds the unlimited channels' loads, which live in this process only. */
  private withUnlimited(
    channels: readonly Candidate[],
    loads: Map<string, ChannelLoad>,
  ): Map<string, ChannelLoad> {
    for (const c of channels) {
      if (isBounded(c)) continue;
      const cooling = this.localCoolingMs(c.id);
      loads.set(c.id, {
        active: this.unlimitedActive.get(c.id) ?? 0,
        waiting: 0,
        coolingDown: cooling > 0,
        cooldownRemainingMs: cooling,
      });
    }
    return loads;
  }

  stats(): AdmissionStats {
    const channels: Record<string, ChannelStats> = {};
    const touch = (id: string) => (channels[id] ??= { active: 0, waiting: 0 });
    for (const lease of this.leases.leases()) touch(lease.channelId).active++;
    for (const [id, n] of this.unlimitedActive) touch(id).active += n;
    for (const id of this.waiters.channels()) touch(id).waiting = this.waiters.count(id);
    const r = this.recorder;
    return {
      instanceId: this.instanceId,
      store: this.store.kind,
      commands: { ...this.store.commands },
      outcomes: { ...r.outcomes },
      acquireAttempts: r.acquireAttempts,
      acquireCalls: r.acquireCalls,
      handoffs: r.handoffs,
      admissionLatencyMs: r.admissionLatency.snapshot(),
      waitTimeMs: r.waitTime.snapshot(),
      loadView: { ...this.view.counters },
      leasesLost: r.leasesLost,
      liveLeases: this.leases.size,
      channels,
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.leases.close();
  }
}
