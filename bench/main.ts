/** `npm run bench` (bench.ts); `npm run bench -- --help` lists the options. */
import { Command, InvalidArgumentError } from 'commander';
import { CLUSTER_DEFAULT_IDS, runBench, type Topology } from './bench.js';
import type { Grid as AdaptiveGrid } from './adaptive/config.js';
import type { FleetSimGrid } from './fleetsim.js';

const list = (value: string) =>
  value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

/** A parser that takes the values `ok` accepts (returning what they mean) and refuses the rest. */
const parse =
  <T>(expected: string, ok: (v: string) => T | undefined) =>
  (value: string): T => {
    const v = ok(value);
    if (v === undefined) throw new InvalidArgumentError(`expected ${expected}`);
    return v;
  };
const seconds = parse('a number of seconds > 0', (v) => (Number(v) > 0 ? Number(v) : undefined));
const oneOf = <T extends string>(...allowed: T[]) =>
  parse(allowed.join(' or '), (v) => (allowed.includes(v as T) ? (v as T) : undefined));

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
  adaptiveGrid: AdaptiveGrid;
  out: string;
}

await new Command('bench')
  .description(
    'What slotgate costs a Redis, next to what you would use instead: markdown tables with their parameters on ' +
      'stdout, every record as JSON in --out. Needs redis-server on the PATH unless --redis/REDIS_URL is given.',
  )
  .option(
    '--only <ids>',
    'scenarios, comma-separated (default: all but fleetsim): W1, W2, W3, W4, W1-75, scale, http (closed loop); ' +
      'open60, open200 (open loop at 60 % / 200 % of capacity, 1/2/4 instances), open200d (default queue bound), ' +
      'open200w (10 channels, 4 instances), fair2, clients2; fleetsim (N engines × C channels); adaptive (gateways ' +
      'before a hidden-capacity upstream, about 15 min)',
    list,
  )
  .option(
    '--contenders <ids>',
    'slotgate, slotgate-no-handoff, slotgate-rollback, redis-semaphore, bottleneck (default: all; fleet scenarios: ' +
      'slotgate, slotgate-no-handoff, redis-semaphore); slotgate-adaptive (adaptive limits on) only when named',
    list,
  )
  .option('-d, --duration <s>', 'seconds measured per W run', seconds, 10)
  .option('--scale-duration <s>', 'seconds per scale-out run (default: --duration)', seconds)
  .option('--http-duration <s>', 'seconds per HTTP run (default: --duration)', seconds)
  .option(
    '--open-duration <s>',
    'seconds of arrivals per open-loop run, of the window of fair2, clients2 (default: 10)',
    seconds,
  )
  .option('--redis <url>', 'measure this Redis instead of a private redis-server (env REDIS_URL)')
  .option(
    '--topology <list>',
    'single, cluster or both (a private 3-master Redis Cluster)',
    (v) => list(v).map(oneOf<Topology>('single', 'cluster')),
    ['single', 'cluster'],
  )
  .option(
    '--cluster-only <ids>',
    `scenarios of the cluster pass (default: --only, else ${CLUSTER_DEFAULT_IDS})`,
    list,
  )
  .option(
    '--cluster-nodes <list>',
    'measure this cluster (seed nodes host:port) (env REDIS_CLUSTER_NODES)',
    list,
  )
  .option(
    '--fleetsim-grid <grid>',
    'full (N = 1, 10, 50, 100 × C = 50, 500, 1000) or quick (N = 10, 100 × C = 50, 1000)',
    oneOf<FleetSimGrid>('full', 'quick'),
    'full',
  )
  .option('--fleetsim-duration <s>', 'seconds measured per fleetsim cell (default: 10)', seconds)
  .option(
    '--fleetsim-workers <n>',
    'worker processes the fleetsim engines are spread over',
    parse('an integer in 1–16', (v) => (/^([1-9]|1[0-6])$/.test(v) ? Number(v) : undefined)),
    2,
  )
  .option(
    '--adaptive-grid <grid>',
    'full (every contender on K = 8/3/12, slotgate adaptive on the other schedules; about 15 min), open (its open-loop runs), steps (slotgate adaptive on K = 8/3/12, closed loop) or quick (3 runs)',
    oneOf<AdaptiveGrid>('full', 'open', 'steps', 'quick'),
    'full',
  )
  .option('--out <dir>', 'directory for the JSON file (and the adaptive SVGs)', 'bench/results')
  .action(async (o: Flags) => {
    try {
      const report = await runBench({
        only: o.only,
        contenders: o.contenders,
        durationS: o.duration,
        scaleDurationS: o.scaleDuration,
        httpDurationS: o.httpDuration,
        openDurationS: o.openDuration,
        redisUrl: o.redis ?? process.env.REDIS_URL,
        topologies: o.topology,
        clusterOnly: o.clusterOnly,
        clusterNodes: o.clusterNodes ?? process.env.REDIS_CLUSTER_NODES?.split(','),
        fleetsim: { grid: o.fleetsimGrid, workers: o.fleetsimWorkers, durationS: o.fleetsimDuration },
        adaptive: { grid: o.adaptiveGrid },
        outDir: o.out,
      });
      if (report.failures.length) process.exitCode = 1;
    } catch (err) {
      console.error(err instanceof Error ? err.message : err);
      process.exitCode = 1;
    }
  })
  .parseAsync(process.argv);
