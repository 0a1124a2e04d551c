/**
 * The fleet simulator (`npm run bench -- --only fleetsim`): N admission engines (1 to 100), each with its own
 * instance id, RedisStore and connection, spread over a few worker processes (fleetsim-worker.ts), on one Redis or a
 * Redis Cluster; C channels (50 to 1,000) in overlapping candidate sets; open-loop Poisson arrivals. Each cell runs
 * the load summary and today's per-channel view on the same arrivals, one after the other. The parent takes the INFO
 * snapshots over the window, sweeps every hold interval for oversell, and prints the tables, the targets and a plot.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DEFAULT_SETTINGS } from 'slotgate';
import { askAll, forkChild, sleepUntil, wallNow, type Child } from './children.js';
import { simFigures, type SimCell } from './fleetsim-figures.js';
import { simDetailTable, simLegend, simParamsLine, simTable, simTargetsTable } from './fleetsim-report.js';
import {
  FLEETSIM_CONTENDERS,
  FLEETSIM_SHAPE,
  GRIDS,
  candidateSets,
  coverage,
  enginesOf,
  offeredShare,
  setSize,
  streamSeed,
  type FleetSimContender,
  type FleetSimGrid,
  type FleetSimShape,
} from './fleetsim-shape.js';
import { simSvg } from './fleetsim-svg.js';
import { evaluateSimTargets, type SimRow, type SimTarget } from './fleetsim-targets.js';
import type { SimResult, SimSetup } from './fleetsim-worker.js';
import { meanHoldMs } from './openloop.js';
import { commandDelta, type RedisUnderTest } from './redis.js';
import { newNamespace } from './run.js';

export const FLEETSIM_ID = 'fleetsim';

export interface FleetSimOptions {
  grid: FleetSimGrid;
  /** Seconds measured per cell. @default 10 */
  durationS: number;
  /** Worker processes the engines are spread over (fewer when N is smaller). @default 2 */
  workers: number;
}

export interface FleetSimRecord extends SimRow {
  topology: 'single' | 'cluster';
  label: string;
  /** Server-side commands by name over the window. */
  serverCommands: Record<string, number>;
}

export interface FleetSimPass {
  records: FleetSimRecord[];
  targets: SimTarget[];
  failures: string[];
  svg?: string;
}

/** Set-up (connections, warm-up), the drain of the last requests (wait time-out + longest hold) and close. */
const cellOverheadS = (shape: FleetSimShape) => 4 + shape.waitTimeoutMs / 1000 / 2;

export function fleetSimEstimateS(o: FleetSimOptions, shape = FLEETSIM_SHAPE): number {
  const g = GRIDS[o.grid];
  return (
    g.instances.length * g.channels.length * FLEETSIM_CONTENDERS.length * (o.durationS + cellOverheadS(shape))
  );
}

/** Worker processes kept across cells; the workers of a failed cell are killed, so the next one starts clean. */
class SimPool {
  private children: Child[] = [];
  take(n: number): Child[] {
    while (this.children.length < n) this.children.push(forkChild('fleetsim-worker'));
    return this.children.slice(0, n);
  }
  async discard(children: readonly Child[]): Promise<void> {
    this.children = this.children.filter((c) => !children.includes(c));
    await Promise.all(children.map((c) => c.kill()));
  }
  async close(): Promise<void> {
    await this.discard(this.children);
  }
}

