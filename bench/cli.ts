/** The options of `npm run bench`; the work is in bench.ts. */
import { Command } from 'commander';
import { CLUSTER_DEFAULT_IDS, runBench, type Topology } from './bench.js';

export interface BenchCommandOptions {
  only?: string;
  contenders?: string;
  duration: string;
  scaleDuration?: string;
  httpDuration?: string;
  openDuration?: string;
  budget: string;
  redis?: string;
  topology: string;
  clusterOnly?: string;
  clusterNodes?: string;
  fleetsimGrid: string;
  fleetsimDuration?: string;
  fleetsimWorkers: string;
  out: string;
}

const list = (value: string | undefined) =>
  value
    ?.split(',')
    .map((s) => s.trim())
    .filter(Boolean);

function topologies(value: string): Topology[] {
  const given = list(value) ?? [];
  const bad = given.filter((t) => t !== 'single' && t !== 'cluster');
  if (given.length === 0 || bad.length)
    throw new Error(`Expected \`--topology\` to be single, cluster or both, got ${JSON.stringify(value)}`);
  return given as Topology[];
}

function seconds(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!(n > 0))
    throw new Error(`Expected \`--${name}\` to be a number of seconds > 0, got ${JSON.stringify(value)}`);
  return n;
}

function grid(value: string): 'full' | 'quick' {
  if (value !== 'full' && value !== 'quick')
    throw new Error(`Expected \`--fleetsim-grid\` to be full or quick, got ${JSON.stringify(value)}`);
  return value;
}

function workers(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > 16)
    throw new Error(`Expected \`--fleetsim-workers\` to be an integer in 1–16, got ${JSON.stringify(value)}`);
  return n;
}

export function benchCommand(): Command {
  return new Command('bench')
    .description(
      'measure what slotgate costs a Redis, next to what you would use instead: scenarios W1–W4, ' +
        'a load sweep, scale-out, HTTP, and fleet scenarios (open loop and fairness across instances, next to an ideal ' +
        'FIFO scheduler); markdown tables with their parameters on stdout, JSON + SVG in --out. ' +
        'Needs redis-server on the PATH (a private one is started) unless --redis/REDIS_URL is given.',
    )
    .option(
      '--only <ids>',
      'scenarios to run, comma-separated (default: all): W1,W2,W3,W4,W1-75,scale,http (closed loop); ' +
        'open60, open200 (open loop at 60 % / 200 % of capacity on 2 channels × max 4, 1/2/4 instances), ' +
        "open200d (open200 on 2 instances with slotgate's default queue bound), " +
        'open200w (200 % on 10 channels × max 4, 4 instances), fair2 (closed loop, 2 instances, staggered start), ' +
        'clients2 (a heavy and a light client on one channel of max 4, 2 instances, next to ideal weighted-fair ' +
        'and FIFO schedulers); not in the default set: fleetsim (the fleet simulator: N = 1–100 engines × C = ' +
        '50–1,000 channels, the load summary beside per-channel reads; ~5 min per topology with the full grid)',
    )
    .option(
      '--contenders <ids>',
      'slotgate,slotgate-no-handoff,slotgate-rollback,redis-semaphore,bottleneck (default: all; fleet ' +
        'scenarios: slotgate, slotgate-no-handoff, redis-semaphore; open loop never runs Bottleneck, which has no wait time-out)',
    )
    .option('-d, --duration <s>', 'seconds measured per W run', '10')
    .option(
      '--scale-duration <s>',
      'seconds per scale-out run (default: --duration, shortened to fit --budget)',
    )
    .option('--http-duration <s>', 'seconds per HTTP run (default: --duration, shortened to fit --budget)')
    .option(
      '--open-duration <s>',
      'seconds of arrivals per open-loop run, and of the measured window of fair2 and clients2 (default: 10, ' +
        'shortened to fit --budget)',
    )
    .option('--budget <s>', 'whole-run time the scale-out, HTTP and fleet runs are shortened to fit', '900')
    .option(
      '--redis <url>',
      'measure this Redis instead of a private redis-server (env REDIS_URL); its other traffic counts too',
    )
    .option(
      '--topology <list>',
      'single, cluster or both: the cluster pass runs its scenarios on a private 3-master Redis Cluster (started ' +
        'like the single node) with every contender that supports Cluster, and prints them beside the single node',
      'single,cluster',
    )
    .option(
      '--cluster-only <ids>',
      `scenarios of the cluster pass (default: --only, else ${CLUSTER_DEFAULT_IDS.join(',')}; HTTP runs on one node only)`,
    )
    .option(
      '--cluster-nodes <list>',
      'measure this cluster (seed nodes host:port, comma-separated) instead of a private one (env REDIS_CLUSTER_NODES)',
    )
    .option(
      '--fleetsim-grid <grid>',
      'fleetsim cells: full (N = 1, 10, 50, 100 × C = 50, 500, 1000) or quick (N = 10, 100 × C = 50, 1000)',
      'full',
    )
    .option('--fleetsim-duration <s>', 'seconds measured per fleetsim cell (default: 10)')
    .option(
      '--fleetsim-workers <n>',
      'worker processes the fleetsim engines are spread over (fewer when N is smaller)',
      '2',
    )
    .option('--out <dir>', 'directory for the JSON, SVG and README-table files', 'bench/results')
    .action(async (opts: BenchCommandOptions) => {
      try {
        const report = await runBench({
          ...(opts.only ? { only: list(opts.only)! } : {}),
          ...(opts.contenders ? { contenders: list(opts.contenders)! } : {}),
          durationS: seconds(opts.duration, 'duration')!,
          ...(opts.scaleDuration ? { scaleDurationS: seconds(opts.scaleDuration, 'scale-duration')! } : {}),
          ...(opts.httpDuration ? { httpDurationS: seconds(opts.httpDuration, 'http-duration')! } : {}),
          ...(opts.openDuration ? { openDurationS: seconds(opts.openDuration, 'open-duration')! } : {}),
          budgetS: seconds(opts.budget, 'budget')!,
          ...((opts.redis ?? process.env.REDIS_URL)
            ? { redisUrl: opts.redis ?? process.env.REDIS_URL! }
            : {}),
          topologies: topologies(opts.topology),
          ...(opts.clusterOnly ? { clusterOnly: list(opts.clusterOnly)! } : {}),
          ...((opts.clusterNodes ?? process.env.REDIS_CLUSTER_NODES)
            ? { clusterNodes: list(opts.clusterNodes ?? process.env.REDIS_CLUSTER_NODES)! }
            : {}),
          fleetsim: {
            grid: grid(opts.fleetsimGrid),
            workers: workers(opts.fleetsimWorkers),
            ...(opts.fleetsimDuration
              ? { durationS: seconds(opts.fleetsimDuration, 'fleetsim-duration')! }
              : {}),
          },
          outDir: opts.out,
        });
        if (report.failures.length) process.exitCode = 1;
      } catch (err) {
        console.error(err instanceof Error ? err.message : err);
        process.exitCode = 1;
      }
    });
}
