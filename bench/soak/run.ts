/**
 * One soak: a private redis-server, a counting upstream, two `slotgate serve` processes on one config file, the
 * clients, the faults and the sampler, for `durationS`; then everything is stopped and the figures returned.
 */
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { FakeUpstream, chatAnswer } from '../../test/helpers/fake-upstream.js';
import { spawnGateway, tempDir, type GwProcess } from '../../test/helpers/gw-gateway.js';
import { RedisServer } from '../../test/helpers/redis-server.js';
import { versionOf } from '../redis.js';
import { Clients, type ClientFigures } from './clients.js';
import { CHANNELS, LONG_UPSTREAM, maxAt, UPSTREAM, type SoakOptions } from './config.js';
import { FaultRunner, faultPlan, type Fault } from './faults.js';
import { Peaks, type ChannelPeaks, type Excess } from './peaks.js';
import { Sampler, type Sample } from './sampler.js';

export interface SoakResult {
  options: SoakOptions;
  startedAt: string;
  /** Wall time of the measured part (clients and faults), s. */
  ranS: number;
  redisVersion: string;
  samples: Sample[];
  faults: Fault[];
  clients: ClientFigures;
  peaks: Record<string, ChannelPeaks>;
  excess: Excess[];
  /** What each gateway wrote at level warn or above, by message: how often, and the first such line whole. */
  gatewayWarnings: Record<string, { count: number; first: string }>[];
}

/** Each pino line at level ≥ 40 (warn) of a gateway's output, by its message. */
function warningsOf(output: string): SoakResult['gatewayWarnings'][number] {
  const out: SoakResult['gatewayWarnings'][number] = {};
  for (const line of output.split('\n')) {
    const m = /^\{"level":(\d+),.*"msg":"([^"]*)/.exec(line);
    if (!m || Number(m[1]) < 40) continue;
    const entry = (out[m[2]!] ??= { count: 0, first: line });
    entry.count++;
  }
  return out;
}

export async function runSoak(
  options: SoakOptions,
  progress: (line: string) => void = () => {},
): Promise<SoakResult> {
  const startedAt = new Date().toISOString();
  const redis = await RedisServer.start();
  const upstream = await FakeUpstream.start({ keepRequests: false });
  const dir = await tempDir();
  const gateways: GwProcess[] = [];
  let t0 = performance.now();
  const clock = () => (performance.now() - t0) / 1000;
  try {
    const peaks = new Peaks(upstream, Object.fromEntries(CHANNELS.map((c) => [c.id, maxAt(c, 0)])), clock);
    for (const c of CHANNELS) upstream.on(c.id, peaks.watch(chatAnswer(c.long ? LONG_UPSTREAM : UPSTREAM)));
    const configPath = join(dir.dir, 'slotgate.yaml');
    const faults = new FaultRunner({
      redis,
      gateways,
      configDir: dir.dir,
      configPath,
      upstreamUrl: (id) => upstream.url(id),
      peaks,
      clock,
    });
    await faults.writeConfig(0);
    gateways.push(...(await Promise.all([0, 1].map(() => spawnGateway({ configPath })))));
    await Promise.all(gateways.map((g) => g.ready));
    const admin = new Redis(redis.url);
    const redisVersion = await versionOf(admin).finally(() => admin.disconnect());
    progress(`redis ${redisVersion} on ${redis.url}; gateways on ${gateways.map((g) => g.url).join(', ')}`);

    t0 = performance.now();
    peaks.fold(); // nothing before the start counts
    const sampler = new Sampler(
      gateways.map((g) => g.url),
      redis.url,
      peaks,
      clock,
    );
    const clients = new Clients(
      gateways.map((g) => g.url),
      { ratePerS: options.ratePerS, seed: options.seed },
      clock,
    );
    sampler.start();
    const load = clients.run();
    const plan = faultPlan(options.durationS, {
      reload: options.reloadEveryS,
      restart: options.restartEveryS,
      pause: options.pauseEveryS,
    });
    let failure: unknown;
    const faulting = faults.run(plan).catch((err: unknown) => void (failure = err));
    const minute = setInterval(
      () => progress(`${Math.round(clock())} s: ${clients.figures.sent} requests sent`),
      60_000,
    );
    await sleep(options.durationS * 1000);
    await faulting;
    clearInterval(minute);
    const ranS = clock();
    clients.stop();
    await load;
    await sampler.stop();
    if (failure) throw failure;
    peaks.fold();
    await peaks.checked();
    return {
      options,
      startedAt,
      ranS,
      redisVersion,
      samples: sampler.samples,
      faults: faults.done,
      clients: clients.figures,
      peaks: peaks.byChannel,
      excess: peaks.excess,
      gatewayWarnings: gateways.map((g) => warningsOf(g.output())),
    };
  } finally {
    await Promise.all(gateways.map((g) => g.kill()));
    await upstream.close();
    await redis.stop();
    await dir.remove();
  }
}
