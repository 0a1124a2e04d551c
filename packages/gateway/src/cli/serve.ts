/** `slotgate serve`: runs the gateway until SIGTERM or SIGINT; SIGHUP reloads the config file. */
import {
  ConfigError,
  loadConfigFile,
  parseConfig,
  parseConfigText,
  readDemoConfigText,
  type GatewayConfig,
} from '../config.js';
import { createGateway } from '../server.js';
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
  const { source, settings, ...rest } = config;
  const raw: Record<string, unknown> = {
    ...structuredClone(rest),
    settings,
    server: {
      ...config.server,
      ...(opts.host ? { host: opts.host } : {}),
      ...(opts.port !== undefined ? { port: Number(opts.port) } : {}),
    },
  };
  const section = withTarget(raw.redis as Record<string, unknown> | undefined, redis);
  if (section) raw.redis = section;
  return parseConfig(raw, source, env);
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
    if (err instanceof UsageError) {
      console.error(`slotgate serve: ${err.message}`);
      process.exit(2);
    }
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  const gateway = await createGateway({
    config,
    ...(path
      ? { configPath: path, transformConfig: (next: GatewayConfig) => withOverrides(next, opts, redis, env) }
      : {}),
  });
  const address = await gateway.listen();
  gateway.app.log.info(
    { address, store: gateway.store.kind, channels: config.channels.length, config: config.source },
    `slotgate listening on ${address}`,
  );
  if (config.tokens.length === 0)
    gateway.app.log.warn('no client tokens configured: every caller is accepted in group "default"');
  if (!config.admin.token) gateway.app.log.warn('no admin token configured: the admin API is disabled');

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    gateway.app.log.info({ signal }, 'shutting down: finishing in-flight requests');
    gateway.close().then(
      () => process.exit(0),
      (err: unknown) => {
        gateway.app.log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', () => void gateway.reload());
}
