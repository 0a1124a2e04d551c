/**
 * `slotgate serve` on a Redis Cluster, for the multi-instance gateway tests (spawnGateway's `script`):
 *
 *   node --conditions=slotgate-source --import tsx test/helpers/cluster-gateway.ts \
 *     serve --config <path> --port <port> --cluster host:port,host:port,...
 *
 * The gateway is the real one (createGateway, the config file's channels, settings and prefix); only its store is
 * given: a RedisStore on the cluster's nodes, with the store's own Cluster client (auto-pipelining on). The config
 * file needs a `redis` section for its prefix and time-outs; its URL is not used. SIGTERM closes it gracefully.
 */
import { parseArgs } from 'node:util';
import { loadConfigFile } from '../../packages/gateway/src/config.js';
import { createGateway } from '../../packages/gateway/src/server.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';

const { values } = parseArgs({
  args: process.argv.slice(3), // after `serve`
  options: { config: { type: 'string' }, port: { type: 'string' }, cluster: { type: 'string' } },
});
const loaded = await loadConfigFile(values.config!);
const config = { ...loaded, server: { ...loaded.server, port: Number(values.port) } };
if (!config.redis) throw new Error('the config file needs a redis section (prefix, time-outs)');
const store = new RedisStore({
  cluster: { nodes: values.cluster!.split(',') },
  prefix: config.redis.prefix,
  timeoutMs: config.redis.timeout_ms,
  restartGraceMs: config.redis.restart_grace_ms,
});
const gateway = await createGateway({ config, store });
const address = await gateway.listen();
// the line spawnGateway waits for
gateway.app.log.info({ address, store: 'redis-cluster' }, `slotgate listening on ${address}`);

let stopping = false;
process.on('SIGTERM', () => {
  if (stopping) return;
  stopping = true;
  gateway
    .close()
    .then(() => store.close())
    .then(
      () => process.exit(0),
      () => process.exit(1),
    );
});
