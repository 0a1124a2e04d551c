/** The admission engine's facade: builds this instance's state holders once and hands every acquire to the pass. */
import type { Candidate } from '../core/channel.js';
import { preciseNow, systemClock } from '../core/clock.js';
import { isLimited, validateClient, type Client } from '../core/client.js';
import { CapacityError, ClientLimitError, NoChannelError, StoreUnavailableError } from '../core/errors.js';
import { admissionSettings, type Settings } from '../core/settings.js';
import { LeaseManager } from './leases/lease-manager.js';
import { UNKNOWN_FLOOR, type ChannelLoad, type Listening } from '../store/store.js';
import type { ChannelPeak } from '../store/peak.js';
import { capacityError, retryHintOf } from './pass/capacity.js';
import { HoldTimes } from '../core/retry-hint.js';
import { CandidateSets, type Prepared } from './pass/candidates.js';
import { Cooldowns } from './limits/cooldowns.js';
import type { Engine, WaitSpan } from './engine.js';
import { Handoff } from './leases/handoff.js';
import { LoadView } from './loads/load-view.js';
import { admitInForce } from './pass/pass.js';
import { StatsRecorder, type AdmissionStats, type Outcome } from './stats.js';
import * as views from './views.js';
import {
  ClientFallback,
  ClientSets,
  clientLimitError,
  noClientSlot,
  withClientSlot,
} from './limits/clients.js';
import { Tickets } from './leases/tickets.js';
import type {
  AcquireRequest,
  Admission,
  AdmissionEvent,
  AdmissionOptions,
  AdmissionRecord,
  Ticket,
} from './types.js';
import { Inbox } from './waiting/inbox.js';
import { lawOf, limitsOf, plannedMax, type ChannelLimit } from './limits/adaptive.js';
import { LocalShare } from './leases/local-share.js';

export function createAdmission(options: AdmissionOptions): Admission {
  return new AdmissionEngine(options);
}

export class AdmissionEngine implements Admission {
  readonly instanceId: string;
  private current: Settings;
  private readonly engine: Engine;
  private readonly candidateSets = new CandidateSets();
  private readonly clientSets = new ClientSets();
  private readonly clientFallback = new ClientFallback();
  /** The engine's own requests for a client's slot: their candidates carry reserved ids. */
  private readonly clientRequests = new WeakSet<AcquireRequest<Candidate>>();
  private readonly emit: (event: AdmissionEvent) => void;
  private readonly onAdmission: ((record: AdmissionRecord) => void) | undefined;
  private closed = false;
  private readonly listening: Listening;
  private readonly localShare: LocalShare;
  private configVersion = 0;

