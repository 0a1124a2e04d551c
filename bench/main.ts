/**
 * `npm run bench`: the scenarios against slotgate, its rollback mode, redis-semaphore and Bottleneck on one Redis
 * and on a Redis Cluster, run from the source (bench.ts); `--help` lists the options.
 */
import { Command } from 'commander';
import { CLUSTER_DEFAULT_IDS, runBench, type Topology } from './bench.js';
import { GRIDS, type FleetSimGrid } from './fleetsim.js';

const list = (value: string) =>
  value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

function check<T>(name: string, value: string, ok: (v: string) => T | undefined, expected: string): T {
  const v = ok(value);
  if (v === undefined)
    throw new Error(`Expected \`--${name}\` to be ${expected}, got ${JSON.stringify(value)}`);
  return v;
}
const seconds = (name: string) => (value: string) =>
  check(name, value, (v) => (Number(v) > 0 ? Number(v) : undefined), 'a number of seconds > 0');

interface Flags {
  only?: string[];
  contenders?: string[];
  duration: number;
  scaleDuration?: number;
  httpDuration?: number;
  openDuration?: number;
  redis?: string;
  topology: Topology[];
  clusterOnly?: string[];
  clusterNodes?: string[];
  fleetsimGrid: FleetSimGrid;
  fleetsimDuration?: number;
  fleetsimWorkers: number;
  out: string;
}

await new Command('bench')
  .description(
    'measure what slotgate costs a Redis next to what you would use instead; markdown tables with their parameters ' +
      'on stdout, JSON + SVG in --out. Needs redis-server on the PATH unless --redis/REDIS_URL is given.',
  )
  .option(
    '--only <ids>',
    'scenarios, comma-separated (default: all but fleetsim): W1, W2, W3, W4, W1-75, scale, http (closed loop); ' +
      'open60, open200 (open loop at 60 % / 200 % of capacity, 1/2/4 instances), open200d (default queue bound), ' +
      'open200w (10 channels, 4 instances), fair2, clients2; fleetsim (N engines × C channels)',
    list,
  )
  .option(
    '--contenders <ids>',
    'slotgate, slotgate-no-handoff, slotgate-rollback, redis-semaphore, bottleneck (default: all; fleet scenarios: ' +
      'slotgate, slotgate-no-handoff, redis-semaphore)',
    list,
  )
  .option('-d, --duration <s>', 'seconds measured per W run', seconds('duration'), 10)
  .option(
    '--scale-duration <s>',
    'seconds per scale-out run (default: --duration)',
    seconds('scale-duration'),
  )
  .option('--http-duration <s>', 'seconds per HTTP run (default: --duration)', seconds('http-duration'))
  .option(
    '--open-duration <s>',
    'seconds of arrivals per open-loop run, and of the window of fair2 and clients2 (default: 10)',
    seconds('open-duration'),
  )
  .option('--redis <url>', 'measure this Redis instead of a private redis-server (env REDIS_URL)')
  .option(
    '--topology <list>',
    'single, cluster or both (a private 3-master Redis Cluster)',
    (v) =>
      check(
        'topology',
        v,
        (x) =>
          list(x).length && list(x).every((t) => t === 'single' || t === 'cluster')
            ? (list(x) as Topology[])
            : undefined,
        'single, cluster or both',
      ),
    ['single', 'cluster'],
  )
  .option(
    '--cluster-only <ids>',
    `scenarios of the cluster pass (default: --only, else ${CLUSTER_DEFAULT_IDS.join(',')})`,
    list,
  )
  .option(
    '--cluster-nodes <list>',
    'measure this cluster (seed nodes host:port) instead of a private one (env REDIS_CLUSTER_NODES)',
    list,
  )
  .option(
    '--fleetsim-grid <grid>',
    'full (N = 1, 10, 50, 100 × C = 50, 500, 1000) or quick (N = 10, 100 × C = 50, 1000)',
    (v) => check('fleetsim-grid', v, (x) => (x in GRIDS ? (x as FleetSimGrid) : undefined), 'full or quick'),
    'full',
  )
  .option(
    '--fleetsim-duration <s>',
    'seconds measured per fleetsim cell (default: 10)',
    seconds('fleetsim-duration'),
  )
  .option(
    '--fleetsim-workers <n>',
    'worker processes the fleetsim engines are spread over',
    (v) =>
      check(
        'fleetsim-workers',
        v,
        (x) => (Number.isInteger(Number(x)) && +x >= 1 && +x <= 16 ? +x : undefined),
        'an integer in 1–16',
      ),
    2,
  )
  .option('--out <dir>', 'directory for the JSON and SVG files', 'bench/results')
  .action(async (o: Flags) => {
    try {
      const redisUrl = o.redis ?? process.env.REDIS_URL;
      const clusterNodes =
        o.clusterNodes ??
        (process.env.REDIS_CLUSTER_NODES ? list(process.env.REDIS_CLUSTER_NODES) : undefined);
      const report = await runBench({
        ...(o.only ? { only: o.only } : {}),
        ...(o.contenders ? { contenders: o.contenders } : {}),
        durationS: o.duration,
        ...(o.scaleDuration ? { scaleDurationS: o.scaleDuration } : {}),
        ...(o.httpDuration ? { httpDurationS: o.httpDuration } : {}),
        ...(o.openDuration ? { openDurationS: o.openDuration } : {}),
        ...(redisUrl ? { redisUrl } : {}),
        topologies: o.topology,
        ...(o.clusterOnly ? { clusterOnly: o.clusterOnly } : {}),
        ...(clusterNodes ? { clusterNodes } : {}),
        fleetsim: {
          grid: o.fleetsimGrid,
          workers: o.fleetsimWorkers,
          ...(o.fleetsimDuration ? { durationS: o.fleetsimDuration } : {}),
        },
        outDir: o.out,
      });
      if (report.failures.length) process.exitCode = 1;
    } catch (err) {
      console.error(err instanceof Error ? err.message : err);
      process.exitCode = 1;
    }
  })
  .parseAsync(process.argv);
