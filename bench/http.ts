/**
 * The HTTP scenario: the real gateway (1 or 2 processes, proxy-node.ts) before an upstream that holds every request
 * and counts per channel how many it has in flight (the oversell check). Load from autocannon; admission figures from
 * the gateways' own stats.
 */
import autocannon from 'autocannon';
// Internal: the dashboard's quantile of a histogram window (a bucket's upper bound), not public API.
import { windowQuantile } from '../packages/gateway/src/history.js';
import { FakeUpstream } from '../test/helpers/fake-upstream.js';
import { startNode, type NodeSpec } from './proxy-bench.js';
import type { GatewayCounters } from './proxy-node.js';
import { addCounts, deltaOf, newNamespace, sum, type InstanceFigures, type RunRecord } from './records.js';
import type { RedisUnderTest } from './redis.js';
import { paramsOf, summarize } from './run.js';
import { acquirersOf, type Scenario } from './scenarios.js';

const BODY = JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'hi' }] });
const ANSWER = JSON.stringify({ id: 'bench', object: 'chat.completion', choices: [] });

async function generate(url: string, connections: number, durationS: number) {
  const r = await autocannon({
    url: `${url}/v1/chat/completions`,
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
  return { requests: sum(Object.values(statuses)), statuses, p50Ms: r.latency.p50, p99Ms: r.latency.p99 };
}

export async function runHttp(
  redis: RedisUnderTest,
  contender: { id: string; label: string },
  scenario: Scenario,
  instances: number,
  durationS: number,
  warmupS = 1,
): Promise<RunRecord> {
  const ids = Array.from({ length: scenario.channels }, (_, i) => `c${i}`);
  const upstream = await FakeUpstream.start({
    keys: Object.fromEntries(ids.map((id) => [`key-${id}`, id])),
    reply: { delayMs: scenario.holdMs, body: ANSWER },
    keepRequests: false,
    keepAliveTimeoutMs: 30_000,
  });
  const namespace = newNamespace(`http${instances}`, contender.id);
  const spec: NodeSpec = {
    role: 'gateway',
    redisUrl: redis.url,
    namespace,
    target: upstream.origin,
    channels: ids,
    max: scenario.max,
    cache: contender.id === 'slotgate',
  };
  const nodes: Awaited<ReturnType<typeof startNode>>[] = [];
  try {
    // every instance in its own process, so no gateway shares its event loop with the load generator and upstream
    nodes.push(...(await Promise.all(Array.from({ length: instances }, () => startNode(spec)))));
    const split = (i: number) => acquirersOf(scenario, instances, i); // HTTP connections of instance i
    if (warmupS > 0) await Promise.all(nodes.map((n, i) => generate(n.url, split(i), warmupS)));
    const counters = () =>
      Promise.all(nodes.map(async (n) => (await n.ask<{ counters: GatewayCounters }>('counters')).counters));
    const countersBefore = await counters();
    const before = await redis.snapshot();
    const results = await Promise.all(nodes.map((n, i) => generate(n.url, split(i), durationS)));
    const after = await redis.snapshot();
    const countersAfter = await counters();
    const windowS = (after.at - before.at) / 1000;

    const statuses = addCounts({}, ...results.map((r) => r.statuses));
    const refusals: Record<string, number> = {};
    const errors: Record<string, number> = {};
    const perInstance: InstanceFigures[] = nodes.map((_, i) => {
      const [b, a] = [countersBefore[i]!, countersAfter[i]!];
      const outcomes = deltaOf(b.stats.outcomes, a.stats.outcomes)!;
      const commands = deltaOf(
        { ...b.stats.commands, fetch_rounds: b.stats.loadView.fetches },
        { ...a.stats.commands, fetch_rounds: a.stats.loadView.fetches },
      )!;
      for (const [k, v] of Object.entries(outcomes)) {
        if (k.startsWith('capacity_') && v > 0) addCounts(refusals, { [k.slice(9)]: v });
        if ((k === 'store_unavailable' || k === 'no_channel') && v > 0) addCounts(errors, { [k]: v });
      }
      return {
        admissions: outcomes.acquired!,
        admissionsPerS: outcomes.acquired! / windowS,
        roundTrips: a.requests - b.requests,
        socketWrites: a.writes - b.writes,
        clientCpuMs: (a.cpuUs - b.cpuUs) / 1000,
        purposes: commands,
        p50Ms: windowQuantile(a.stats.admissionLatencyMs, b.stats.admissionLatencyMs, 0.5) ?? NaN,
        p99Ms: windowQuantile(a.stats.admissionLatencyMs, b.stats.admissionLatencyMs, 0.99) ?? NaN,
        refusals: sum(Object.entries(outcomes).flatMap(([k, v]) => (k.startsWith('capacity_') ? [v] : []))),
      };
    });
    const total = (k: 'admissions' | 'roundTrips' | 'socketWrites' | 'clientCpuMs') =>
      sum(perInstance.map((p) => p[k]));
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
      { admissions: total('admissions'), refusals, errors, latencies: [], refusalLatencies: [], windowS },
      { before, after },
      {
        roundTrips: total('roundTrips'),
        socketWrites: total('socketWrites'),
        clientCpuMs: total('clientCpuMs'),
        highest: upstream.highest(),
        purposes: addCounts({}, ...perInstance.map((p) => p.purposes)),
        instances: perInstance,
      },
    );
    // the worse instance's admission latency (its histogram's bucket bounds)
    record.latency = {
      p50: Math.max(...perInstance.map((p) => p.p50Ms)),
      p99: Math.max(...perInstance.map((p) => p.p99Ms)),
      max: NaN,
    };
    record.http = {
      generator: 'autocannon',
      requests: sum(results.map((r) => r.requests)),
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
