/** The options of `npm run bench`; the work is in bench.ts. */
import { Command } from 'commander';
import { runBench } from './bench.js';

export interface BenchCommandOptions {
  only?: string;
  contenders?: string;
  duration: string;
  scaleDuration?: string;
  httpDuration?: string;
  budget: string;
  redis?: string;
  out: string;
}

const list = (value: string | undefined) =>
  value
    ?.split(',')
    .map((s) => s.trim())
    .filter(Boolean);

function seconds(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!(n > 0))
    throw new Error(`Expected \`--${name}\` to be a number of seconds > 0, got ${JSON.stringify(value)}`);
  return n;
}

export function benchCommand(): Command {
  return new Command('bench')
    .description(
      'measure what slotgate costs a Redis, next to what you would use instead: scenarios W1–W4, ' +
        'a load sweep, scale-out and HTTP; markdown tables with their parameters on stdout, JSON + SVG in --out. ' +
        'Needs redis-server on the PATH (a private one is started) unless --redis/REDIS_URL is given.',
    )
    .option('--only <ids>', 'scenarios to run, comma-separated: W1,W2,W3,W4,W1-75,scale,http (default: all)')
    .option(
      '--contenders <ids>',
      'slotgate,slotgate-no-handoff,slotgate-rollback,redis-semaphore,bottleneck (default: all)',
    )
    .option('-d, --duration <s>', 'seconds measured per W run', '10')
    .option(
      '--scale-duration <s>',
      'seconds per scale-out run (default: --duration, shortened to fit --budget)',
    )
    .option('--http-duration <s>', 'seconds per HTTP run (default: --duration, shortened to fit --budget)')
    .option('--budget <s>', 'whole-run time the scale-out and HTTP runs are shortened to fit', '570')
    .option(
      '--redis <url>',
      'measure this Redis instead of a private redis-server (env REDIS_URL); its other traffic counts too',
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
          budgetS: seconds(opts.budget, 'budget')!,
          ...((opts.redis ?? process.env.REDIS_URL)
            ? { redisUrl: opts.redis ?? process.env.REDIS_URL! }
            : {}),
          outDir: opts.out,
        });
        if (report.failures.length) process.exitCode = 1;
      } catch (err) {
        console.error(err instanceof Error ? err.message : err);
        process.exitCode = 1;
      }
    });
}
