/**
 * Once a second: each gateway's process figures from its own /metrics (prom-client's default metrics, so the
 * gateway runs unchanged), Redis's DBSIZE and used_memory, and the upstream's peak per channel in that second. A
 * source that does not answer in time (Redis paused or down, a gateway stalled) leaves a gap, not a stall: every tick
 * starts on time, whatever the ticks before it still wait for.
 */
import { Redis } from 'ioredis';
import { request } from 'undici';
import { parsePrometheusText, select, valueOf } from '../../test/helpers/prom-text.js';
import type { Peaks } from './peaks.js';

export interface GatewaySample {
  rssBytes: number;
  heapUsedBytes: number;
  eventLoopP99S: number;
  activeHandles: number;
  /** nodejs_active_handles by type (Socket, Timeout, …): what a growing handle count is made of. */
  handlesByType: Record<string, number>;
  configVersion: number;
}

export interface Sample {
  /** Seconds into the run, when the tick started. */
  atS: number;
  /** One per gateway, in order; null when its /metrics did not answer in time. */
  gateways: (GatewaySample | null)[];
  redis: { keys: number; usedMemoryBytes: number } | null;
  /** The upstream's highest in flight per channel since the previous tick. */
  peaks: Record<string, number>;
}

/** A gateway's /metrics waits for its store's PING (up to `redis.timeout_ms`, 1 s) while Redis is down or paused. */
const SCRAPE_TIMEOUT_MS = 3000;
/** Redis's own figures: a Redis that does not answer within the second leaves a gap. */
const REDIS_TIMEOUT_MS = 950;

/** A gateway's figures from its /metrics. */
export async function scrape(gateway: string, timeoutMs = SCRAPE_TIMEOUT_MS): Promise<GatewaySample> {
  const res = await request(`${gateway}/metrics`, { signal: AbortSignal.timeout(timeoutMs) });
  const exp = parsePrometheusText(await res.body.text());
  return {
    rssBytes: valueOf(exp, 'process_resident_memory_bytes'),
    heapUsedBytes: valueOf(exp, 'nodejs_heap_size_used_bytes'),
    eventLoopP99S: valueOf(exp, 'nodejs_eventloop_lag_p99_seconds'),
    activeHandles: valueOf(exp, 'nodejs_active_handles_total'),
    handlesByType: Object.fromEntries(
      select(exp, 'nodejs_active_handles').map((x) => [x.labels.type ?? '?', x.value]),
    ),
    configVersion: valueOf(exp, 'slotgate_config_version'),
  };
}

export class Sampler {
  readonly samples: Sample[] = [];
  private timer: NodeJS.Timeout | undefined;
  private readonly pending = new Set<Promise<void>>();
  private readonly redis: Redis;

  constructor(
    private readonly gateways: readonly string[],
    redisUrl: string,
    private readonly peaks: Peaks,
    private readonly clock: () => number,
  ) {
    // fails fast while Redis is down or paused, and reconnects after a restart
    this.redis = new Redis(redisUrl, {
      commandTimeout: REDIS_TIMEOUT_MS,
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
    });
    this.redis.on('error', () => {});
  }

  start(): void {
    this.timer = setInterval(() => this.tick(), 1000);
  }

  /** Stops ticking and waits for the last samples. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await Promise.all(this.pending);
    this.redis.disconnect();
    this.samples.sort((a, b) => a.atS - b.atS);
  }

  private tick(): void {
    const atS = this.clock();
    const peaks = this.peaks.fold();
    const one = Promise.all([
      Promise.all(this.gateways.map((g) => scrape(g).catch(() => null))),
      this.redisFigures().catch(() => null),
    ]).then(([gateways, redis]) => void this.samples.push({ atS, gateways, redis, peaks }));
    this.pending.add(one);
    void one.finally(() => this.pending.delete(one));
  }

  private async redisFigures(): Promise<Sample['redis']> {
    const [keys, memory] = await Promise.all([this.redis.dbsize(), this.redis.info('memory')]);
    return { keys, usedMemoryBytes: Number(/used_memory:(\d+)/.exec(memory)?.[1]) };
  }
}
