#!/usr/bin/env node
/** The `slotgate` command line: `serve` and `doctor`. Exit codes: docs/operations.md. */
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { HEARTBEAT_PERIOD_MS, OWNER_DEAD_AFTER_MS, OWNER_LATE_AFTER_MS } from 'slotgate';
import { doctor, type DoctorOptions } from './doctor.js';
import { serve, type ServeOptions } from './serve.js';

/** The gateway package's version (this file is src/cli/ or dist/cli/ in it). */
const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

const program = new Command();
program
  // (before the subcommands, which inherit both) usage errors throw instead of exiting with commander's code 1
  .exitOverride()
  .showHelpAfterError('(add --help for usage)')
  .configureOutput({ outputError: (text, write) => write(`slotgate: ${text.replace(/^error: /, '')}`) })
  .name('slotgate')
  .description('Bounded per-channel concurrency for LLM API gateways, shared through Redis')
  .version(version, '-V, --version', 'print the version')
  .addHelpText(
    'after',
    '\nExit codes: 0 ok; 1 a runtime failure (serve cannot listen) or doctor findings; ' +
      '2 a usage or configuration error (doctor: also Redis unreachable; serve keeps running and reports it); ' +
      '130 a second SIGINT/SIGTERM ended the drain at once.',
  );

program
  .command('serve')
  .description(
    'run the gateway (without --config: the bundled demo with mock channels and the embedded store)',
  )
  .option('-c, --config <file>', 'YAML or JSON configuration file (env SLOTGATE_CONFIG)')
  .option('-p, --port <n>', 'port to listen on')
  .option('--host <host>', 'address to listen on')
  .option('--redis <url>', 'Redis URL (env REDIS_URL); absent = embedded in-process store')
  .option('--cluster <nodes>', 'Redis Cluster seed nodes, host:port[,host:port...] (env REDIS_CLUSTER_NODES)')
  .option('--sentinel <sentinels>', 'Redis Sentinels, host:port[,host:port...] (env REDIS_SENTINELS)')
  .option('--master <name>', 'the primary the sentinels monitor (env REDIS_SENTINEL_MASTER)')
  // not `.action(serve)`: commander's second argument, the Command, would be taken for the environment
  .action((opts: ServeOptions) => serve(opts));

const secs = (ms: number) => `${ms / 1000} s`;

program
  .command('doctor')
  .description(
    'check Redis for slotgate keys nobody will clean up (expired leases and waiters still stored, keys without ' +
      'expiry, unknown keys) and for slots held by instances whose heartbeat stopped (dead owner, frees in N s); ' +
      'exit 1 when there are any, 2 when it cannot run',
  )
  .addHelpText(
    'after',
    [
      '',
      `Heartbeats: every gateway writes one into the instance list every ${secs(HEARTBEAT_PERIOD_MS)}.`,
      `  late  its last heartbeat is older than ${secs(OWNER_LATE_AFTER_MS)} (the next one is half a period`,
      '        overdue): its slots are listed under "late heartbeats" (never "clean") and',
      '        left alone; exit 0 unless there are findings',
      `  dead  older than ${secs(OWNER_DEAD_AFTER_MS)} (three missed): its slots are findings (exit 1)`,
      '        that --fix releases',
      "Ages compare the instance's clock with Redis's.",
      'High-water marks: the most slots each channel held at once across the fleet in the last 1-2 min;',
      '  with --config, against its max_concurrency ("ABOVE MAX" when over it; the exit code is unchanged)',
    ].join('\n'),
  )
  .option('--redis <url>', 'Redis URL (env REDIS_URL)')
  .option('--cluster <nodes>', 'Redis Cluster seed nodes, host:port[,host:port...] (env REDIS_CLUSTER_NODES)')
  .option('--sentinel <sentinels>', 'Redis Sentinels, host:port[,host:port...] (env REDIS_SENTINELS)')
  .option('--master <name>', 'the primary the sentinels monitor (env REDIS_SENTINEL_MASTER)')
  .option('-c, --config <file>', 'a gateway config file: its redis section (and prefix) unless overridden')
  .option('--prefix <prefix>', "key prefix (default: the config's redis.prefix, else slotgate)")
  .option(
    '--fix',
    "remove exactly what was reported (expired members, keys without expiry, unknown keys) and release dead owners' slots",
  )
  .option('--json', 'print the report as JSON')
  .action(async (opts: DoctorOptions) => {
    process.exitCode = await doctor(opts);
  });

try {
  await program.parseAsync(process.argv);
} catch (err) {
  // commander printed its message (a usage error: exit 2); --help and --version end here too, with 0
  if (err instanceof CommanderError) process.exit(err.exitCode === 0 ? 0 : 2);
  // one line, no stack: what went wrong is in the message
  console.error(`slotgate: ${(err as Error).message}`);
  process.exit(1);
}
