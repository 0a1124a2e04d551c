/**
 * `npm run bench:proxy` (proxy-bench.ts):
 *   npm run bench:proxy -- [--connections 50] [--duration 5] [--warmup 2] [--rounds 1] [--low-requests 400]
 *                          [--upstream-delay 5] [--no-unlimited] [--redis URL]
 */
import { parseArgs } from 'node:util';
import { proxyBenchReport, runProxyBench } from './proxy-bench.js';

const { values: flags } = parseArgs({
  options: {
    connections: { type: 'string' },
    duration: { type: 'string' },
    warmup: { type: 'string' },
    rounds: { type: 'string' },
    'low-requests': { type: 'string' },
    'upstream-delay': { type: 'string' },
    'no-unlimited': { type: 'boolean' },
    redis: { type: 'string' },
  },
});

function num(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) {
    console.error(`--${name}: expected a number ≥ 0, got ${JSON.stringify(value)}`);
    process.exit(2);
  }
  return n;
}

const result = await runProxyBench({
  connections: num('connections', flags.connections),
  durationS: num('duration', flags.duration),
  warmupS: num('warmup', flags.warmup),
  rounds: num('rounds', flags.rounds),
  lowRequests: num('low-requests', flags['low-requests']),
  upstreamDelayMs: num('upstream-delay', flags['upstream-delay']),
  unlimited: !flags['no-unlimited'],
  redisUrl: flags.redis,
  progress: (line) => process.stderr.write(`bench:proxy: ${line}\n`),
});
console.log(proxyBenchReport(result));
