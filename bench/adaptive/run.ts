/**
 * One run of the adaptive scenario: N `slotgate serve` processes (the built gateway) on one config, before a
 * hidden-capacity upstream in this process, under a closed or open loop, sampled every SAMPLE_MS; then each phase's
 * figures, read from what the upstream itself counted.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { FakeUpstream } from '../../test/helpers/fake-upstream.js';
import { spawnGateway, writeConfig, type GwProcess } from '../../test/helpers/gw-gateway.js';
import { HiddenCapacity } from '../../test/helpers/hidden-capacity.js';
import { Load, type Answer } from './clients.js';
import {
  ADMIN_TOKEN,
  CHANNEL,
  CLIENTS_PER_INSTANCE,
  gatewayConfig,
  HOLD_MS,
  OPEN_RATE_PER_S,
  RETRY_WAIT_MS,
  SAMPLE_MS,
  type RunSpec,
  type Schedule,
} from './config.js';

export interface Sample {
  /** ms since the load's start */
  at: number;
  k: number;
  /** The limit in force for the fleet: the shared one, the sum of each gateway's own, or the static max. */
  limit: number;
  /** Requests at the upstream (served, being refused, or queued). */
  upstream: number;
  served: number;
}

export interface PhaseFigures {
  from: number;
  to: number;
  kText: string;
  /** Requests per second the phase's capacity can serve after the settling time: mean K ÷ hold. */
  ideal: number;
  goodputRatio: number;
  refusedAfter: number;
  refusedWhole: number;
  /** The most requests at the upstream at once in the phase. */
  highest: number;
  /** The mean of limit ÷ K over the samples after the settling time. */
  limitOverK: number;
  /** Median answer time of the successes sent after the settling time, ms. */
  p50Ms: number;
}

export interface AdaptiveRun {
  schedule: string;
  contender: string;
  label: string;
  loop: RunSpec['loop'];
  instances: number;
  max: number;
  settleMs: number;
  phases: PhaseFigures[];
  samples: Sample[];
  /** The answers the clients got, by status (0: no answer). */
  statuses: Record<string, number>;
  highest: number;
  /** The SVG's file name, once written. */
  svg?: string;
}

export interface RunContext {
  redisUrl: string;
  /** Each run's keys apart from the others'; also its config file's name. */
  prefix: string;
  configDir: string;
  /** The gateway command (the built CLI). */
  bin: string;
  settleMs: number;
  /** The run's schedule: the spec's, or the quick grid's compressed copy. */
  schedule: Schedule;
  /** Of the open loop's arrivals. */
  seed: number;
}

/** The fleet's limit now: the shared one from Redis, or the sum of what each gateway learned. */
function limitReader(
  spec: RunSpec,
  gateways: readonly GwProcess[],
  redis: Redis | undefined,
  prefix: string,
) {
  const { max } = spec.contender;
  if (!spec.contender.adaptive) return async () => max;
  if (redis)
    return async () => {
      const l = await redis.hget(`${prefix}:v1:{${CHANNEL}}:limit`, 'l');
      // no key yet: nothing reported, the limit is the max
      return l === null ? max : Number(l);
    };
  return async () => {
    const each = await Promise.all(
      gateways.map(async (g) => {
        const res = await request(`${g.url}/admin/channels`, {
          headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
        });
        const body = (await res.body.json()) as { channels: { adaptive_limit: number | null }[] };
        return body.channels[0]?.adaptive_limit ?? max;
      }),
    );
    return each.reduce((a, b) => a + b, 0);
  };
}

/** The most at the upstream at once within [from, to), from its timeline of changes (ms since the start). */
function highestIn(timeline: ReadonlyArray<readonly [number, number]>, from: number, to: number): number {
  let current = 0;
  let top = 0;
  for (const [at, n] of timeline) {
    if (at >= to) break;
    if (at < from) current = n;
    else top = Math.max(top, n);
  }
  return Math.max(top, current);
}

const median = (values: number[]): number => {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
};

