/**
 * Prometheus metrics: everything the admission engine counts, histograms of admission and wait latency,
 * per-channel gauges (cluster-wide in flight, waiting, cooling; this instance's in flight), store health, the
 * responses the gateway gave by source and status, and per channel its upstream calls (answers by status class, time
 * to first byte, duration, retries) and the cooldowns started. Labels are channel ids, purposes, outcomes and status codes —
 * never tokens. Gauges and engine counters are read at scrape time; reading the per-channel loads goes through the
 * load view, so a scrape costs no Redis command while its snapshot is fresh. docs/operations.md lists every metric.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import {
  OUTCOMES,
  type ChannelStats,
  PURPOSES,
  type Admission,
  type AdmissionRecord,
  type ChannelLoad,
  type NodeHealth,
} from 'slotgate';
import type { ChannelRegistry } from './channels.js';

export interface MetricsSources {
  admission: () => Admission;
  channels: () => ChannelRegistry;
  storeUp: () => Promise<boolean>;
  storeKind: string;
  /** A Redis store's nodes (every Cluster master, or the one node), each PINGed; undefined for another store. */
  storeNodes?: () => Promise<NodeHealth[]>;
  configVersion: () => number;
}

const SECONDS_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];
/** Upstream time to first byte: an LLM's first token comes after 50 ms to 30 s (a long prompt, a busy provider). */
const TTFB_BUCKETS = [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60];
/** Whole upstream calls: an embedding in tens of ms, a long streamed answer in minutes. */
const UPSTREAM_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600];

/** An upstream answer's status class; `error` when the call got no answer (unreachable, time-out, broken). */
export type StatusClass = '2xx' | '3xx' | '4xx' | '5xx' | 'error';
/** Why the proxy tried another channel after an upstream call. */
export type RetryReason = 'upstream_429' | 'upstream_5xx' | 'unreachable';
/** What started a cooldown: an upstream 429, an error answer with rate-limit wording, or the admin API. */
export type CooldownReason = 'upstream_429' | 'rate_limit_message' | 'admin';

export function statusClass(status: number | 'error'): StatusClass {
  if (status === 'error' || status < 200 || status > 599) return 'error';
  return `${Math.floor(status / 100)}xx` as StatusClass;
}

/** What the proxy reports about its upstream calls (per channel id: a bounded label set). */
export interface UpstreamMetrics {
  /** An upstream call's answer (its headers arrived) or its failure, with the time to first byte when answered. */
  upstreamAnswered(channel: string, status: number | 'error', ttfbSeconds?: number): void;
  /** An upstream answer's body has ended, `seconds` after the call started. */
  upstreamEnded(channel: string, seconds: number): void;
  retried(channel: string, reason: RetryReason): void;
  cooldownStarted(channel: string, reason: CooldownReason): void;
}

const IDLE: ChannelStats = { active: 0, waiting: 0 };

export class GatewayMetrics implements UpstreamMetrics {
  readonly register = new Registry();
  private readonly admissionSeconds: Histogram<'outcome'>;
  private readonly waitSeconds: Histogram<string>;
  private readonly responses: Counter<'source' | 'code'>;
  private readonly upstreamResponses: Counter<'channel' | 'class'>;
  private readonly upstreamTtfbSeconds: Histogram<'channel'>;
  private readonly upstreamSeconds: Histogram<'channel'>;
  private readonly upstreamRetries: Counter<'channel' | 'reason'>;
  private readonly cooldowns: Counter<'channel' | 'reason'>;
  readonly configReloadErrors: Counter<string>;

