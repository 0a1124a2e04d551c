/**
 * Stage 2 benchmark: one instance, one candidate set of bounded channels, N concurrent acquirers that hold each slot
 * for a while and release it; slotgate with the load cache on vs. the rollback mode (load_cache_enabled=false).
 *
 *   npm run bench:admission -- [--channels 50] [--max 4] [--acquirers 150,300] [--hold 20] [--duration 10]
 */
import { performance } from 'node:perf_hooks';
import os from 'node:os';
import { createAdmission } from '../src/admission/admission.js';
import { CapacityError } from '../src/core/errors.js';
import type { Candidate } from '../src/core/channel.js';
import { RedisStore } from '../src/store/redis/redis-store.js';
import { PURPOSES } from '../src/store/store.js';
import {
  commandDelta,
  fmt,
  parseFlags,
  percentile,
  redisUnderTest,
  sum,
  table,
  type RedisUnderTest,
} from './lib.js';

interface Params {
  channels: number;
  max: number;
  acquirers: number;
  holdMs: number;
  durationS: number;
  cache: boolean;
}

interface Result {
  params: Params;
  admissions: number;
  capacity: Record<string, number>;
  latencies: number[];
  clientCommands: Record<string, number>;
  serverCommands: Record<string, number>;
  redisCpuMs: number;
  oversell: number;
  highest: number;
  elapsedS: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function runAdmissionScenario(redis: RedisUnderTest, params: Params): Promise<Result> {
  const store = new RedisStore({ url: redis.url, prefix: `bench-${Date.now().toString(36)}` });
  await store.readLoads(['warm-up']);
  const admission = createAdmission({ store, settings: { load_cache_enabled: params.cache } });
  const candidates: Candidate[] = Array.from({ length: params.channels }, (_, i) => ({
    id: `c${i}`,
    maxConcurrency: params.max,
  }));
  const inFlight = new Map<string, number>();
  let highest = 0;
  let oversell = 0;
  const latencies: number[] = [];
  const capacity: Record<string, number> = {};
  let admissions = 0;
  const commandsBefore = { ...store.commands };
  const before = await redis.snapshot();
  const started = performance.now();
  const deadline = started + params.durationS * 1000;

  async function worker() {
    while (performance.now() < deadline) {
      const t0 = performance.now();
      try {
        const ticket = await admission.acquire({ candidates });
        latencies.push(performance.now() - t0);
        admissions++;
        const id = ticket.channel.id;
        const n = (inFlight.get(id) ?? 0) + 1;
        inFlight.set(id, n);
        highest = Math.max(highest, n);
        if (n > params.max) oversell++;
        if (params.holdMs > 0) await sleep(params.holdMs);
        inFlight.set(id, (inFlight.get(id) ?? 1) - 1);
        await ticket.release();
      } catch (err) {
        latencies.push(performance.now() - t0);
        const reason = err instanceof CapacityError ? err.reason : (err as Error).constructor.name;
        capacity[reason] = (capacity[reason] ?? 0) + 1;
        await sleep(5);
      }
    }
  }
  await Promise.all(Array.from({ length: params.acquirers }, worker));
  const elapsedS = (performance.now() - started) / 1000;
  await sleep(50); // detached releases and unregistrations land
  const after = await redis.snapshot();
  const clientCommands: Record<string, number> = {};
  for (const p of PURPOSES) clientCommands[p] = store.commands[p] - commandsBefore[p];
  await admission.close();
  await store.close();
  latencies.sort((a, b) => a - b);
  return {
    params,
    admissions,
    capacity,
    latencies,
    clientCommands,
    serverCommands: commandDelta(before, after),
    redisCpuMs: (after.cpuSeconds - before.cpuSeconds) * 1000,
    oversell,
    highest,
    elapsedS,
  };
}

export function describeResult(r: Result): (string | number)[] {
  const perAdm = (n: number) => fmt(n / Math.max(1, r.admissions), 2);
  const server = sum(Object.values(r.serverCommands));
  const errors = sum(Object.values(r.capacity));
  return [
    r.params.cache ? 'slotgate (cache on)' : 'slotgate rollback (cache off)',
    r.params.acquirers,
    fmt(r.admissions / r.elapsedS, 0),
    fmt(r.clientCommands.load_read! / r.elapsedS, 0),
    `${perAdm(r.clientCommands.acquire!)} / ${perAdm(r.clientCommands.release!)} / ${perAdm(r.clientCommands.load_read!)} / ${perAdm(r.clientCommands.wait!)} / ${perAdm(r.clientCommands.renew!)}`,
    perAdm(sum(Object.values(r.clientCommands))),
    perAdm(server),
    fmt((r.redisCpuMs * 1000) / Math.max(1, r.admissions), 1),
    fmt(percentile(r.latencies, 0.5), 2),
    fmt(percentile(r.latencies, 0.99), 2),
    errors
      ? `${fmt((100 * errors) / (errors + r.admissions), 1)}% (${Object.entries(r.capacity)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')})`
      : '0%',
    `${r.highest}/${r.params.max}`,
  ];
}

export const RESULT_HEADERS = [
  'contender',
  'acquirers',
  'admissions/s',
  'load-read cmds/s',
  'client cmds/adm: acquire / release / load_read / wait / renew',
  'client cmds/adm',
  'Redis cmds/adm (server)',
  'Redis CPU µs/adm',
  'p50 ms',
  'p99 ms',
  '429 ratio',
  'highest in flight/max',
];

async function main() {
  const flags = parseFlags(process.argv.slice(2));
  const base = {
    channels: Number(flags.channels ?? 50),
    max: Number(flags.max ?? 4),
    holdMs: Number(flags.hold ?? 20),
    durationS: Number(flags.duration ?? 10),
  };
  const acquirerCounts = (flags.acquirers ?? '150,300').split(',').map(Number);
  const redis = await redisUnderTest();
  console.log(
    `# slotgate admission benchmark\n\n${base.channels} bounded channels × max ${base.max}, one candidate set, ` +
      `hold ${base.holdMs} ms, ${base.durationS} s per run, 1 instance, defaults otherwise (load_cache_ttl_ms 200, ` +
      `max_acquire_attempts 8, wait_timeout_ms 5000).\nRedis: ${redis.label}. Machine: ${os.cpus().length} × ${os.cpus()[0]?.model ?? '?'}, ` +
      `Node ${process.version}.\n`,
  );
  const results: Result[] = [];
  for (const acquirers of acquirerCounts) {
    for (const cache of [true, false]) {
      const r = await runAdmissionScenario(redis, { ...base, acquirers, cache });
      results.push(r);
      if (r.oversell > 0)
        throw new Error(`OVERSELL: ${r.oversell} admissions above max (highest ${r.highest})`);
    }
  }
  console.log(table(RESULT_HEADERS, results.map(describeResult)));
  console.log(
    '\nServer-side commands per admission (INFO commandstats delta, Lua-internal commands included):\n',
  );
  const names = [...new Set(results.flatMap((r) => Object.keys(r.serverCommands)))].sort();
  console.log(
    table(
      ['contender', 'acquirers', ...names],
      results.map((r) => [
        r.params.cache ? 'cache on' : 'cache off',
        r.params.acquirers,
        ...names.map((n) => fmt((r.serverCommands[n] ?? 0) / Math.max(1, r.admissions), 2)),
      ]),
    ),
  );
  await redis.close();
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
