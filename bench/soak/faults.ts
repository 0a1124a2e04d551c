/**
 * The soak's faults, one at a time in time order: a config reload (the next file, then SIGHUP to every gateway), a
 * Redis restart (killed, down for RESTART_DOWN_MS, started empty on the same port) and a `CLIENT PAUSE` of every
 * client past the lease TTL. Each is recorded with its start and end, for the report and the SVG's markers.
 */
import { rename } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { GwProcess } from '../../test/helpers/gw-gateway.js';
import { writeConfig } from '../../test/helpers/gw-gateway.js';
import type { RedisServer } from '../../test/helpers/redis-server.js';
import { until } from '../../test/helpers/until.js';
import { CHANNELS, configDoc, maxAt, PAUSE_MS, RESTART_DOWN_MS } from './config.js';
import type { Peaks } from './peaks.js';
import { scrape } from './sampler.js';

export type FaultKind = 'reload' | 'restart' | 'pause';

export interface Fault {
  kind: FaultKind;
  atS: number;
  endS: number;
}

/** Every fault of a run of `durationS`: each kind at every multiple of its period before the end. */
export function faultPlan(
  durationS: number,
  every: Record<FaultKind, number>,
): { kind: FaultKind; atS: number }[] {
  const plan = (Object.keys(every) as FaultKind[]).flatMap((kind) =>
    Array.from({ length: Math.ceil(durationS / every[kind]) - 1 }, (_, k) => ({
      kind,
      atS: (k + 1) * every[kind],
    })),
  );
  return plan.sort((a, b) => a.atS - b.atS);
}

export interface FaultTarget {
  redis: RedisServer;
  gateways: readonly GwProcess[];
  /** The config file the gateways read, and the directory it is in. */
  configDir: string;
  configPath: string;
  upstreamUrl: (channel: string) => string;
  peaks: Peaks;
  clock: () => number;
}

export class FaultRunner {
  readonly done: Fault[] = [];
  private version = 0;

  constructor(private readonly target: FaultTarget) {}

  /** Writes config number `version` (0: the first) where the gateways read it, in one rename. */
  async writeConfig(version = this.version): Promise<void> {
    const { configDir, configPath, redis, upstreamUrl } = this.target;
    const next = await writeConfig(configDir, '.next.yaml', configDoc(version, redis.url, upstreamUrl));
    await rename(next, configPath);
  }

  /** Runs `plan` in order, each fault at its time or as soon as the one before it has ended. */
  async run(plan: readonly { kind: FaultKind; atS: number }[]): Promise<void> {
    for (const { kind, atS } of plan) {
      await sleep(Math.max(0, (atS - this.target.clock()) * 1000));
      const start = this.target.clock();
      await this[kind]();
      this.done.push({ kind, atS: start, endS: this.target.clock() });
    }
  }

  private async reload(): Promise<void> {
    const { gateways, peaks } = this.target;
    const versions = () => Promise.all(gateways.map(async (g) => (await scrape(g.url, 5000)).configVersion));
    const before = await versions();
    this.version++;
    peaks.begin(Object.fromEntries(CHANNELS.map((c) => [c.id, maxAt(c, this.version)])));
    await this.writeConfig();
    for (const g of gateways) g.proc.kill('SIGHUP');
    await until(async () => (await versions()).every((v, i) => v > before[i]!), 'both gateways reloaded', {
      timeoutMs: 15_000,
      intervalMs: 100,
    });
    await peaks.settle();
  }

  private async restart(): Promise<void> {
    await this.target.redis.stop();
    await sleep(RESTART_DOWN_MS);
    await this.target.redis.start();
  }

  private async pause(): Promise<void> {
    const admin = new Redis(this.target.redis.url, { maxRetriesPerRequest: 1 });
    try {
      await admin.call('CLIENT', 'PAUSE', String(PAUSE_MS), 'ALL');
    } finally {
      admin.disconnect();
    }
    await sleep(PAUSE_MS);
  }
}
