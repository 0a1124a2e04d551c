/** `slotgate serve`: runs the gateway until SIGTERM or SIGINT; SIGHUP reloads the config file. */
import { ConfigError, loadConfigFile, parseConfig, parseConfigText, readDemoConfigText } from '../config.js';
import type { GatewayConfig } from '../config-schema.js';
import { describeRedis } from '../config-redis.js';
import { RedisStore } from 'slotgate';
import { createGateway, type Gateway } from '../server.js';
import { redisTarget, UsageError, withTarget, type RedisFlags, type TargetChoice } from './redis-target.js';

export interface ServeOptions extends RedisFlags {
  config?: string;
  port?: string;
  host?: string;
}

function withOverrides(
  config: GatewayConfig,
  opts: ServeOptions,
  redis: TargetChoice,
  env: NodeJS.ProcessEnv,
): GatewayConfig {
  // the warnings were the file's; its settings come back already canonical
  const { source, settings, warnings, ...rest } = config;
  const raw: Record<string, unknown> = {
    ...structuredClone(rest),
    settings,
    server: {
      ...config.server,
      ...(opts.host ? { host: opts.host } : {}),
      ...(opts.port !== undefined ? { port: portOption(opts.port) } : {}),
    },
  };
  const section = withTarget(raw.redis as Record<string, unknown> | undefined, redis);
  if (section) raw.redis = section;
  return Object.freeze({ ...parseConfig(raw, source, env), warnings });
}

/** `--port`: an integer 0–65535 (0: any free port); anything else is a usage error, not a config error. */
function portOption(text: string): number {
  const port = /^\d{1,5}$/.test(text) ? Number(text) : NaN;
  if (!(port <= 65535)) {
    throw new UsageError(
      `--port must be an integer 1–65535 (or 0 for any free port), got ${JSON.stringify(text)}`,
    );
  }
  return port;
}

/** Why listening failed, and what to do. */
const LISTEN_PROBLEMS: Record<string, string> = {
  EADDRINUSE:
    'the address is in use (EADDRINUSE) — stop the process that has it or pick another port with --port',
  EACCES: 'permission denied (EACCES) — ports below 1024 need privileges; pick another port with --port',
  EADDRNOTAVAIL: 'no such address on this machine (EADDRNOTAVAIL) — check --host',
};

function listenProblem(err: NodeJS.ErrnoException, host: string, port: number): string {
  const where = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  return `cannot listen on ${where}: ${LISTEN_PROBLEMS[err.code ?? ''] ?? err.message}`;
}

/** The store in force, for the start-up line: never a password. */
function describeStore(config: GatewayConfig): string {
  return config.redis
    ? `${describeRedis(config.redis)}, prefix "${config.redis.prefix}"`
    : 'embedded in-process store (this instance only)';
}

export async function serve(opts: ServeOptions, env: NodeJS.ProcessEnv = process.env): Promise<void> {
  const path = opts.config ?? env.SLOTGATE_CONFIG;
  let config: GatewayConfig;
  let redis: TargetChoice = {};
  try {
    redis = redisTarget(opts, env);
    config = path
      ? await loadConfigFile(path, env)
      : parseConfigText(await readDemoConfigText(), '<built-in demo>', env);
    config = withOverrides(config, opts, redis, env);
  } catch (err) {
    if (!(err instanceof UsageError || err instanceof ConfigError)) throw err;
    console.error(`slotgate serve: ${err.message}`);
    process.exit(2);
  }
  const gateway = await createGateway({
    config,
    ...(path
      ? { configPath: path, transformConfig: (next: GatewayConfig) => withOverrides(next, opts, redis, env) }
      : {}),
  });
  // a URL at a Cluster node, or a Cluster at a plain node, would pass readiness and fail every acquire
  const mismatch = gateway.store instanceof RedisStore ? await gateway.store.topologyMismatch() : undefined;
  if (mismatch) {
    console.error(`slotgate serve: ${mismatch}`);
    await gateway.close().catch(() => {});
    process.exit(2);
  }
  const { host, port } = config.server;
  let address: string;
  try {
    address = await gateway.listen();
  } catch (err) {
    console.error(`slotgate serve: ${listenProblem(err as NodeJS.ErrnoException, host, port)}`);
    // nothing stays behind: the instance leaves the instance list and the store closes
    await gateway.close().catch(() => {});
    process.exit(1);
  }
  // before the start-up line: a signal sent as soon as that line is seen must drain, not kill
  stopOnSignals(gateway);
  for (const warning of config.warnings) gateway.app.log.warn({ config: config.source }, warning);
  gateway.app.log.info(
    {
      address,
      dashboard: `${address}/dashboard`,
      store: gateway.store.kind,
      store_in_use: describeStore(config),
      channels: config.channels.length,
      config: config.source,
    },
    `slotgate listening on ${address} — dashboard ${address}/dashboard — store: ${describeStore(config)}`,
  );
  if (config.redis) {
    const health = await gateway.store.health();
    if (!health.healthy)
      gateway.app.log.error(
        { store_in_use: describeStore(config), err: health.error },
        `cannot reach ${describeRedis(config.redis)}: ${health.error ?? 'no answer'} — store_failure_mode ${config.redis.store_failure_mode} applies until it answers; check the address and that Redis is running`,
      );
  }
  if (config.tokens.length === 0)
    gateway.app.log.warn('no client tokens configured: every caller is accepted in group "default"');
  if (!config.admin.token) gateway.app.log.warn('no admin token configured: the admin API is disabled');
}

/** Exit code when a second SIGINT/SIGTERM cuts the drain short (docs/operations.md). */
export const EXIT_INTERRUPTED = 130;

/**
 * SIGTERM or SIGINT: drain (Gateway.close: /readyz fails, waiting requests are answered, in-flight ones finish up to
 * server.drain_timeout_ms, every lease goes back), exit 0; a second
 * one exits at once with EXIT_INTERRUPTED, the leases left to expire. SIGHUP reloads the config file.
 */
function stopOnSignals(gateway: Gateway): void {
  let stopping = false;
  const stop = (signal: string) => {
    const log = gateway.app.log;
    if (stopping) {
      log.warn(
        { signal },
        'second signal: stopping now; requests still in flight are cut off, their leases expire after one lease TTL',
      );
      process.exit(EXIT_INTERRUPTED);
    }
    stopping = true;
    const { server } = gateway.config;
    log.info(
      { signal, drain_delay_ms: server.drain_delay_ms, drain_timeout_ms: server.drain_timeout_ms },
      `shutting down: finishing in-flight requests (send ${signal} again to stop at once)`,
    );
    gateway.close().then(
      () => {
        log.info('shutdown complete');
        process.exit(0);
      },
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', () => void gateway.reload());
}