export function cellOf(
  instances: number,
  channels: number,
  o: FleetSimOptions,
  shape: FleetSimShape = FLEETSIM_SHAPE,
): { cell: SimCell; sets: number[][] } {
  const size = setSize(channels);
  const sets = candidateSets(channels, shape.sets, size, streamSeed(shape.seed, 'sets', channels));
  const cover = coverage(sets);
  return {
    sets,
    cell: {
      instances,
      channels,
      setSize: size,
      sets: shape.sets,
      coveredChannels: cover.channels,
      setsPerChannel: cover.setsPerChannel,
      max: shape.max,
      ratePerS: instances * shape.ratePerInstance,
      meanHoldMs: meanHoldMs(shape.hold),
      offeredShare: offeredShare(shape, instances, cover.channels),
      ttlMs: DEFAULT_SETTINGS.load_cache_ttl_ms,
      durationS: o.durationS,
      waitTimeoutMs: shape.waitTimeoutMs,
      workers: Math.min(o.workers, instances),
    },
  };
}

async function runCell(
  redis: RedisUnderTest,
  pool: SimPool,
  contender: FleetSimContender,
  x: { cell: SimCell; sets: number[][] },
  shape: FleetSimShape,
): Promise<FleetSimRecord> {
  const { cell, sets } = x;
  const namespace = newNamespace(`sim${cell.instances}x${cell.channels}`, contender.id);
  const children = pool.take(cell.workers);
  const durationMs = cell.durationS * 1000;
  let ok = false;
  try {
    await askAll(
      children,
      (w): SimSetup => ({
        type: 'setup',
        redisUrl: redis.url,
        namespace,
        channels: cell.channels,
        max: cell.max,
        sets,
        engines: enginesOf(w, cell.workers, cell.instances),
        summary: contender.summary,
        waitTimeoutMs: cell.waitTimeoutMs,
      }),
      'ready',
      120_000,
    );
    const startAt = wallNow() + 500;
    const running = askAll<SimResult>(
      children,
      () => ({
        type: 'run',
        startAt,
        durationMs,
        seed: shape.seed,
        ratePerS: shape.ratePerInstance,
        hold: shape.hold,
      }),
      'result',
      durationMs + cell.waitTimeoutMs + shape.hold.capMs + 60_000,
    );
    running.catch(() => {}); // awaited below; a worker's failure must not go unhandled meanwhile
    await sleepUntil(startAt);
    const before = await redis.snapshot();
    await sleepUntil(startAt + durationMs);
    const after = await redis.snapshot();
    const results = await running;
    await askAll(children, () => ({ type: 'close' }), 'closed', 60_000);
    ok = true;
    const serverCommands = commandDelta(before, after);
    const nodeCpuMs = after.perNode?.map(
      (n) => (n.cpuSeconds - (before.perNode?.find((b) => b.node === n.node)?.cpuSeconds ?? 0)) * 1000,
    );
    const f = simFigures({
      cell,
      startAt,
      endAt: startAt + durationMs,
      records: results.flatMap((r) => r.records),
      intervals: results.map((r) => r.intervals),
      counters: results.flatMap((r) => r.counters),
      server: {
        commands: Object.values(serverCommands).reduce((a, b) => a + b, 0),
        cpuMs: (after.cpuSeconds - before.cpuSeconds) * 1000,
        windowMs: after.at - before.at,
        ...(nodeCpuMs ? { nodeCpuMs } : {}),
      },
      clientCpuMs: results.reduce((a, r) => a + r.cpuMs, 0),
      lagP99Ms: Math.max(0, ...results.map((r) => r.lagP99Ms)),
      lagMaxMs: Math.max(0, ...results.map((r) => r.lagMaxMs)),
    });
    return {
      topology: redis.topology,
      contender: contender.id,
      label: contender.label,
      cell,
      f,
      serverCommands,
    };
  } finally {
    if (!ok) await pool.discard(children);
    await redis.cleanup(namespace);
  }
}

