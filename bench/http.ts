/**
 * The HTTP scenario: the real gateway (1 or 2 instances, each in its own child process) in front of an upstream here that holds every request `holdMs` and counts, per channel (by its key), how many it
 * has in flight — the oversell check is what the upstream saw. Load comes from autocannon's programmatic API when
 * it is installed, else from an in-process keep-alive loop generator (undici).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { LATENCY_BUCKETS_MS } from '../packages/slotgate/src/core/histogram.js';
import { forkChild, type Child } from './children.js';
import { channelKey, type GatewayCounters, type GatewaySpec } from './gateway-node.js';
import { percentile } from './load.js';
import type { RedisUnderTest, ServerSnapshot } from './redis.js';
import { deltaOf, newNamespace, paramsOf, summarize, type RunRecord } from './run.js';
import type { Scenario } from './scenarios.js';

interface Upstream {
  url: string;
  highest: Record<string, number>;
  close(): Promise<void>;
}

function startUpstream(holdMs: number, keyToChannel: Map<string, string>): Promise<Upstream> {
  const current = new Map<string, number>();
  const highest: Record<string, number> = {};
  const body = JSON.stringify({ id: 'bench', object: 'chat.completion', choices: [] });
  const server: Server = createServer((req, res) => {
    req.resume();
    const key = String(req.headers.authorization ?? '').replace(/^Bearer /, '');
    const id = keyToChannel.get(key) ?? `unknown:${key.slice(0, 12)}`;
    const n = (current.get(id) ?? 0) + 1;
    current.set(id, n);
    if (n > (highest[id] ?? 0)) highest[id] = n;
    let out = false;
    const countOut = () => {
      if (out) return;
      out = true;
      current.set(id, current.get(id)! - 1);
    };
    // A request the gateway gave up on (its client left, the connection is closed) is over for the upstream too: a
    // gateway that aborted its call may hand the slot on at once.
    res.once('close', countOut);
    setTimeout(() => {
      if (out) return;
      // counted out before the answer leaves, so the gateway's release always follows this decrement
      countOut();
      res.writeHead(200, { 'content-type': 'application/json' }).end(body);
    }, holdMs);
  });
  server.keepAliveTimeout = 30_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () =>
      resolve({
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        highest,
        close: () =>
          new Promise<void>((r) => {
            server.closeAllConnections();
            server.close(() => r());
          }),
      }),
    );
  });
}

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

/** Quantile from the difference of two cumulative histogram snapshots (upper bound of the bucket). */
function histogramQuantile(before: readonly number[], after: readonly number[], q: number): number {
  const counts = after.map((n, i) => n - (before[i] ?? 0));
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return NaN;
  const rank = Math.ceil(q * total);
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    seen += counts[i]!;
    if (seen >= rank) return LATENCY_BUCKETS_MS[i] ?? Infinity;
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
  const keyToChannel = new Map<string, string>();
  for (let i = 0; i < scenario.channels; i++) keyToChannel.set(channelKey(`c${i}`), `c${i}`);
  const upstream = await startUpstream(scenario.holdMs, keyToChannel);
  const namespace = newNamespace(`http${instances}`, contender.id);
  const spec: GatewaySpec = {
    redisUrl: redis.url,
    namespace,
    upstreamUrl: upstream.url,
    channels: scenario.channels,
    max: scenario.max,
    cache: contender.id === 'slotgate',
  };
  const nodes: Instance[] = [];
  try {
    // Every instance in its own process, so no gateway shares its event loop with the load generator and upstream.
    nodes.push(...(await Promise.all(Array.from({ length: instances }, () => childInstance(spec)))));
    const generator = await loadGenerator();
    const split = (i: number) =>
      Math.floor(scenario.acquirers / instances) + (i < scenario.acquirers % instances ? 1 : 0);
    if (warmupS > 0) await Promise.all(nodes.map((n, i) => generator.run(n.url, split(i), warmupS)));

    const countersBefore = await Promise.all(nodes.map((n) => n.counters()));
    const before: ServerSnapshot = await redis.snapshot();
    const results = await Promise.all(nodes.map((n, i) => generator.run(n.url, split(i), durationS)));
    const after: ServerSnapshot = await redis.snapshot();
    const countersAfter = await Promise.all(nodes.map((n) => n.counters()));
    const windowS = (after.at - before.at) / 1000;

    const statuses: Record<string, number> = {};
    for (const r of results)
      for (const [k, v] of Object.entries(r.statuses)) statuses[k] = (statuses[k] ?? 0) + v;
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
      for (const [k, v] of Object.entries(commands)) purposes[k] = (purposes[k] ?? 0) + v;
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
        p50Ms: histogramQuantile(b.stats.admissionLatencyMs.counts, a.stats.admissionLatencyMs.counts, 0.5),
        p99Ms: histogramQuantile(b.stats.admissionLatencyMs.counts, a.stats.admissionLatencyMs.counts, 0.99),
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
        highest: { ...upstream.highest },
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
