/**
 * What the gateway runs on besides HTTP: the store (the config's Redis, the in-process MemoryStore, or one given),
 * the admission engine, the settings in force, the presence heartbeat, the data of /admin/status, and the order
 * things close in. The store is used only through its public interface (health, sharedSettings, presence).
 */
import { hostname } from 'node:os';
import type { FastifyBaseLogger } from 'fastify';
import {
  MemoryStore,
  RedisStore,
  createAdmission,
  type Admission,
  type AdmissionEvent,
  clientIdOf,
  isClientResource,
  type InstanceInfo,
  type SharedSettings,
  type SlotStore,
} from 'slotgate';
import type { ChannelRegistry } from './channels.js';
import type { GatewayConfig } from './config.js';
import { redisConnection } from './config-redis.js';
import { GatewayMetrics } from './metrics.js';
import { cachedReadiness, storeReadiness, type ReadinessCheck } from './readiness.js';
import { ConfigInForce } from './reload.js';
import {
  admissionPart,
  gatewaySettings,
  settingsSource,
  type GatewaySettings,
  type GatewaySettingsUpdate,
} from './settings.js';
import { UpstreamClient } from './upstream.js';

/** Every instance announces itself this often for the dashboard's instance list. */
const HEARTBEAT_MS = 5000;
/** An instance not heard of for this long drops out of the instance list (three missed heartbeats). */
const INSTANCE_MAX_AGE_MS = 15_000;
/**
 * A raw client call on a Redis that is down can take seconds to fail (ioredis holds it for a reconnect); the admin
 * status and shutdown wait no longer than this for the instance list.
 */
const PRESENCE_WAIT_MS = 1000;
/** Readiness probes share one store health check per this long. */
const READINESS_CACHE_MS = 1000;

/** The same settings-sync error is logged at error level once per this long at most. */
const SYNC_ERROR_REPEAT_MS = 60_000;
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

/** Rejects after `ms`; the work goes on, detached. */
function settleWithin<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

export class GatewayRuntime {
  readonly store: SlotStore;
  readonly admission: Admission;
  readonly metrics: GatewayMetrics;
  readonly upstream: UpstreamClient;
  /** The configuration in force; a reload replaces its content. */
  readonly current: ConfigInForce;
  private readonly ownsStore: boolean;
  private readonly sync: SharedSettings<GatewaySettingsUpdate>;
  private readonly startedAt = Date.now();
  private readonly self: InstanceInfo;
  private overrides: GatewaySettingsUpdate = {};
  private inForce: GatewaySettings;
  private heartbeat: NodeJS.Timeout | undefined;
  /**
   * The live instances this one saw (itself included): the most any heartbeat listed within INSTANCE_MAX_AGE_MS, so a
   * presence list that Redis lost (a restart) and that fills up again as the instances announce themselves never
   * makes the share of each look larger than it is.
   */
  private fleetSeen = 0;
  private readonly fleetCounts: Array<{ at: number; n: number }> = [];
  /** Set by start(); nothing logs before, since no request and no store callback comes earlier. */
  private log: FastifyBaseLogger | undefined;
  /**
   * The settings subscription's errors: while Redis is unreachable its connection fails again on every retry, so each
   * distinct error is logged at error level once a minute at most (the repeats at debug).
   */
  private readonly syncErrors = {
    last: new Map<string, number>(),
    note: (message: string): void => {
      const now = Date.now();
      const seen = this.syncErrors.last.get(message);
      if (seen !== undefined && now - seen < SYNC_ERROR_REPEAT_MS) {
        this.log?.debug({ err: message }, 'settings sync (repeated)');
        return;
      }
      if (this.syncErrors.last.size > 100) this.syncErrors.last.clear();
      this.syncErrors.last.set(message, now);
      this.log?.error({ err: message }, 'settings sync');
    },
  };

  constructor(options: RuntimeOptions) {
    const config = options.config;
    this.current = new ConfigInForce(config);
    this.ownsStore = !options.store;
    this.store = options.store ?? storeFor(config);
    const store = this.store;
    this.metrics = new GatewayMetrics({
      // read at scrape time, after the engine below exists
      admission: () => this.admission,
      channels: () => this.current.registry,
      storeKind: store.kind,
      storeUp: async () => (await store.health()).healthy,
      ...(store instanceof RedisStore ? { storeNodes: () => store.nodes() } : {}),
      configVersion: () => this.current.version,
    });
    // Settings: defaults < config file < overrides (admin PUT; shared with every instance on the store).
    this.inForce = gatewaySettings.merge(gatewaySettings.defaults, config.settings);
    this.admission = createAdmission({
      store,
      settings: admissionPart(this.inForce),
      onEvent: this.onEvent,
      onAdmission: this.metrics.observeAdmission,
      storeFailureMode: config.redis?.store_failure_mode ?? 'fail_closed',
      fleetSize: () => this.fleetSeen,
    });
    this.sync = store.sharedSettings({
      parse: gatewaySettings.parse,
      instanceId: this.admission.instanceId,
      onOverrides: (o) => {
        this.overrides = o;
        this.applySettings();
        this.log?.info({ overrides: o }, 'settings applied');
      },
      onRestore: (o, origin) =>
        this.log?.warn(
          { event: 'settings_restored', overrides: o, version: origin.version, changed_by: origin.changedBy },
          'settings overrides restored: the store had lost them',
        ),
      onError: (err) => this.syncErrors.note(err.message),
    });
    this.upstream = new UpstreamClient(config.timeouts);
    this.self = {
      id: this.admission.instanceId,
      host: hostname(),
      pid: process.pid,
      started_at: new Date(this.startedAt).toISOString(),
    };
  }

