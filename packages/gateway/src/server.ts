/**
 * A gateway: a Fastify app that admits every request through slotgate, composed of its runtime (store, admission,
 * settings, presence), its HTTP app and, with a config file, its reloader.
 */
import type { FastifyInstance } from 'fastify';
import type { Admission, SlotStore } from 'slotgate';
import { setTimeout as sleep } from 'node:timers/promises';
import { buildApp, closeApp, type AppDeps } from './app.js';
import type { ConfigError } from './config.js';
import { Drain } from './drain.js';
import type { GatewayConfig } from './config-schema.js';
import { watchConfig } from './reload.js';
import { GatewayRuntime } from './runtime.js';
import type { GatewaySettings } from './settings.js';

export interface GatewayOptions extends Pick<AppDeps, 'logger' | 'onResult' | 'history'> {
  config: GatewayConfig;
  /** When set, the file is watched and the channel list reloads when it changes. */
  configPath?: string;
  /** Applied to every configuration loaded on reload (the command line's --port/--host/--redis overrides). */
  transformConfig?: (config: GatewayConfig) => GatewayConfig;
  /** Use this store instead of the one the config describes (tests, embedding). */
  store?: SlotStore;
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
  /**
   * Graceful: /readyz fails at once; after server.drain_delay_ms stop accepting and answer waiting requests 503; let
   * in-flight requests finish up to server.drain_timeout_ms; release every lease.
   */
  close(): Promise<void>;
}

export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  const runtime = new GatewayRuntime({ config: options.config, store: options.store });
  const drain = new Drain();
  const app = buildApp({
    drain,
    admission: runtime.admission,
    registry: () => runtime.registry,
    config: () => runtime.config,
    settings: () => runtime.settings.value,
    putSettings: runtime.settings.put,
    status: runtime.status,
    settingsSource: runtime.settings.source,
    ready: runtime.ready,
    metrics: runtime.metrics,
    upstream: runtime.upstream,
    logger: options.logger,
    onResult: options.onResult,
    history: options.history,
  });
  await runtime.start(app.log);
  const reloader = options.configPath
    ? watchConfig({
        path: options.configPath,
        transform: options.transformConfig,
        current: runtime.current,
        onReplaced: runtime.configReplaced,
        metrics: runtime.metrics,
        log: app.log,
      })
    : undefined;

  const shutdown = async () => {
    reloader?.close();
    drain.begin();
    // the values in force when the shutdown begins count
    const { drain_delay_ms, drain_timeout_ms } = runtime.config.server;
    if (drain_delay_ms > 0) {
      app.log.info({ drain_delay_ms }, '/readyz fails now; still serving until the drain delay ends');
      await sleep(drain_delay_ms);
    }
    await runtime.close(() => {
      drain.close();
      return closeApp(app, drain_timeout_ms);
    });
  };
  let closing: Promise<void> | undefined;
  return {
    app,
    admission: runtime.admission,
    store: runtime.store,
    get config() {
      return runtime.config;
    },
    get settings() {
      return runtime.settings.value;
    },
    reload: async () => reloader?.reload(),
    listen: () => app.listen({ host: runtime.config.server.host, port: runtime.config.server.port }),
    close: () => (closing ??= shutdown()),
  };
}
