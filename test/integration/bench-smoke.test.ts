/**
 * The benchmark harness (bench/) on the shared test Redis: one tiny run per contender proves
 * each one admits, releases and is measured; a contender that admits max + 1 must fail the run (the oversell check
 * cannot pass vacuously); the cross-process overlap sweep counts what it should; and a tiny open-loop fleet run on
 * two worker processes reports every request and the ideal scheduler's figures next to its own; on the shared cluster
 * the cluster pass measures every master and sets its runs beside the single node's. `bench:proxy` runs each of its
 * contenders briefly and reports a row for each (no speed is asserted).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runAdaptiveGrid } from '../../bench/adaptive/grid.js';
import { runBench } from '../../bench/bench.js';
import { openCluster } from '../../bench/cluster-redis.js';
import { KNOWN_IDS, loadContender } from '../../bench/contenders/index.js';
import { fleetInstanceTable, fleetTable } from '../../bench/fleet-report.js';
import { runFleet } from '../../bench/fleet.js';
import { highestOverlap } from '../../bench/load.js';
import { traceOf, type OpenScenario } from '../../bench/openloop.js';
import { WorkerPool } from '../../bench/pool.js';
import { MODES, proxyBenchReport, runProxyBench } from '../../bench/proxy-bench.js';
import { OversellError } from '../../bench/records.js';
import { openRedis, type RedisUnderTest } from '../../bench/redis.js';
import { clusterTable } from '../../bench/report.js';
import { runInProcess, runScaleOut } from '../../bench/run.js';
import type { Scenario } from '../../bench/scenarios.js';
import { Refused, type Contender } from '../../bench/types.js';
import { clusterNodes, redisUrl } from '../helpers/redis.js';

const TINY: Scenario = {
  id: 'smoke',
  kind: 'load',
  title: 'smoke',
  channels: 4,
  max: 2,
  acquirers: 12,
  holdMs: 5,
  sets: 'one',
  instances: [1],
};

/** Admits up to max + 1 holders per channel, in memory: an oversell the harness must catch. */
const broken: Contender = {
  id: 'broken',
  label: 'broken (admits max + 1)',
  behaviour: 'test double',
  async setup() {
    const held = new Map<string, number>();
    return {
      async acquire(set) {
        for (const c of set) {
          const n = held.get(c.id) ?? 0;
          if (n < c.max + 1) {
            held.set(c.id, n + 1);
            return { channel: c.id, release: async () => void held.set(c.id, held.get(c.id)! - 1) };
          }
        }
        throw new Refused('full');
      },
      async close() {},
    };
  },
};

let redis: RedisUnderTest;
beforeAll(async () => {
  redis = await openRedis(redisUrl());
});
afterAll(async () => {
  await redis.close();
});