  get config(): GatewayConfig {
    return this.current.config;
  }

  get registry(): ChannelRegistry {
    return this.current.registry;
  }

  /** The settings in force: defaults < config file < overrides shared through the store. */
  get settings(): GatewaySettings {
    return this.inForce;
  }

  /** Follows the shared settings and starts the presence heartbeat; logs through `log` from now on. */
  async start(log: FastifyBaseLogger): Promise<void> {
    this.log = log;
    try {
      await this.sync.start();
    } catch (err) {
      log.error(
        { err: (err as Error).message },
        'settings sync could not start; using the configured settings',
      );
    }
    // With local_share, each heartbeat also counts the live instances: a share is max ÷ the instances last seen.
    const counting = this.config.redis?.store_failure_mode === 'local_share';
    const beat = () =>
      void this.store.presence
        .announce(this.self)
        .then(async () => {
          if (counting) this.countFleet((await this.store.presence.list(INSTANCE_MAX_AGE_MS)).length);
        })
        .catch((err: Error) => log.warn({ err: err.message }, 'instance heartbeat failed'));
    beat();
    this.heartbeat = setInterval(beat, HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  private countFleet(n: number): void {
    const now = Date.now();
    this.fleetCounts.push({ at: now, n });
    while (this.fleetCounts.length > 0 && this.fleetCounts[0]!.at < now - INSTANCE_MAX_AGE_MS)
      this.fleetCounts.shift();
    this.fleetSeen = Math.max(...this.fleetCounts.map((c) => c.n));
  }

  /** Recomputes the settings after the overrides or the config file changed. */
  applySettings = (): GatewaySettings => {
    this.inForce = gatewaySettings.merge(gatewaySettings.defaults, {
      ...this.current.config.settings,
      ...this.overrides,
    });
    this.admission.updateSettings(admissionPart(this.inForce));
    return this.inForce;
  };

  /**
   * After a reload put a new configuration in force: its settings apply, and the requests waiting for a slot resolve
   * their candidates again under it (a lowered max, a disabled or removed channel reach them too).
   */
  configReplaced = (): void => {
    this.applySettings();
    this.admission.configChanged();
  };

  /** Writes a settings update for every instance; a bad combination is rejected before anything changes. */
  putSettings = async (update: GatewaySettingsUpdate): Promise<GatewaySettings> => {
    const merged = { ...this.overrides, ...update };
    await this.sync.write(update);
    this.overrides = merged;
    return this.applySettings();
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

  /** Where each setting in force comes from, and the overrides' last change (GET /admin/settings and /admin/status). */
  settingsSource = (): Record<string, unknown> =>
    settingsSource(this.current.config.settings, this.overrides, this.sync.origin) as unknown as Record<
      string,
      unknown
    >;

  status = async (): Promise<Record<string, unknown>> => ({
    instance_id: this.admission.instanceId,
    uptime_s: Math.round((Date.now() - this.startedAt) / 1000),
    store: this.store.kind,
    redis: await this.redisHealth(),
    config: this.current.describe(),
    settings_overrides: this.overrides,
    settings_source: this.settingsSource(),
    instances: await settleWithin(this.store.presence.list(INSTANCE_MAX_AGE_MS), PRESENCE_WAIT_MS).catch(
      () => [],
    ),
    live_leases: this.admission.stats().liveLeases,
    store_failure_mode: this.config.redis?.store_failure_mode ?? 'fail_closed',
    ...(this.config.redis?.store_failure_mode === 'local_share' ? { instances_seen: this.fleetSeen } : {}),
  });

  /**
   * Lets `closeHttp` finish the in-flight requests, closes admission (releasing every lease), then leaves the instance
   * list, and closes the settings sync, the upstream connections and the store it opened. The heartbeat goes on
   * through the drain: an instance still holding slots stays listed as live, so `slotgate doctor` never calls its
   * slots a dead owner's (and `--fix` never releases them).
   */
  async close(closeHttp: () => Promise<void>): Promise<void> {
    try {
      await closeHttp();
    } finally {
      await this.admission.close();
      clearInterval(this.heartbeat);
      await settleWithin(this.store.presence.leave(this.self.id), PRESENCE_WAIT_MS).catch(() => {});
      await this.sync.close();
      await this.upstream.close().catch(() => {});
      if (this.ownsStore) await this.store.close();
    }
  }

  private async redisHealth(): Promise<Record<string, unknown> | null> {
    if (this.store.kind !== 'redis') return null;
    const store = this.store;
    const [health, nodes] = await Promise.all([
      store.health(),
      store instanceof RedisStore ? store.nodes() : undefined,
    ]);
    return {
      ...(health.healthy
        ? { healthy: true, latency_ms: health.latencyMs }
        : { healthy: false, error: health.error }),
      ...(store instanceof RedisStore && nodes
        ? {
            topology: store.topologyKind,
            nodes: nodes.map((n) => ({
              address: n.address,
              role: n.role,
              healthy: n.healthy,
              ...(n.latencyMs !== undefined && { latency_ms: n.latencyMs }),
              ...(n.error !== undefined && { error: n.error }),
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
