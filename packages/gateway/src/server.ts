/**
 * The gateway (spec §7): a Fastify app that admits every request through slotgate. It owns the store, the admission
 * engine, settings propagation, config reloads and graceful shutdown.
 */
import { randomUUID, createHash } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { basename, dirname } from 'node:path';
import Fastify, { type FastifyInstance, type FastifyError } from 'fastify';
import {
  MemoryStore,
  RedisStore,
  createAdmission,
  type Admission,
  type AdmissionEvent,
  type SharedSettings,
  type SlotStore,
} from 'slotgate';
import { registerAdminRoutes } from './admin.js';
import { ChannelRegistry } from './channels.js';
import { ConfigError, loadConfigFile, type GatewayConfig } from './config.js';
import { HttpError, errorBody, toHttpError } from './http-errors.js';
import { proxyRequest, bearerToken, shapeOf, type ProxyResult } from './proxy.js';
import { UpstreamClient } from './upstream.js';
import { GatewayMetrics } from './metrics.js';
import {
  admissionPart,
  gatewaySettings,
  type GatewaySettings,
  type GatewaySettingsUpdate,
} from './settings.js';
import { dashboardHtml } from './dashboard.js';

export const CLIENT_ROUTES = [
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/embeddings',
  '/v1/images/generations',
  '/v1/responses',
  '/v1/messages',
] as const;

export interface GatewayOptions {
  config: GatewayConfig;
  /** When set, the file is watched and the channel list reloads when it changes. */
  configPath?: string;
  /** pino logger options, or false for none. @default from config.server.log_level */
  logger?: boolean | Record<string, unknown>;
  /** Applied to every configuration loaded on reload (the command line's --port/--host/--redis overrides). */
  transformConfig?: (config: GatewayConfig) => GatewayConfig;
  /** Use this store instead of the one the config describes (tests, embedding). */
  store?: SlotStore;
  onResult?: (result: ProxyResult) => void;
}

export interface Gateway {
  app: FastifyInstance;
  admission: Admission;
  store: SlotStore;
  readonly config: GatewayConfig;
  /** The settings in force: defaults < config file < overrides shared through the store. */
  readonly settings: GatewaySettings;
  /** Re-reads the config file; on error keeps the old configuration and returns the error. */
  reload(): Promise<ConfigError | undefined>;
  listen(): Promise<string>;
  /** Graceful: stop accepting, let in-flight requests finish up to shutdown_timeout_ms, release every lease. */
  close(): Promise<void>;
}

/** An instance not heard of for this long drops out of the instance list (three missed heartbeats). */
const INSTANCE_MAX_AGE_MS = 15_000;

const REDACT = [
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'headers.authorization',
  'headers["x-api-key"]',
];

