/**
 * The soak's parameters and the gateways' config file. The lease TTL is the smallest the config accepts, so a
 * `CLIENT PAUSE` past it stays short; `c0`'s max alternates at every reload, so each reload changes a limit in force.
 */

export interface SoakOptions {
  durationS: number;
  /** Seconds between two config reloads, Redis restarts, `CLIENT PAUSE`s (the first one after one period). */
  reloadEveryS: number;
  restartEveryS: number;
  pauseEveryS: number;
  /** Client requests per second, both gateways together (Poisson arrivals). */
  ratePerS: number;
  seed: number;
}

export const DEFAULTS = {
  reloadEveryS: 60,
  restartEveryS: 300,
  pauseEveryS: 420,
  ratePerS: 30,
  seed: 1,
} as const;

export const LEASE_TTL_MS = 5000;
/** How long a `CLIENT PAUSE` lasts: past the lease TTL, so every lease in flight is fenced. */
export const PAUSE_MS = LEASE_TTL_MS + 1500;
/**
 * How long Redis stays down at a restart: longer than ioredis's first reconnection attempt, so the open resend race
 * of docs/redis.md ("a command in flight when the connection drops") is not what the soak exercises.
 */
export const RESTART_DOWN_MS = 1500;
export const WAIT_TIMEOUT_MS = 2000;
export const CLIENT_TOKEN = 'soak-client-token';

/** Non-streamed answers are held this long; streamed ones send this many chunks this far apart. */
export const UPSTREAM = { holdMs: 200, chunks: 6, chunkDelayMs: 50 } as const;
/** The answers of the long channel: longer than a `CLIENT PAUSE`, so a pause catches some of them mid-call. */
export const LONG_UPSTREAM = { holdMs: 6000, chunks: 15, chunkDelayMs: 400 } as const;

export interface SoakChannel {
  id: string;
  models: string[];
  /** The max of the first config; a second value makes the reloads alternate between the two. */
  max: readonly [number] | readonly [number, number];
  /** Answers with LONG_UPSTREAM. */
  long?: boolean;
}

export const CHANNELS: readonly SoakChannel[] = [
  { id: 'c0', models: ['soak-shared'], max: [4, 2] },
  { id: 'c1', models: ['soak-shared'], max: [3] },
  { id: 'c2', models: ['soak-solo'], max: [2] },
  { id: 'c3', models: ['soak-long'], max: [3], long: true },
];
/** The models the clients ask for, with their shares of the requests. */
export const MODELS = [
  ['soak-shared', 0.68],
  ['soak-solo', 0.3],
  ['soak-long', 0.02],
] as const;

/** The max of `channel` in the config of reload number `version` (0: the first file). */
export const maxAt = (channel: SoakChannel, version: number): number =>
  channel.max[version % channel.max.length]!;

/** The config file of reload number `version`, for gateways on `redisUrl` before an upstream at `channelUrl(id)`. */
export function configDoc(version: number, redisUrl: string, channelUrl: (id: string) => string) {
  return {
    server: { host: '127.0.0.1', port: 0, log_format: 'json', drain_timeout_ms: 2000 },
    redis: { url: redisUrl, prefix: 'soak' },
    tokens: [{ key: CLIENT_TOKEN, name: 'soak' }],
    channels: CHANNELS.map((c) => ({
      id: c.id,
      type: 'openai',
      base_url: channelUrl(c.id),
      key: `upstream-key-${c.id}`,
      models: c.models,
      max_concurrency: maxAt(c, version),
    })),
    settings: { lease_ttl_ms: LEASE_TTL_MS, wait_timeout_ms: WAIT_TIMEOUT_MS },
  };
}
