/**
 * What the gateway runs on besides HTTP, built in dependency order: configuration, store, admission engine, live
 * settings, presence, metrics, upstream client; plus the data of /admin/status and the order things close in.
 */
import type { FastifyBaseLogger } from 'fastify';
import {
  MemoryStore,
  RedisStore,
  createAdmission,
  type Admission,
  type AdmissionEvent,
  clientIdOf,
  isClientResource,
  type SlotStore,
} from 'slotgate';
import type { ChannelRegistry } from './channels.js';
import type { GatewayConfig } from './config-schema.js';
import { redisConnection } from './config-redis.js';
import { LiveSettings } from './live-settings.js';
import { GatewayMetrics } from './metrics.js';
import { AdmissionLatency } from './metrics/admission.js';
import { FleetSize, Presence } from './presence.js';
import { cachedReadiness, storeReadiness, type ReadinessCheck } from './readiness.js';
import { ConfigInForce } from './reload.js';
import { admissionPart, settingsInForce } from './settings.js';
import { UpstreamClient } from './upstream.js';

/** Readiness probes share one store health check per this long. */
const READINESS_CACHE_MS = 1000;

export interface RuntimeOptions {
  config: GatewayConfig;
  /** Use this store instead of the one the config describes; the runtime then leaves it open on close. */
  store?: SlotStore;
}

function storeFor(config: GatewayConfig): SlotStore {
  return config.redis
    ? new RedisStore({
        ...redisConnection(config.redis),
        prefix: config.redis.prefix,
        timeoutMs: config.redis.timeout_ms,
        restartGraceMs: config.redis.restart_grace_ms,
      })
    : new MemoryStore();
}

export class GatewayRuntime {
  /** The configuration in force; a reload replaces its content. */
  readonly current: ConfigInForce;
  readonly store: SlotStore;
  readonly admission: Admission;
  readonly settings: LiveSettings;
  readonly metrics: GatewayMetrics;
  readonly upstream: UpstreamClient;
  private readonly ownsStore: boolean;
  private readonly fleet = new FleetSize();
  private readonly presence: Presence;
  /** Set by start(); nothing logs before, since no request and no store callback comes earlier. */
  private log: FastifyBaseLogger | undefined;

  constructor(options: RuntimeOptions) {
    const config = options.config;
    this.current = new ConfigInForce(config);
    this.ownsStore = !options.store;
    const store = (this.store = options.store ?? storeFor(config));
    const failureMode = config.redis?.store_failure_mode ?? 'fail_closed';
    const latency = new AdmissionLatency();
    const admission = (this.admission = createAdmission({
      store,
      settings: admissionPart(settingsInForce(config.settings)),
      onEvent: this.onEvent,
      onAdmission: latency.observe,
      storeFailureMode: failureMode,
      fleetSize: () => this.fleet.seen,
    }));
    this.settings = new LiveSettings(store, admission, this.current);
    // with local_share, each heartbeat also counts the live instances: a share is max ÷ the instances last seen
    const counted = failureMode === 'local_share' ? this.fleet : undefined;
    this.presence = new Presence(store, admission.instanceId, counted);
    this.metrics = new GatewayMetrics(
      {
        admission: () => admission,
        channels: () => this.current.registry,
        storeKind: store.kind,
        storeUp: async () => (await store.health()).healthy,
        ...(store instanceof RedisStore ? { storeNodes: () => store.nodes() } : {}),
        configVersion: () => this.current.version,
      },
      latency,
    );
    this.upstream = new UpstreamClient(config.timeouts);
  }

  get config(): GatewayConfig {
    return this.current.config;
  }

  get registry(): ChannelRegistry {
    return this.current.registry;
  }

  /** Follows the shared settings and starts the presence heartbeat; logs through `log` from now on. */
  async start(log: FastifyBaseLogger): Promise<void> {
    this.log = log;
    await this.settings.start(log);
    this.presence.start(log);
  }

  /** After a reload: its settings apply, and the waiting requests resolve their candidates again under it. */
  configReplaced = (): void => {
    this.settings.apply();
    this.admission.configChanged();
  };

  /** GET /readyz: this instance should get traffic while its store answers. */
  readonly ready: ReadinessCheck = cachedReadiness(async () => {
    const answer = await storeReadiness(this.store);
    // a degraded mode that still admits keeps the instance in service
    if (!answer.ready && this.admission.stats().localShare.active) {
      return { ready: true, reason: `degraded: admitting on a local share (${answer.reason ?? ''})` };
    }
    return answer;
  }, READINESS_CACHE_MS);

  status = async (): Promise<Record<string, unknown>> => ({
    instance_id: this.admission.instanceId,
    uptime_s: Math.round((Date.now() - this.presence.startedAt) / 1000),
    store: this.store.kind,
    redis: await this.redisHealth(),
    config: this.current.describe(),
    settings_overrides: this.settings.overrides,
    settings_source: this.settings.source(),
    instances: await this.presence.list(),
    live_leases: this.admission.stats().liveLeases,
    adaptive_limits: await this.adaptiveLimits(),
    store_failure_mode: this.config.redis?.store_failure_mode ?? 'fail_closed',
    ...(this.config.redis?.store_failure_mode === 'local_share' ? { instances_seen: this.fleet.seen } : {}),
  });

  /**
   * Lets `closeHttp` finish the in-flight requests, closes admission (releasing every lease), then the rest. The
   * heartbeat goes on through the drain: `slotgate doctor` must never take a draining instance's slots for a dead one's.
   */
  async close(closeHttp: () => Promise<void>): Promise<void> {
    try {
      await closeHttp();
    } finally {
      await this.admission.close();
      await this.presence.leave();
      await this.settings.close();
      await this.upstream.close().catch(() => {});
      if (this.ownsStore) await this.store.close();
    }
  }

  /** Each adaptive channel's limit from the store; as this instance last learned it when the store fails. */
  private async adaptiveLimits(): Promise<Record<string, unknown>[]> {
    const { channels } = this.current.registry;
    const limits = await this.admission.readLimits(channels).catch(() => this.admission.limits(channels));
    return [...limits].map(([channel, l]) => ({
      channel,
      limit: l.limit,
      max_concurrency: l.max,
      min_concurrency: l.floor,
      enforced: l.enforced,
    }));
  }

  private async redisHealth(): Promise<Record<string, unknown> | null> {
    const store = this.store;
    if (store.kind !== 'redis') return null;
    const redis = store instanceof RedisStore ? store : undefined;
    const [health, nodes] = await Promise.all([store.health(), redis?.nodes()]);
    return {
      ...(health.healthy
        ? { healthy: true, latency_ms: health.latencyMs }
        : { healthy: false, error: health.error }),
      ...(redis && nodes
        ? {
            topology: redis.topologyKind,
            nodes: nodes.map(({ latencyMs, ...node }) => ({
              ...node,
              ...(latencyMs !== undefined && { latency_ms: latencyMs }),
            })),
          }
        : {}),
    };
  }

  private onEvent = (event: AdmissionEvent): void => {
    if (event.type === 'settings_changed') return;
    const level = event.type === 'lease_lost' || event.type === 'release_abandoned' ? 'error' : 'warn';
    const { type, ...rest } = event;
    const fields: Record<string, unknown> =
      'error' in rest ? { ...rest, error: rest.error.message } : { ...rest };
    // a limited client's own slot: named as the client, not under its internal resource id
    if (typeof fields.channelId === 'string' && isClientResource(fields.channelId)) {
      fields.client = clientIdOf(fields.channelId);
      delete fields.channelId;
    }
    this.log?.[level]({ event: type, ...fields }, `admission: ${type}`);
  };
}
