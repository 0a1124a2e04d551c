/**
 * Config reloads: on a change to the file's directory or on demand (SIGHUP), a valid file that differs is put in force;
 * a rejected one changes nothing. `server` and `redis` are read once at start: a change to them waits for a restart.
 */
import { createHash } from 'node:crypto';
import { watch } from 'node:fs';
import { basename, dirname } from 'node:path';
import type { FastifyBaseLogger } from 'fastify';
import { ChannelRegistry } from './channels.js';
import { ConfigError, loadConfigFile } from './config.js';
import type { GatewayConfig } from './config-schema.js';
import type { GatewayMetrics } from './metrics.js';

/** Changes to one file within this long make one reload: editors and deploy tools write in several steps. */
const DEBOUNCE_MS = 150;

export function hashConfig(config: GatewayConfig): string {
  return createHash('sha256')
    .update(JSON.stringify({ ...config, source: undefined }))
    .digest('hex')
    .slice(0, 12);
}

/** The configuration in force, its channel registry, and what /admin/status reports about it. */
export class ConfigInForce {
  version = 0;
  config!: GatewayConfig;
  registry!: ChannelRegistry;
  hash!: string;
  loadedAt!: string;
  lastError: string | null = null;

  constructor(config: GatewayConfig) {
    this.replace(config, hashConfig(config));
  }

  /** Swaps in a new configuration; a request sees the old registry or the new one, never a mix. */
  replace(next: GatewayConfig, hash: string): void {
    this.config = next;
    this.registry = new ChannelRegistry(next.channels, next.tokens);
    this.version++;
    this.hash = hash;
    this.loadedAt = new Date().toISOString();
    this.lastError = null;
  }

  describe(): Record<string, unknown> {
    const { config, version, hash, loadedAt, lastError } = this;
    return { source: config.source, version, hash, loaded_at: loadedAt, last_error: lastError };
  }
}

export interface ReloadOptions {
  path: string;
  /** Applied to every configuration loaded (the command line's --port/--host/--redis overrides). */
  transform?: (config: GatewayConfig) => GatewayConfig;
  current: ConfigInForce;
  /** Called after a new configuration is in force (settings from the file apply again, waiting requests follow it). */
  onReplaced: () => void;
  metrics: Pick<GatewayMetrics, 'configReloadErrors'>;
  log: FastifyBaseLogger;
}

/** Reloads on demand and whenever the file changes; `close` stops watching it. */
export function watchConfig(options: ReloadOptions) {
  const { path, current, log } = options;
  /** Re-reads the config file; on error keeps the old configuration and returns the error. */
  const reload = async (): Promise<ConfigError | undefined> => {
    try {
      const loaded = await loadConfigFile(path);
      const next = options.transform ? options.transform(loaded) : loaded;
      const hash = hashConfig(next);
      // The file is valid again, even when it is back to the configuration in force: the error is over.
      current.lastError = null;
      if (hash === current.hash) return undefined;
      const changed = (key: 'redis' | 'server') =>
        JSON.stringify(next[key]) !== JSON.stringify(current.config[key]);
      if (changed('redis') || changed('server'))
        log.warn('config reload: changes to `server` and `redis` take effect only after a restart');
      current.replace(next, hash);
      for (const warning of next.warnings) log.warn({ config: path }, warning);
      options.onReplaced();
      log.info(
        { version: current.version, channels: current.registry.channels.length },
        'configuration reloaded',
      );
      return undefined;
    } catch (err) {
      const error = err instanceof ConfigError ? err : new ConfigError(path, [(err as Error).message]);
      current.lastError = error.message;
      options.metrics.configReloadErrors.inc();
      log.error(
        { err: error.message },
        'configuration reload rejected; the previous configuration stays in force',
      );
      return error;
    }
  };

  const file = basename(path);
  let timer: NodeJS.Timeout | undefined;
  // Watch the directory: editors and deploy tools often replace the file rather than write into it.
  const watcher = watch(dirname(path), (_event, name) => {
    if (name !== null && name !== file) return;
    clearTimeout(timer);
    timer = setTimeout(() => void reload(), DEBOUNCE_MS);
  });
  watcher.unref();
  return { reload, close: () => watcher.close() };
}