/** Every cell of the grid, both views, on `redis`; tables and targets printed at the end of the pass. */
export async function runFleetSimPass(
  redis: RedisUnderTest,
  o: FleetSimOptions & {
    out: (text: string) => void;
    progress: (text: string) => void;
    suffix?: string;
    shape?: FleetSimShape;
  },
): Promise<FleetSimPass> {
  const shape = o.shape ?? FLEETSIM_SHAPE;
  const grid = GRIDS[o.grid];
  const suffix = o.suffix ?? '';
  const records: FleetSimRecord[] = [];
  const failures: string[] = [];
  const pool = new SimPool();
  try {
    for (const channels of grid.channels) {
      for (const instances of grid.instances) {
        const x = cellOf(instances, channels, o, shape);
        for (const contender of FLEETSIM_CONTENDERS) {
          const what = `fleetsim N = ${instances} × C = ${channels} / ${contender.id}${suffix}`;
          o.progress(`… ${what}`);
          try {
            const r = await runCell(redis, pool, contender, x, shape);
            records.push(r);
            if (r.f.oversell > 0)
              failures.push(`${what}: OVERSELL ${r.f.oversoldChannels.slice(0, 5).join(', ')}`);
          } catch (err) {
            const message = `${what} failed: ${err instanceof Error ? err.message : String(err)}`;
            failures.push(message);
            o.progress(message);
          }
        }
      }
    }
  } finally {
    await pool.close();
  }
  const targets = evaluateSimTargets(records);
  if (records.length) {
    o.out(`\n## Fleet simulator (fleetsim, ${o.grid} grid)${suffix}\n\n`);
    o.out(`${simParamsLine(shape, { ...records[0]!.cell, workers: o.workers }, redis.label)}\n`);
    o.out(simTable(records));
    o.out(`\n${simDetailTable(records)}`);
    o.out(`\n### Fleet simulator targets${suffix}\n\n${simTargetsTable(targets)}`);
    const errors = records.filter((r) => Object.keys(r.f.refused).some((k) => k.startsWith('error: ')));
    if (errors.length)
      o.out(
        `\n> Errors other than a 429 in: ${errors.map((r) => `${r.contender} N=${r.cell.instances} C=${r.cell.channels}`).join(', ')} (detail table).`,
      );
    o.out(`\n${simLegend().join('\n')}`);
  }
  const svg = simSvg(
    records,
    `Redis CPU against fleet size and channel count${suffix}`,
    `${redis.label} · ${o.durationS} s per run · ${shape.ratePerInstance} arrivals/s per instance`,
  );
  return { records, targets, failures, ...(svg ? { svg } : {}) };
}

/** The fleet simulator within one `npm run bench`: its options, its passes (one per topology), records and plots. */
export class FleetSimSession {
  readonly options: FleetSimOptions;
  readonly records: FleetSimRecord[] = [];
  readonly failures: string[] = [];
  private readonly plots: { name: string; svg: string }[] = [];

  constructor(
    given: Partial<FleetSimOptions> | undefined,
    private readonly io: { out: (text: string) => void; progress: (text: string) => void },
  ) {
    this.options = {
      grid: given?.grid ?? 'full',
      durationS: given?.durationS ?? 10,
      workers: given?.workers ?? 2,
    };
  }

  /** Estimated seconds for the given number of passes. */
  estimateS(passes: number): number {
    return passes * fleetSimEstimateS(this.options);
  }

  describe(): string {
    const o = this.options;
    return `Fleet simulator: ${o.grid} grid, ${o.durationS} s per cell, up to ${o.workers} worker processes.`;
  }

  async pass(redis: RedisUnderTest, suffix: string, name: string): Promise<void> {
    const done = await runFleetSimPass(redis, { ...this.options, ...this.io, suffix });
    this.records.push(...done.records);
    this.failures.push(...done.failures);
    if (done.svg) this.plots.push({ name, svg: done.svg });
  }

  /** Writes each pass's plot as `<stamp>.<name>.svg`; the paths written. */
  async writePlots(dir: string, stamp: string): Promise<string[]> {
    const files: string[] = [];
    for (const { name, svg } of this.plots) {
      const path = join(dir, `${stamp}.${name}.svg`);
      await writeFile(path, svg);
      files.push(path);
    }
    return files;
  }
}