  constructor(options: AdmissionOptions) {
    this.current = admissionSettings.merge(admissionSettings.defaults, options.settings ?? {});
    const { store } = options;
    const clock = options.clock ?? systemClock;
    const settings = () => this.current;
    this.emit = options.onEvent ?? (() => {});
    this.warnDeprecated(options.settings);
    this.onAdmission = options.onAdmission;
    const recorder = new StatsRecorder();
    const cooldowns = new Cooldowns({ store, clock, settings, candidates: this.candidateSets });
    this.localShare = new LocalShare({
      mode: options.storeFailureMode ?? 'fail_closed',
      clock,
      settings,
      fleetSize: options.fleetSize ?? (() => 0),
      health: () => store.health(),
      onReconnect: (listener) => store.onReconnect(listener),
    });
    const leases = new LeaseManager({
      store,
      clock,
      keepAsLocal: this.localShare.keepAsLocal,
      onStore: this.localShare.note,
      leaseTtlMs: () => this.current.lease_ttl_ms,
      fencing: () => ({
        enabled: this.current.lease_fencing_enabled,
        reclaim: this.current.lease_reclaim_enabled,
      }),
      onEvent: (event) => {
        if (event.type === 'lease_lost') recorder.leasesLost++;
        this.emit(event);
        if (event.type === 'lease_lost') this.engine.view.noteActive(event.channelId, -1);
      },
      ...(options.instanceId ? { instanceId: options.instanceId } : {}),
    });
    this.instanceId = leases.instanceId;
    // a grant for a waiter that is gone passes on, unless its waiter already claimed it (found by a poll)
    const inbox = new Inbox((channelId, token) => {
      if (leases.holds(channelId, token)) return;
      const gone = { channelId, token, max: 0, floor: UNKNOWN_FLOOR };
      void store.leaveQueue(gone, this.current.lease_ttl_ms).catch(() => {});
    });
    const view = new LoadView({
      store,
      clock,
      settings,
      local: {
        active: (id) => leases.localCount(id),
        waiting: (id) => inbox.count(id),
        coolingMs: (id) => cooldowns.localMs(id),
      },
      instanceId: () => this.instanceId,
      fetchTimeoutMs: options.loadFetchTimeoutMs,
      maxConcurrentFetches: options.maxConcurrentFetches,
    });
    const handoff = new Handoff(leases, clock);
    const random = options.random ?? Math.random;
    const holds = new HoldTimes();
    const retryHint = retryHintOf({ view, holds, random, settings });
    const capacity: Engine['capacityError'] = (reason, candidates, saturated, waitedOn) =>
      capacityError(reason, {
        candidates,
        saturated,
        waitedOn,
        waitTimeoutMs: this.current.wait_timeout_ms,
        coolingMs: (id) => cooldowns.localMs(id),
        retryHint,
      });
    const tickets = new Tickets({
      leases,
      view,
      handoff,
      settings,
      queued: (id) => store.queued(id),
      aborted: (channel) => capacity('aborted', [channel], [], channel),
      clock,
      holds,
    });
    this.listening = store.listen(this.instanceId, inbox);
    this.engine = {
      store,
      clock,
      random,
      leases,
      view,
      inbox,
      recorder,
      cooldowns,
      handoff,
      tickets,
      settings,
      maxOf: (c) => plannedMax(c, this.current, store),
      configVersion: () => this.configVersion,
      resolve: (request) =>
        this.candidateSets.prepare(
          request.resolve?.() ?? request.candidates,
          request.exclude,
          this.clientRequests.has(request),
        ),
      capacityError: capacity,
    };
  }

  get settings(): Settings {
    return this.current;
  }

  /** The load view, for tests and the admin API. */
  get loadView(): LoadView {
    return this.engine.view;
  }

  configChanged(): void {
    this.configVersion++;
    this.engine.inbox.wake();
  }

  private warnDeprecated(update: unknown): void {
    const warnings = admissionSettings.warnings(update);
    if (warnings.length > 0) this.emit({ type: 'settings_deprecated', warnings });
  }

  updateSettings(update: unknown): Settings {
    const next = admissionSettings.merge(this.current, update);
    this.warnDeprecated(update);
    this.current = next;
    this.emit({ type: 'settings_changed', settings: next });
    return next;
  }

  async acquire<C extends Candidate>(request: AcquireRequest<C>): Promise<Ticket<C>> {
    const { clock, recorder } = this.engine;
    const started = clock.now();
    let outcome: Outcome | undefined = 'acquired';
    let waitedMs: number | undefined;
    try {
      if (this.closed) throw new StoreUnavailableError('acquire', 'the admission engine is closed');
      const { client, arrivedMsAgo } = request;
      if (client !== undefined) validateClient(client);
      if (arrivedMsAgo !== undefined && !(Number.isFinite(arrivedMsAgo) && arrivedMsAgo >= 0)) {
        const got = typeof arrivedMsAgo === 'number' ? String(arrivedMsAgo) : JSON.stringify(arrivedMsAgo);
        throw new TypeError(`Expected \`arrivedMsAgo\` to be a finite number ≥ 0, got ${got}`);
      }
      // the queues of its client's slot and of its channel order it by this
      const arrivedAt = preciseNow(clock) - (arrivedMsAgo ?? 0);
      const prepared = this.candidateSets.prepare(request.candidates, request.exclude);
      // a limited client's own slot first: nothing waits holding a channel slot
      const held = isLimited(client)
        ? await this.clientSlot(client, request.signal, request.resolveClient, arrivedAt)
        : undefined;
      let ticket: Ticket<C>;
      try {
        // the wait for the client's slot counts against the same wait_timeout_ms
        const span =
          held && held.waitedMs > 0
            ? { start: started, deadline: started + this.current.wait_timeout_ms }
            : undefined;
        ticket = await this.admit(request, prepared, arrivedAt, span);
      } catch (err) {
        if (held) void held.release();
        throw err;
      }
      if (held) ticket = withClientSlot(ticket, held);
      if (ticket.waitedMs > 0) waitedMs = ticket.waitedMs;
      return ticket;
    } catch (err) {
      if (err instanceof CapacityError) outcome = `capacity_${err.reason}`;
      else if (err instanceof ClientLimitError) outcome = 'client_limit';
      else if (err instanceof StoreUnavailableError) outcome = 'store_unavailable';
      else if (err instanceof NoChannelError) outcome = 'no_channel';
      else outcome = undefined; // not an admission outcome: a bug or a bad candidate, surfaced as it is
      throw err;
    } finally {
      if (outcome !== undefined) {
        const latencyMs = clock.now() - started;
        recorder.outcomes[outcome]++;
        recorder.admissionLatency.observe(latencyMs);
        this.onAdmission?.({ outcome, latencyMs, ...(waitedMs !== undefined ? { waitedMs } : {}) });
      }
    }
  }

