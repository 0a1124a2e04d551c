/**
 * The HTTP scenario: the real gateway (1 or 2 instances, each in its own child process) in front of the counting
 * upstream (test/helpers/fake-upstream.ts), which holds every request `holdMs` and counts, per channel (by its key),
 * how many it has in flight — the oversell check is what the upstream saw. Load comes from autocannon's programmatic
 * API when it is installed, else from an in-process keep-alive loop generator (undici).
 */
import type { HistogramSnapshot } from 'slotgate';
import { request } from 'undici';
import { FakeUpstream } from '../test/helpers/fake-upstream.js';
import { forkChild, type Child } from './children.js';
import { channelKey, type GatewayCounters, type GatewaySpec } from './gateway-node.js';
import { percentile } from './load.js';
import type { RedisUnderTest, ServerSnapshot } from './redis.js';
import { addCounts, deltaOf, newNamespace, paramsOf, summarize, type RunRecord } from './run.js';
import { acquirersOf, type Scenario } from './scenarios.js';

export interface GeneratorResult {
  requests: number;
  statuses: Record<string, number>;
  p50Ms: number;
  p99Ms: number;
}

export type LoadGenerator = {
  name: string;
  run(url: string, connections: number, durationS: number): Promise<GeneratorResult>;
};

const BODY = JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'hi' }] });
const ANSWER = JSON.stringify({ id: 'bench', object: 'chat.completion', choices: [] });
const PATH = '/v1/chat/completions';

async function loadGenerator(): Promise<LoadGenerator> {
  try {
    const mod = (await import('autocannon')) as unknown as {
      default: (opts: Record<string, unknown>) => Promise<{
        requests: { total: number };
        latency: { p50: number; p99: number };
        statusCodeStats?: Record<string, { count?: number }>;
        errors: number;
        timeouts: number;
      }>;
    };
    return {
      name: 'autocannon (programmatic API)',
      async run(url, connections, durationS) {
        const r = await mod.default({
          url: url + PATH,
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: BODY,
          connections,
          duration: durationS,
          timeout: 15,
        });
        const statuses: Record<string, number> = {};
        for (const [code, s] of Object.entries(r.statusCodeStats ?? {})) statuses[code] = s.count ?? 0;
        if (r.errors) statuses.errors = r.errors;
        return {
          requests: Object.values(statuses).reduce((a, b) => a + b, 0),
          statuses,
          p50Ms: r.latency.p50,
          p99Ms: r.latency.p99,
        };
      },
    };
  } catch {
    return inProcessGenerator();
  }
}

/** The fallback load generator: `connections` keep-alive request loops (undici), for installs without autocannon. */
export function inProcessGenerator(): LoadGenerator {
  return {
    name: 'in-process keep-alive loops (undici; autocannon not installed)',
    async run(url, connections, durationS) {
      const deadline = performance.now() + durationS * 1000;
      const statuses: Record<string, number> = {};
      const latencies: number[] = [];
      await Promise.all(
        Array.from({ length: connections }, async () => {
          while (performance.now() < deadline) {
            const t0 = performance.now();
            try {
              const res = await request(url + PATH, {
                method: 'POST',
                headers: { 'content-type': 'application/json' },
                body: BODY,
              });
              await res.body.dump();
              statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
            } catch {
              statuses.errors = (statuses.errors ?? 0) + 1;
            }
            latencies.push(performance.now() - t0);
          }
        }),
      );
      latencies.sort((a, b) => a - b);
      return {
        requests: latencies.length,
        statuses,
        p50Ms: percentile(latencies, 0.5),
        p99Ms: percentile(latencies, 0.99),
      };
    },
  };
}

/** Quantile from the difference of two histogram snapshots (the upper bound of its bucket). */
function histogramQuantile(before: HistogramSnapshot, after: HistogramSnapshot, q: number): number {
  const counts = after.counts.map((n, i) => n - (before.counts[i] ?? 0));
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return NaN;
  const rank = Math.ceil(q * total);
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen >= rank) return after.buckets[i] ?? Infinity;
  }
  return Infinity;
}

interface Instance {
  url: string;
  counters(): Promise<GatewayCounters>;
  close(): Promise<void>;
}

async function childInstance(spec: GatewaySpec): Promise<Instance> {
  const child: Child = forkChild('gateway-worker');
  try {
    child.send({ type: 'start', spec });
    const { url } = await child.next<{ url: string }>('listening');
    return {
      url,
      async counters() {
        child.send({ type: 'counters' });
        return (await child.next<{ counters: GatewayCounters }>('counters')).counters;
      },
      async close() {
        child.send({ type: 'stop' });
        await child.next('stopped', 10_000).catch(() => {});
        await child.kill();
      },
    };
  } catch (err) {
    await child.kill();
    throw err;
  }
}