  constructor(private readonly sources: MetricsSources) {
    const register = this.register;
    // The standard process_* and nodejs_* names, unprefixed, so stock dashboards and alerts work unchanged.
    collectDefaultMetrics({ register });
    const admission = () => sources.admission();

    this.admissionSeconds = new Histogram({
      name: 'slotgate_admission_duration_seconds',
      help: 'Time from the start of an admission pass to its ticket or error, waiting included',
      labelNames: ['outcome'],
      buckets: SECONDS_BUCKETS,
      registers: [register],
    });
    this.waitSeconds = new Histogram({
      name: 'slotgate_wait_duration_seconds',
      help: 'Time admitted requests spent in a wait queue',
      buckets: SECONDS_BUCKETS,
      registers: [register],
    });
    this.responses = new Counter({
      name: 'slotgate_responses_total',
      help: "Client API responses by source (gateway = slotgate's own answer, upstream = passed on) and status code",
      labelNames: ['source', 'code'],
      registers: [register],
    });
    this.upstreamResponses = new Counter({
      name: 'slotgate_upstream_responses_total',
      help: 'Upstream calls by channel and status class of their answer (error: no answer; each retry counts)',
      labelNames: ['channel', 'class'],
      registers: [register],
    });
    this.upstreamTtfbSeconds = new Histogram({
      name: 'slotgate_upstream_ttfb_seconds',
      help: "Upstream time to first byte: from the call's start until the status line and headers arrived",
      labelNames: ['channel'],
      buckets: TTFB_BUCKETS,
      registers: [register],
    });
    this.upstreamSeconds = new Histogram({
      name: 'slotgate_upstream_duration_seconds',
      help: "Upstream call duration: from the call's start until the answer's body ended (calls that completed)",
      labelNames: ['channel'],
      buckets: UPSTREAM_BUCKETS,
      registers: [register],
    });
    this.upstreamRetries = new Counter({
      name: 'slotgate_upstream_retries_total',
      help: 'Requests retried on another channel, by the channel that failed and why',
      labelNames: ['channel', 'reason'],
      registers: [register],
    });
    this.cooldowns = new Counter({
      name: 'slotgate_cooldowns_total',
      help: 'Cooldowns this instance started, by channel and cause (upstream_429, rate_limit_message, admin)',
      labelNames: ['channel', 'reason'],
      registers: [register],
    });
    this.configReloadErrors = new Counter({
      name: 'slotgate_config_reload_errors_total',
      help: 'Config file reloads rejected (the previous configuration stayed in force)',
      registers: [register],
    });

    // Engine-owned counters (monotonic in the engine), exported as counters set to the engine's value at scrape time.
    const engineCounter = <L extends string>(
      name: string,
      help: string,
      labelNames: readonly L[],
      read: () => Array<[Record<L, string>, number]>,
    ) =>
      new Counter({
        name,
        help,
        labelNames: labelNames as L[],
        registers: [register],
        collect() {
          this.reset();
          for (const [labels, value] of read()) this.inc(labels, value);
        },
      });

    engineCounter(
      'slotgate_redis_commands_total',
      'Store commands issued by this instance, by purpose (a script call counts as one)',
      ['purpose'],
      () => {
        const c = admission().stats().commands;
        return PURPOSES.map((p) => [{ purpose: p }, c[p]]);
      },
    );
    engineCounter('slotgate_admissions_total', 'Admission outcomes of this instance', ['outcome'], () => {
      const o = admission().stats().outcomes;
      return OUTCOMES.map((k) => [{ outcome: k }, o[k]]);
    });
    engineCounter(
      'slotgate_load_view_events_total',
      'Load view: cache hits, misses, coalesced joins, fresh reads, fallbacks, fetches, direct reads, summary ' +
        'reports, recent hits',
      ['event'],
      () => {
        const lv = admission().stats().loadView;
        return Object.entries(lv).map(([k, v]) => [{ event: k }, v]);
      },
    );
    engineCounter(
      'slotgate_acquire_attempts_total',
      'Bounded channels tried by the acquire script',
      [],
      () => [[{}, admission().stats().acquireAttempts]],
    );
    engineCounter(
      'slotgate_first_tries_total',
      'Passes that asked the store for a bounded slot, by what the first channel tried answered (full includes queued)',
      ['result'],
      () => {
        const s = admission().stats();
        return [
          [{ result: 'free' }, s.firstTries - s.firstTriesFull],
          [{ result: 'full' }, s.firstTriesFull],
        ];
      },
    );
    engineCounter(
      'slotgate_acquire_calls_total',
      'Acquire requests of admission passes (one may try several channels; on one Redis node the requests of one event-loop turn share one script call)',
      [],
      () => [[{}, admission().stats().acquireCalls]],
    );
    engineCounter(
      'slotgate_handoffs_total',
      'Admissions served by a slot this instance released in the same event-loop turn (no Redis command)',
      [],
      () => [[{}, admission().stats().handoffs]],
    );
    engineCounter(
      'slotgate_grants_total',
      'Waiters admitted on a slot granted to them, the oldest waiter of a channel first, across every instance',
      [],
      () => [[{}, admission().stats().grants]],
    );
    engineCounter(
      'slotgate_leases_lost_total',
      'Leases found missing at renewal (their holder had lost the slot)',
      [],
      () => [[{}, admission().stats().leasesLost]],
    );

    new Gauge({
      name: 'slotgate_live_leases',
      help: 'Leases this instance holds',
      registers: [register],
      collect() {
        this.set(admission().stats().liveLeases);
      },
    });
    new Gauge({
      name: 'slotgate_config_version',
      help: 'Configuration version in force (increments on every accepted reload)',
      registers: [register],
      collect() {
        this.set(sources.configVersion());
      },
    });
    new Gauge({
      name: 'slotgate_store_up',
      help: 'Whether the admission store answers (1) or not (0)',
      labelNames: ['store'],
      registers: [register],
      async collect() {
        this.set({ store: sources.storeKind }, (await sources.storeUp()) ? 1 : 0);
      },
    });

    // Per-node gauges: one PING round per scrape, shared by both (the masters only, so the label set stays small).
    if (sources.storeNodes) {
      const readNodes = sources.storeNodes;
      let nodesRound: Promise<NodeHealth[]> | undefined;
      const nodes = (): Promise<NodeHealth[]> => {
        if (!nodesRound) {
          const pending = readNodes().catch((): NodeHealth[] => []);
          nodesRound = pending;
          void pending.then(() => {
            if (nodesRound === pending) nodesRound = undefined;
          });
        }
        return nodesRound;
      };
      new Gauge({
        name: 'slotgate_redis_node_up',
        help: 'Whether each Redis node the store writes to (every Cluster master, or the one node) answers PING (1) or not (0)',
        labelNames: ['node', 'role'],
        registers: [register],
        async collect() {
          const all = await nodes();
          this.reset();
          for (const n of all) this.set({ node: n.address, role: n.role }, n.healthy ? 1 : 0);
        },
      });
      new Gauge({
        name: 'slotgate_redis_node_latency_seconds',
        help: 'PING round trip to each Redis node the store writes to (nodes that answered)',
        labelNames: ['node'],
        registers: [register],
        async collect() {
          const all = await nodes();
          this.reset();
          for (const n of all)
            if (n.latencyMs !== undefined) this.set({ node: n.address }, n.latencyMs / 1000);
        },
      });
    }

    // Per-client gauges: the limited clients of the configuration (client names, never keys; as many label values as
    // configured clients), this instance's counts, no Redis command.
    const perClient = (name: string, help: string, value: (stats: ChannelStats, max: number) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['client'],
        registers: [register],
        collect() {
          const mine = admission().stats().clients;
          this.reset();
          for (const { client } of sources.channels().clients()) {
            const max = client.maxConcurrency ?? 0;
            if (max > 0) this.set({ client: client.id }, value(mine[client.id] ?? IDLE, max));
          }
        },
      });
    perClient(
      'slotgate_client_in_flight',
      "A limited client's requests in flight on this instance (each holds one of the client's slots)",
      (s) => s.active,
    );
    perClient(
      'slotgate_client_waiting',
      "A limited client's requests waiting on this instance for one of its own slots",
      (s) => s.waiting,
    );
    perClient(
      'slotgate_client_max_concurrency',
      "A limited client's max concurrency across the fleet (tokens[].max_concurrency)",
      (_, max) => max,
    );

