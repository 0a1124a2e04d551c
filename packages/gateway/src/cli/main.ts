#!/usr/bin/env node
/** The `slotgate` command line: `serve` runs the gateway, `doctor` checks Redis for leftover keys. */
import { Command } from 'commander';
import { doctor, type DoctorOptions } from './doctor.js';
import { serve, type ServeOptions } from './serve.js';

const program = new Command();
program
  .name('slotgate')
  .description('Bounded per-channel concurrency for LLM API gateways, shared through Redis');

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
  // Not `.action(serve)`: commander passes the Command as the second argument, where serve() expects the environment,
  // so REDIS_URL, SLOTGATE_CONFIG and every `env:NAME` secret would be looked up on the Command object.
  .action((opts: ServeOptions) => serve(opts));

program
  .command('doctor')
  .description('list slotgate keys left in Redis with no live owner; exit 1 when there are any')
  .option('--redis <url>', 'Redis URL (env REDIS_URL)')
  .option('--cluster <nodes>', 'Redis Cluster seed nodes, host:port[,host:port...] (env REDIS_CLUSTER_NODES)')
  .option('--sentinel <sentinels>', 'Redis Sentinels, host:port[,host:port...] (env REDIS_SENTINELS)')
  .option('--master <name>', 'the primary the sentinels monitor (env REDIS_SENTINEL_MASTER)')
  .option('-c, --config <file>', 'a gateway config file: its redis section (and prefix) unless overridden')
  .option('--prefix <prefix>', "key prefix (default: the config's redis.prefix, else slotgate)")
  .option('--fix', 'remove exactly what was reported (expired members, keys without expiry, unknown keys)')
  .option('--json', 'print the report as JSON')
  .action(async (opts: DoctorOptions) => {
    process.exitCode = await doctor(opts);
  });

await program.parseAsync(process.argv);