export async function runHttp(
  redis: RedisUnderTest,
  contender: { id: 'slotgate' | 'slotgate-rollback'; label: string },
  scenario: Scenario,
  instances: number,
  durationS: number,
  warmupS = 1,
): Promise<RunRecord> {
  const ids = Array.from({ length: scenario.channels }, (_, i) => `c${i}`);
  const upstream = await FakeUpstream.start({
    keys: Object.fromEntries(ids.map((id) => [channelKey(id), id])),
    reply: { delayMs: scenario.holdMs, body: ANSWER },
    keepRequests: false,
    keepAliveTimeoutMs: 30_000,
  });
  const namespace = newNamespace(`http${instances}`, contender.id);
  const spec: GatewaySpec = {
    redisUrl: redis.url,
    namespace,
    upstreamUrl: upstream.origin,
    channels: scenario.channels,
    max: scenario.max,
    cache: contender.id === 'slotgate',
  };
  const nodes: Instance[] = [];
  try {
    // Every instance in its own process, so no gateway shares its event loop with the load generator and upstream.
    nodes.push(...(await Promise.all(Array.from({ length: instances }, () => childInstance(spec)))));
    const generator = await loadGenerator();
    const split = (i: number) => acquirersOf(scenario, instances, i); // HTTP connections of instance i
    if (warmupS > 0) await Promise.all(nodes.map((n, i) => generator.run(n.url, split(i), warmupS)));

    const countersBefore = await Promise.all(nodes.map((n) => n.counters()));
    const before: ServerSnapshot = await redis.snapshot();
    const results = await Promise.all(nodes.map((n, i) => generator.run(n.url, split(i), durationS)));
    const after: ServerSnapshot = await redis.snapshot();
    const countersAfter = await Promise.all(nodes.map((n) => n.counters()));
    const windowS = (after.at - before.at) / 1000;

    const statuses: Record<string, number> = {};
    for (const r of results) addCounts(statuses, r.statuses);
    const purposes: Record<string, number> = {};
    const refusals: Record<string, number> = {};
    const errors: Record<string, number> = {};
    let admissions = 0;
    let roundTrips = 0;
    let socketWrites = 0;
    let clientCpuMs = 0;
    const perInstance = nodes.map((_, i) => {
      const b = countersBefore[i]!;
      const a = countersAfter[i]!;
      const outcomes = deltaOf(b.stats.outcomes, a.stats.outcomes)!;
      const commands = deltaOf(
        { ...b.stats.commands, fetch_rounds: b.stats.loadView.fetches },
        { ...a.stats.commands, fetch_rounds: a.stats.loadView.fetches },
      )!;
      addCounts(purposes, commands);
      for (const [k, v] of Object.entries(outcomes)) {
        if (k.startsWith('capacity_') && v > 0) refusals[k.slice(9)] = (refusals[k.slice(9)] ?? 0) + v;
        if ((k === 'store_unavailable' || k === 'no_channel') && v > 0) errors[k] = (errors[k] ?? 0) + v;
      }
      admissions += outcomes.acquired!;
      roundTrips += a.requests - b.requests;
      socketWrites += a.writes - b.writes;
      clientCpuMs += (a.cpuUs - b.cpuUs) / 1000;
      return {
        admissions: outcomes.acquired!,
        admissionsPerS: outcomes.acquired! / windowS,
        roundTrips: a.requests - b.requests,
        socketWrites: a.writes - b.writes,
        clientCpuMs: (a.cpuUs - b.cpuUs) / 1000,
        purposes: commands,
        p50Ms: histogramQuantile(b.stats.admissionLatencyMs, a.stats.admissionLatencyMs, 0.5),
        p99Ms: histogramQuantile(b.stats.admissionLatencyMs, a.stats.admissionLatencyMs, 0.99),
        refusals: Object.entries(outcomes)
          .filter(([k]) => k.startsWith('capacity_'))
          .reduce((s, [, v]) => s + v, 0),
      };
    });
    const record = summarize(
      {
        scenario: `http×${instances}`,
        contender: contender.id,
        label: contender.label,
        params: {
          ...paramsOf(scenario, durationS, instances),
          candidateSets: 'one model served by all channels',
        },
      },
      { admissions, refusals, errors, latencies: [], refusalLatencies: [], windowS },
      { before, after },
      {
        roundTrips,
        socketWrites,
        clientCpuMs,
        highest: upstream.highest(),
        purposes,
        instances: perInstance,
      },
    );
    record.latency = {
      p50: Math.max(...perInstance.map((p) => p.p50Ms)),
      p99: Math.max(...perInstance.map((p) => p.p99Ms)),
      max: NaN,
    };
    record.http = {
      generator: generator.name,
      requests: results.reduce((a, r) => a + r.requests, 0),
      statuses,
      p50Ms: Math.max(...results.map((r) => r.p50Ms)),
      p99Ms: Math.max(...results.map((r) => r.p99Ms)),
    };
    return record;
  } finally {
    await Promise.all(nodes.map((n) => n.close().catch(() => {})));
    await upstream.close();
    await redis.cleanup(namespace);
  }
}