describe('bench harness', () => {
  it.each(KNOWN_IDS)('measures %s on a tiny run without oversell', async (id) => {
    const contender = loadContender(id);
    const r = await runInProcess(redis, contender, TINY, 1, { warmupMs: 100 });
    expect(r.admissions).toBeGreaterThan(20);
    expect(r.oversold).toEqual([]);
    expect(Math.max(...Object.values(r.highest))).toBeLessThanOrEqual(TINY.max);
    const serverCommands = Object.values(r.serverCommands).reduce((a, b) => a + b, 0);
    // with slot handoff a slotgate admission may cost no command at all
    if (['slotgate', 'slotgate-rollback', 'slotgate-adaptive'].includes(id))
      expect(serverCommands).toBeGreaterThan(0);
    else expect(serverCommands).toBeGreaterThan(r.admissions);
    if (id.startsWith('slotgate')) {
      // slotgate coalesces the acquires and releases of one event-loop turn into one call each
      expect(r.roundTrips).toBeGreaterThan(0);
    } else {
      expect(r.roundTrips).toBeGreaterThanOrEqual(r.admissions); // at least the acquire or the release of each
    }
    expect(r.socketWrites).toBeGreaterThan(0);
    expect(r.errors).toEqual({});
    if (id.startsWith('slotgate')) {
      const p = r.purposes!;
      expect(p.load_read).toBeGreaterThan(0);
      // the first slots at least, through the acquire script or the queue (a pass on a channel this instance knows
      // to be queued joins the queue without an acquire call: in a window that is all overload, it may never acquire)
      expect(p.acquire! + p.wait!).toBeGreaterThan(0);
      if (id === 'slotgate-no-handoff') {
        expect(p.handoffs).toBe(0);
        expect(p.release).toBeGreaterThan(0);
      } else {
        // every slot held in the window ended in a release to Redis or a handoff to a local waiter (in a window that
        // is all overload, admissions may all come from grants: neither the acquire script nor a handoff)
        expect(p.handoffs! + p.release!).toBeGreaterThan(0);
      }
    }
  });

  it('reports an oversell by a broken contender, and a whole run fails with OversellError', async () => {
    const r = await runInProcess(redis, broken, TINY, 1, { warmupMs: 0 });
    expect(r.oversold.length).toBeGreaterThan(0);
    expect(r.oversold[0]!.highest).toBe(TINY.max + 1);

    const lines: string[] = [];
    await expect(
      runBench({
        only: ['W1'],
        contenders: [],
        extraContenders: [broken],
        durationS: 1,
        warmupMs: 0,
        redisUrl: redisUrl(),
        topologies: ['single'],
        out: (t) => lines.push(t),
        progress: () => {},
      }),
    ).rejects.toThrow(OversellError);
    expect(lines.join('\n')).toMatch(/OVERSOLD/);
    expect(lines.join('\n')).toMatch(/FAILED: OVERSELL in W1 \/ broken/);
  });

  it('sweeps hold intervals across processes: overlaps count, back-to-back holds do not', () => {
    const a = { c0: [0, 10, 20, 30], c1: [0, 5] };
    const b = { c0: [10, 20, 25, 40], c1: [4, 8] };
    expect(highestOverlap([a, b])).toEqual({ c0: 2, c1: 2 });
    expect(highestOverlap([{ c0: [0, 10] }, { c0: [10, 20] }])).toEqual({ c0: 1 });
  });

  it('runs a scale-out with two worker processes and checks them together', async () => {
    const contender = loadContender('slotgate');
    const pool = new WorkerPool();
    const r = await runScaleOut(
      redis,
      pool,
      contender,
      { ...TINY, kind: 'scale', instances: [2] },
      2,
      1,
      0,
    ).finally(() => pool.close());
    expect(r.instances).toHaveLength(2);
    expect(r.instances!.every((i) => i.admissions > 0)).toBe(true);
    expect(r.oversold).toEqual([]);
    expect(Math.max(...Object.values(r.highest))).toBe(TINY.max);
  });

  it('runs a tiny open loop on two worker processes: every request reported, the ideal beside it, no oversell', async () => {
    const scenario: OpenScenario = {
      kind: 'open',
      id: 'smoke-open',
      title: 'smoke open loop',
      channels: 2,
      max: 2,
      instances: [2],
      loadPct: 150,
      hold: { medianMs: 40, sigma: 0.5, capMs: 150 },
      seed: 5,
      waitTimeoutMs: 300,
      maxInFlight: 500,
      maxWaiting: 100,
    };
    const pool = new WorkerPool();
    let r;
    try {
      const contender = loadContender('slotgate');
      r = await runFleet(redis, pool, { contender, scenario, instances: 2, durationS: 1.5, warmupMs: 100 });
    } finally {
      await pool.close();
    }
    const requests = traceOf(scenario, 1.5, 2).length;
    const fleet = r.fleet!;
    expect(r.scenario).toBe('smoke-open×2');
    expect(fleet.figures.requests).toBe(requests);
    expect(fleet.ideal!.requests).toBe(requests);
    expect(fleet.figures.perInstance).toHaveLength(2);
    expect(fleet.figures.perInstance.map((p) => p.requests)).toEqual([
      Math.ceil(requests / 2),
      Math.floor(requests / 2),
    ]);
    expect(fleet.figures.admitted).toBeGreaterThan(0);
    expect(fleet.figures.admitted + Object.values(fleet.figures.refusals).reduce((a, b) => a + b, 0)).toBe(
      requests,
    );
    expect(fleet.ideal!.overtaken).toBe(0);
    for (const key of [
      'jain',
      'share',
      'utilisation',
      'waiters',
      'overtaken',
      'grantLatency',
      'wait',
    ] as const) {
      expect(fleet.figures).toHaveProperty(key);
    }
    expect(fleet.capHits).toBe(0);
    expect(r.errors).toEqual({});
    expect(r.oversold).toEqual([]);
    expect(Math.max(...Object.values(r.highest))).toBeLessThanOrEqual(scenario.max);
    expect(Object.values(r.serverCommands).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    expect(fleetTable(scenario, [r])).toMatch(/ideal FIFO/);
    expect(fleetInstanceTable([r])).toMatch(/slotgate/);
  });

  it('runs slotgate and redis-semaphore on the cluster: commands of every master counted, side by side with one node', async () => {
    const cluster = await openCluster(clusterNodes());
    const runs = [];
    try {
      expect(cluster.topology).toBe('cluster');
      for (const id of ['slotgate', 'redis-semaphore']) {
        const contender = loadContender(id);
        runs.push(await runInProcess(redis, contender, TINY, 1, { warmupMs: 100 }));
        runs.push(await runInProcess(cluster, contender, TINY, 1, { warmupMs: 100 }));
      }
    } finally {
      await cluster.close();
    }
    for (const r of runs.filter((x) => x.topology === 'cluster')) {
      expect(r.admissions).toBeGreaterThan(20);
      expect(r.errors).toEqual({});
      expect(r.oversold).toEqual([]);
      expect(r.perNode).toHaveLength(3);
      // the per-master figures add up to the run's total (the shared cluster's other traffic counts too)
      const total = Object.values(r.serverCommands).reduce((a, b) => a + b, 0);
      expect(r.perNode!.reduce((a, n) => a + n.commands, 0)).toBe(total);
      if (r.contender === 'redis-semaphore') expect(total).toBeGreaterThan(r.admissions);
    }
    expect(runs.filter((r) => !r.topology)).toHaveLength(2);
    const side = clusterTable(runs, ['Bottleneck: n/a'])!;
    expect(side.split('\n')).toHaveLength(2 + 2 + 1); // header, rule, two pairs, the n/a row
    expect(side).toMatch(/Bottleneck: n\/a/);
  });
});

describe('bench:proxy', () => {
  it('runs slotgate beside the minimal proxy on one upstream, both modes, and reports every row', async () => {
    const r = await runProxyBench({ connections: 2, durationS: 0.5, warmupS: 0, lowRequests: 10 });
    const contenders = [
      'minimal Node proxy',
      'Fastify + undici pass-through',
      'slotgate, bounded channel (max 1000, embedded store)',
      'slotgate, unlimited channel',
    ];
    for (const mode of MODES) {
      const rows = r.throughput.filter((row) => row.mode === mode);
      expect(rows.map((row) => row.contender)).toEqual(contenders);
      for (const row of rows) {
        expect(row.requestsPerS, `${row.contender}, ${mode}`).toBeGreaterThan(0);
        expect(row.failed, `${row.contender}, ${mode}: non-2xx answers or errors`).toBe(0);
        // its own process's CPU time over the measured run, per answered request
        expect(row.cpuUsPerRequest, `${row.contender}, ${mode}`).toBeGreaterThan(0);
      }
      const low = r.latency.filter((row) => row.mode === mode);
      expect(low.map((row) => row.contender)).toEqual(['direct to the upstream', ...contenders]);
      for (const row of low) {
        expect(row.requests).toBe(10);
        expect(row.failed, `${row.contender}, ${mode}`).toBe(0);
      }
    }
    const report = proxyBenchReport(r);
    expect(report).toMatch(/autocannon 2 connections/);
    expect(report).toMatch(/\| × Fastify \+ undici \| added p50 ms \| CPU µs per request \|/);
    expect(report.split('\n').filter((l) => l.startsWith('| slotgate, bounded'))).toHaveLength(4);
  }, 120_000);
});

describe('bench adaptive', () => {
  it('runs the quick grid six times faster: a row per phase, the targets column and an SVG per run', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'slotgate-adaptive-'));
    const lines: string[] = [];
    try {
      const r = await runAdaptiveGrid({
        grid: 'quick',
        timeScale: 6,
        outDir: dir,
        out: (t) => lines.push(t),
        progress: () => {},
      });
      expect(r.failures).toEqual([]);
      expect(r.runs.map((run) => `${run.schedule} ${run.loop} ${run.contender} ×${run.instances}`)).toEqual([
        'steps closed adaptive ×2',
        'steps open per-instance ×2',
        'latency closed static8 ×1',
      ]);
      const report = lines.join('\n');
      expect(report).toMatch(/Open loop: Poisson arrivals at \d+\/s/);
      for (const run of r.runs) {
        expect(run.phases).toHaveLength(3);
        expect(run.samples.length).toBeGreaterThan(0);
        // a row per phase, then the run against the targets with its plot's name
        expect(report).toContain(`| ${run.label} | ${run.instances} | 1 (8) |`);
        expect(report).toMatch(new RegExp(`\\| (met|missed: [^|]+) \\| ${run.svg} \\|`));
        const svg = await readFile(join(dir, run.svg!), 'utf8');
        expect(svg).toMatch(/^<svg [^>]*>[\s\S]*<path [^>]*d="M[\d.]+,[\d.]+ L/);
      }
      expect((await readdir(dir)).filter((f) => f.endsWith('.json'))).toHaveLength(1);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