export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  let config = options.config;
  let registry = new ChannelRegistry(config.channels, config.tokens);
  let configVersion = 1;
  let configHash = hashConfig(config);
  let configLoadedAt = new Date().toISOString();
  let lastConfigError: string | null = null;
  const startedAt = Date.now();

  // Fixed at start (like the rest of `server`): a reload does not change the limit Fastify enforces.
  const bodyLimit = config.server.body_limit_bytes;
  const app = Fastify({
    logger:
      options.logger === false
        ? false
        : {
            level: config.server.log_level,
            redact: { paths: REDACT, censor: '[redacted]' },
            ...(typeof options.logger === 'object' ? options.logger : {}),
          },
    bodyLimit,
    requestIdHeader: 'x-request-id',
    genReqId: () => randomUUID(),
    forceCloseConnections: 'idle',
  });

  const store: SlotStore =
    options.store ??
    (config.redis
      ? new RedisStore({
          url: config.redis.url,
          prefix: config.redis.prefix,
          timeoutMs: config.redis.timeout_ms,
        })
      : new MemoryStore());

  const onEvent = (event: AdmissionEvent) => {
    if (event.type === 'settings_changed') return;
    const level = event.type === 'lease_lost' || event.type === 'release_abandoned' ? 'error' : 'warn';
    const { type, ...rest } = event;
    app.log[level](
      { event: type, ...('error' in rest ? { ...rest, error: rest.error.message } : rest) },
      `admission: ${type}`,
    );
  };
  const metrics = new GatewayMetrics({
    // read at scrape time, after the engine below exists
    admission: () => admission,
    channels: () => registry,
    storeKind: store.kind,
    storeUp: async () => (await store.health()).healthy,
    configVersion: () => configVersion,
  });
  // Settings: defaults < config file < overrides (admin PUT; shared with every instance on the store).
  let overrides: GatewaySettingsUpdate = {};
  let settings: GatewaySettings = gatewaySettings.merge(gatewaySettings.defaults, config.settings);
  const admission = createAdmission({
    store,
    settings: admissionPart(settings),
    onEvent,
    onAdmission: metrics.observeAdmission,
  });
  const applySettings = (): GatewaySettings => {
    settings = gatewaySettings.merge(gatewaySettings.defaults, { ...config.settings, ...overrides });
    admission.updateSettings(admissionPart(settings));
    return settings;
  };
  const sync: SharedSettings<GatewaySettingsUpdate> = store.sharedSettings({
    parse: gatewaySettings.parse,
    onOverrides: (o) => {
      overrides = o;
      applySettings();
      app.log.info({ overrides: o }, 'settings applied');
    },
    onError: (err) => app.log.error({ err: err.message }, 'settings sync'),
  });
  try {
    await sync.start();
  } catch (err) {
    app.log.error(
      { err: (err as Error).message },
      'settings sync could not start; using the configured settings',
    );
  }
  const putSettings = async (update: GatewaySettingsUpdate): Promise<GatewaySettings> => {
    // Validate against what is in force first: a bad combination changes nothing anywhere.
    const merged = { ...overrides, ...update };
    await sync.write(update);
    overrides = merged;
    return applySettings();
  };

  const upstream = new UpstreamClient(config.timeouts);

  // Every instance announces itself every 5 s for the dashboard's instance list.
  const self = {
    id: admission.instanceId,
    host: hostname(),
    pid: process.pid,
    started_at: new Date(startedAt).toISOString(),
  };
  const beat = () =>
    void store.presence
      .announce(self)
      .catch((err: Error) => app.log.warn({ err: err.message }, 'instance heartbeat failed'));
  beat();
  const heartbeatTimer = setInterval(beat, 5000);
  heartbeatTimer.unref();

  // One parser for every body: the raw bytes, forwarded as-is; the handlers parse what they need.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

  app.addHook('onSend', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });

  // On close, the HTTP server drops only the keep-alive connections idle at that moment; one whose response was still
  // streaming would stay open until keepAliveTimeout (72 s) or the forced close and hold the shutdown with it. So while
  // draining, each connection is dropped as soon as its last response has ended.
  let draining = false;
  app.addHook('onResponse', async () => {
    if (draining) setImmediate(() => app.server.closeIdleConnections());
  });

  app.setErrorHandler((err: FastifyError, request, reply) => {
    const shape = shapeOf(request.url);
    let httpError: HttpError;
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      httpError = new HttpError('request_too_large', `the request body is larger than ${bodyLimit} bytes`);
    } else if (typeof err.code === 'string' && err.code.startsWith('FST_ERR_CTP')) {
      httpError = new HttpError('invalid_request_error', err.message);
    } else {
      httpError = toHttpError(err);
    }
    if (httpError.code === 'internal_error') request.log.error({ err }, 'internal error');
    if (request.url.startsWith('/v1/')) metrics.countResponse('gateway', httpError.status);
    if (reply.sent || reply.raw.headersSent) return;
    void reply.code(httpError.status).headers(httpError.headers).send(errorBody(httpError, shape));
  });

  app.setNotFoundHandler((request, reply) => {
    const err = new HttpError('not_found', `no route ${request.method} ${request.url.split('?')[0]}`);
    void reply.code(404).send(errorBody(err, shapeOf(request.url)));
  });

  const ctx = {
    admission,
    registry: () => registry,
    config: () => config,
    upstream,
    settings: () => settings,
    onResult: (result: ProxyResult) => {
      metrics.countResponse(result.source, result.status);
      options.onResult?.(result);
    },
  };
  for (const path of CLIENT_ROUTES)
    app.post(path, (request, reply) => proxyRequest(ctx, request, reply, path));

  app.get('/v1/models', async (request) => {
    const token = registry.authenticate(bearerToken(request, 'openai'));
    if (!token) throw new HttpError('invalid_api_key', 'missing or invalid API key');
    return {
      object: 'list',
      data: registry
        .models(token.group)
        .map((id) => ({ id, object: 'model', created: 0, owned_by: 'slotgate' })),
    };
  });

  app.get('/healthz', async () => ({ ok: true }));

  app.get('/metrics', async (_request, reply) => {
    void reply.header('content-type', metrics.register.contentType);
    return metrics.text();
  });

  app.get('/dashboard', async (_request, reply) => {
    void reply.header('content-type', 'text/html; charset=utf-8').header('cache-control', 'no-store');
    return dashboardHtml();
  });

  const redisHealth = async () => {
    if (store.kind !== 'redis') return null;
    const health = await store.health();
    return health.healthy
      ? { healthy: true, latency_ms: health.latencyMs }
      : { healthy: false, error: health.error };
  };

  registerAdminRoutes(app, {
    admission,
    registry: () => registry,
    config: () => config,
    putSettings,
    settings: () => settings,
    status: async () => ({
      instance_id: admission.instanceId,
      uptime_s: Math.round((Date.now() - startedAt) / 1000),
      store: store.kind,
      redis: await redisHealth(),
      config: {
        source: config.source,
        version: configVersion,
        hash: configHash,
        loaded_at: configLoadedAt,
        last_error: lastConfigError,
      },
      settings_overrides: overrides,
      instances: await settleWithin(store.presence.list(INSTANCE_MAX_AGE_MS), 1000).catch(() => []),
      live_leases: admission.stats().liveLeases,
    }),
  });

  const reload = async (): Promise<ConfigError | undefined> => {
    if (!options.configPath) return undefined;
    try {
      const loaded = await loadConfigFile(options.configPath);
      const next = options.transformConfig ? options.transformConfig(loaded) : loaded;
      const hash = hashConfig(next);
      // The file is valid again, even when it is back to the configuration in force: the error is over.
      lastConfigError = null;
      if (hash === configHash) return undefined;
      if (
        JSON.stringify(next.redis) !== JSON.stringify(config.redis) ||
        JSON.stringify(next.server) !== JSON.stringify(config.server)
      ) {
        app.log.warn('config reload: changes to `server` and `redis` take effect only after a restart');
      }
      config = next;
      registry = new ChannelRegistry(config.channels, config.tokens);
      configVersion++;
      configHash = hash;
      configLoadedAt = new Date().toISOString();
      lastConfigError = null;
      applySettings();
      app.log.info({ version: configVersion, channels: registry.channels.length }, 'configuration reloaded');
      return undefined;
    } catch (err) {
      const error =
        err instanceof ConfigError ? err : new ConfigError(options.configPath, [(err as Error).message]);
      lastConfigError = error.message;
      metrics.configReloadErrors.inc();
      app.log.error(
        { err: error.message },
        'configuration reload rejected; the previous configuration stays in force',
      );
      return error;
    }
  };

  let watcher: FSWatcher | undefined;
  if (options.configPath) {
    const file = basename(options.configPath);
    let timer: NodeJS.Timeout | undefined;
    // Watch the directory: editors and deploy tools often replace the file rather than write into it.
    watcher = watch(dirname(options.configPath), (_event, name) => {
      if (name !== null && name !== file) return;
      clearTimeout(timer);
      timer = setTimeout(() => void reload(), 150);
    });
    watcher.unref();
  }

  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      watcher?.close();
      clearInterval(heartbeatTimer);
      await settleWithin(store.presence.leave(self.id), 1000).catch(() => {});
      draining = true;
      const force = setTimeout(() => app.server.closeAllConnections?.(), config.server.shutdown_timeout_ms);
      force.unref();
      try {
        await app.close();
      } finally {
        clearTimeout(force);
        await admission.close();
        await sync.close();
        await upstream.close().catch(() => {});
        if (!options.store) await store.close();
      }
    })());

  return {
    app,
    admission,
    store,
    get config() {
      return config;
    },
    get settings() {
      return settings;
    },
    reload,
    listen: () => app.listen({ host: config.server.host, port: config.server.port }),
    close,
  };
}

/**
 * Rejects after `ms`. A raw client call on a Redis that is down can take seconds to fail (ioredis holds it for a
 * reconnect); the admin status and shutdown must not wait on it.
 */
function settleWithin<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function hashConfig(config: GatewayConfig): string {
  return createHash('sha256')
    .update(JSON.stringify({ ...config, source: undefined }))
    .digest('hex')
    .slice(0, 12);
}

export async function readDemoConfigText(): Promise<string> {
  return readFile(new URL('./demo.yaml', import.meta.url), 'utf8');
}
