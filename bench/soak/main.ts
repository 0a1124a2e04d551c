/** `npm run soak -- --minutes N`: the soak (run.ts); `npm run soak -- --help` lists the options. */
import { Command, InvalidArgumentError } from 'commander';
import { DEFAULTS } from './config.js';
import { soakReport, writeSoak } from './report.js';
import { runSoak } from './run.js';

const positive = (value: string): number => {
  const n = Number(value);
  if (!(n > 0)) throw new InvalidArgumentError('expected a number > 0');
  return n;
};

interface Flags {
  minutes: number;
  reloadEvery: number;
  restartEvery: number;
  pauseEvery: number;
  rate: number;
  seed: number;
  out: string;
}

await new Command('soak')
  .description(
    'Two gateways on a private Redis under streaming and non-streaming clients, client aborts, config reloads, ' +
      'Redis restarts and CLIENT PAUSEs past the lease TTL; samples every second and reports the slopes, the ' +
      "upstream's peak per channel and the answers by code. Needs redis-server on the PATH.",
  )
  .option('--minutes <n>', 'length of the run (fractions allowed: 0.5 = 30 s)', positive, 10)
  .option('--reload-every <s>', 'seconds between config reloads', positive, DEFAULTS.reloadEveryS)
  .option('--restart-every <s>', 'seconds between Redis restarts', positive, DEFAULTS.restartEveryS)
  .option('--pause-every <s>', 'seconds between CLIENT PAUSEs', positive, DEFAULTS.pauseEveryS)
  .option('--rate <n>', 'client requests per second, both gateways together', positive, DEFAULTS.ratePerS)
  .option('--seed <n>', 'seed of the arrivals and the client aborts', (v) => Number(v) >>> 0, DEFAULTS.seed)
  .option('--out <dir>', 'directory for the report, the samples (JSON) and the SVG', 'bench/results')
  .action(async (o: Flags) => {
    try {
      const result = await runSoak(
        {
          durationS: o.minutes * 60,
          reloadEveryS: o.reloadEvery,
          restartEveryS: o.restartEvery,
          pauseEveryS: o.pauseEvery,
          ratePerS: o.rate,
          seed: o.seed,
        },
        (line) => console.error(line),
      );
      console.log(soakReport(result));
      const files = await writeSoak(result, o.out);
      console.log(`\nWrote ${Object.values(files).join(', ')}.`);
    } catch (err) {
      console.error(err instanceof Error ? (err.stack ?? err.message) : err);
      process.exitCode = 1;
    }
  })
  .parseAsync(process.argv);