function phaseFigures(
  cap: HiddenCapacity,
  samples: readonly Sample[],
  timeline: ReadonlyArray<readonly [number, number]>,
  answers: readonly Answer[],
  ctx: RunContext,
): PhaseFigures[] {
  const { phases, kText } = ctx.schedule;
  return phases.map((to, i) => {
    const from = i === 0 ? 0 : phases[i - 1]!;
    const settled = from + ctx.settleMs;
    const after = cap.window(settled, to);
    const ideal = cap.meanCapacity(settled, to) / (HOLD_MS / 1000);
    const late = samples.filter((s) => s.at >= settled && s.at < to && s.k > 0);
    return {
      from,
      to,
      kText: kText[i]!,
      ideal,
      goodputRatio: after.goodput / ideal,
      refusedAfter: after.refusedShare,
      refusedWhole: cap.window(from, to).refusedShare,
      highest: highestIn(timeline, from, to),
      limitOverK: late.reduce((a, s) => a + s.limit / s.k, 0) / Math.max(1, late.length),
      p50Ms: median(answers.filter((a) => a.status === 200 && a.at >= settled && a.at < to).map((a) => a.ms)),
    };
  });
}

export async function runAdaptive(spec: RunSpec, ctx: RunContext): Promise<AdaptiveRun> {
  const { contender: c } = spec;
  const { schedule } = ctx;
  const upstream = await FakeUpstream.start({ keepRequests: false, timeline: true });
  const gateways: GwProcess[] = [];
  const redis = c.shared && c.adaptive ? new Redis(ctx.redisUrl) : undefined;
  try {
    const configPath = await writeConfig(
      ctx.configDir,
      `${ctx.prefix}.yaml`,
      gatewayConfig(c, upstream.url(CHANNEL), { url: ctx.redisUrl, prefix: ctx.prefix }),
    );
    const spawned = Array.from({ length: spec.instances }, () => spawnGateway({ configPath, bin: ctx.bin }));
    gateways.push(...(await Promise.all(spawned)));
    await Promise.all(gateways.map((g) => g.ready));

    // the capacity's clock starts with the load
    const cap = new HiddenCapacity({ capacity: schedule.capacity, holdMs: HOLD_MS, mode: schedule.mode });
    const t0 = performance.now();
    const now = () => performance.now() - t0;
    upstream.on(CHANNEL, cap.handler);
    const readLimit = limitReader(spec, gateways, redis, ctx.prefix);
    const samples: Sample[] = [];
    const reads = new Set<Promise<void>>();
    const sampler = setInterval(() => {
      const sample = {
        at: now(),
        k: cap.capacityNow(),
        upstream: upstream.record(CHANNEL).current,
        served: cap.servingNow(),
      };
      const read = readLimit()
        .then((limit) => void samples.push({ ...sample, limit }))
        .catch(() => {}); // a read that failed leaves a gap
      reads.add(read);
      void read.finally(() => reads.delete(read));
    }, SAMPLE_MS);

    const load = new Load(
      gateways.map((g) => g.url),
      now,
    );
    if (spec.loop === 'closed') load.closed(CLIENTS_PER_INSTANCE, RETRY_WAIT_MS);
    else load.open(OPEN_RATE_PER_S, ctx.seed);
    await sleep(schedule.phases.at(-1)!);
    clearInterval(sampler);
    const end = now();
    await load.stop();
    await Promise.all(reads);
    samples.sort((a, b) => a.at - b.at);

    const timeline = upstream
      .record(CHANNEL)
      .timeline.map(([at, n]) => [at - t0, n] as const)
      .filter(([at]) => at <= end);
    const statuses: Record<string, number> = {};
    for (const a of load.answers) statuses[a.status] = (statuses[a.status] ?? 0) + 1;
    return {
      schedule: spec.schedule.id,
      contender: c.id,
      label: c.label,
      loop: spec.loop,
      instances: spec.instances,
      max: c.max,
      settleMs: ctx.settleMs,
      phases: phaseFigures(cap, samples, timeline, load.answers, ctx),
      samples,
      statuses,
      highest: highestIn(timeline, 0, end),
    };
  } finally {
    redis?.disconnect();
    await Promise.all(gateways.map((g) => g.kill()));
    await upstream.close();
  }
}