    // Per-channel gauges are filled from one snapshot per scrape. Every gauge awaits it in its own collect(): a
    // registry collects all metrics at once, so a gauge without a collect of its own would be read before another
    // metric's collect had set it, and show the previous scrape's values (none at all on the first scrape).
    let round: Promise<ChannelSnapshot> | undefined;
    const snapshot = (): Promise<ChannelSnapshot> => {
      if (!round) {
        const pending = readSnapshot(sources);
        const done = () => {
          if (round === pending) round = undefined;
        };
        round = pending;
        pending.then(done, done);
      }
      return round;
    };
    const perChannel = (name: string, help: string, value: (row: ChannelRow) => number | undefined) =>
      new Gauge({
        name,
        help,
        labelNames: ['channel'],
        registers: [register],
        async collect() {
          const rows = await snapshot();
          this.reset();
          for (const row of rows) {
            const v = value(row);
            if (v !== undefined) this.set({ channel: row.id }, v);
          }
        },
      });
    perChannel(
      'slotgate_channel_in_flight',
      'Requests in flight on the channel across all instances (load view)',
      (r) => r.load?.active,
    );
    perChannel(
      'slotgate_channel_waiting',
      'Waiters queued on the channel across all instances (load view)',
      (r) => r.load?.waiting,
    );
    perChannel('slotgate_channel_cooling', 'Whether the channel is cooling down (1) or not (0)', (r) =>
      r.load ? (r.load.coolingDown ? 1 : 0) : undefined,
    );
    perChannel(
      'slotgate_channel_cooldown_remaining_seconds',
      'Cooldown left on the channel (-1: a cooldown without expiry)',
      (r) =>
        r.load
          ? r.load.coolingDown
            ? r.load.cooldownRemainingMs < 0
              ? -1
              : r.load.cooldownRemainingMs / 1000
            : 0
          : undefined,
    );
    perChannel(
      'slotgate_channel_max_concurrency',
      'Configured max concurrency (0 = unlimited)',
      (r) => r.maxConcurrency,
    );
    perChannel(
      'slotgate_channel_local_in_flight',
      'Requests this instance has in flight on the channel',
      (r) => r.local,
    );
    new Gauge({
      name: 'slotgate_channels',
      help: 'Configured channels',
      registers: [register],
      async collect() {
        this.set((await snapshot()).length);
      },
    });
  }

  observeAdmission = (record: AdmissionRecord): void => {
    this.admissionSeconds.observe({ outcome: record.outcome }, record.latencyMs / 1000);
    if (record.waitedMs !== undefined) this.waitSeconds.observe(record.waitedMs / 1000);
  };

  countResponse(source: 'gateway' | 'upstream', status: number): void {
    this.responses.inc({ source, code: String(status) });
  }

  upstreamAnswered(channel: string, status: number | 'error', ttfbSeconds?: number): void {
    this.upstreamResponses.inc({ channel, class: statusClass(status) });
    if (ttfbSeconds !== undefined) this.upstreamTtfbSeconds.observe({ channel }, ttfbSeconds);
  }

  upstreamEnded(channel: string, seconds: number): void {
    this.upstreamSeconds.observe({ channel }, seconds);
  }

  retried(channel: string, reason: RetryReason): void {
    this.upstreamRetries.inc({ channel, reason });
  }

  cooldownStarted(channel: string, reason: CooldownReason): void {
    this.cooldowns.inc({ channel, reason });
  }

  async text(): Promise<string> {
    return this.register.metrics();
  }
}

interface ChannelRow {
  id: string;
  maxConcurrency: number;
  local: number;
  /** Undefined when the loads could not be read (the load-derived gauges are then left out, not shown as 0). */
  load: ChannelLoad | undefined;
}
type ChannelSnapshot = ChannelRow[];

async function readSnapshot(sources: MetricsSources): Promise<ChannelSnapshot> {
  const channels = sources.channels().channels;
  const admission = sources.admission();
  const loads = await admission.viewLoads(channels).catch(() => undefined);
  const mine = admission.stats().channels;
  return channels.map((c) => ({
    id: c.id,
    maxConcurrency: c.maxConcurrency,
    local: mine[c.id]?.active ?? 0,
    load: loads?.get(c.id),
  }));
}