  private admit<C extends Candidate>(
    request: AcquireRequest<C>,
    prepared: Prepared<C>,
    arrivedAt: number,
    span?: WaitSpan,
  ): Promise<Ticket<C>> {
    return this.localShare.around(
      this.engine.leases,
      prepared,
      () => admitInForce(this.engine, request, prepared, arrivedAt, span),
      (channel, lease) => this.engine.tickets.bounded(channel, lease, 0, request.signal),
    );
  }

  /** One of a limited client's own slots, fleet-wide: taken at once or waited for in the client's queue. */
  private async clientSlot(
    client: Client & { maxConcurrency: number },
    signal: AbortSignal | undefined,
    resolveClient: (() => Client | undefined) | undefined,
    arrivedAt: number,
  ): Promise<Ticket<Candidate>> {
    const candidates = this.clientSets.of(client);
    const prepared = this.candidateSets.prepare(candidates, undefined, true);
    // the client in force while it waits: a new limit in its place in the queue, none left → no client slot
    const resolve = () => {
      const now = resolveClient ? resolveClient() : client;
      return now?.id === client.id && isLimited(now) ? this.clientSets.of(now) : [];
    };
    const request: AcquireRequest<Candidate> = { candidates, resolve, signal };
    this.clientRequests.add(request);
    try {
      return await this.admit(request, prepared, arrivedAt);
    } catch (err) {
      if (err instanceof NoChannelError) return noClientSlot(client);
      if (err instanceof StoreUnavailableError) return this.clientFallback.take(client);
      if (!(err instanceof CapacityError)) throw err;
      throw clientLimitError(client, err);
    }
  }

  async cooldown(channel: string | Candidate, opts: { ms?: number; reason?: string } = {}): Promise<void> {
    const started = this.engine.cooldowns.set(channel, opts);
    if (!started) return;
    this.engine.view.noteCooling(started.id, started.ms);
    await started.stored;
  }

  async clearCooldown(channel: string | Candidate): Promise<void> {
    const cleared = this.engine.cooldowns.clear(channel);
    this.engine.view.noteCooldownCleared(cleared.id);
    await cleared.stored;
  }

  readLoads(channels: readonly Candidate[]): Promise<Map<string, ChannelLoad>> {
    return views.readLoads(this.engine, channels);
  }

  viewLoads(channels: readonly Candidate[]): Promise<Map<string, ChannelLoad>> {
    return views.viewLoads(this.engine, channels);
  }

  readPeaks(channels: readonly Candidate[]): Promise<Map<string, ChannelPeak>> {
    return views.readPeaks(this.engine, channels);
  }

  readHolders(channels: readonly Candidate[]): Promise<Map<string, Map<string, number>>> {
    return views.readHolders(this.engine, this.instanceId, channels);
  }

  limits(channels: readonly Candidate[]): Map<string, ChannelLimit> {
    return limitsOf(channels, this.current, (id) => this.engine.store.limitOf(id));
  }

  async readLimits(channels: readonly Candidate[]): Promise<Map<string, ChannelLimit>> {
    const adaptive = channels.filter((c) => lawOf(c, this.current));
    const stored = await this.engine.store.readLimits(adaptive.map((c) => c.id));
    return limitsOf(adaptive, this.current, (id) => stored.get(id));
  }

  readClients(clients: readonly Client[]): Promise<Map<string, ChannelLoad>> {
    return views.readClients(this.engine, clients);
  }

  stats(): AdmissionStats {
    return views.statsOf(this.engine, this.instanceId, this.localShare);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.localShare.close();
    await this.engine.leases.close();
    await this.listening.stop();
    await this.engine.view.close();
  }
}
