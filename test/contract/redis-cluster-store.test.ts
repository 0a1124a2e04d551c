import { setTimeout as sleep } from 'node:timers/promises';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { clearCluster, clusterNodes, uniquePrefix } from '../helpers/redis.js';
import { CLAIM_MS, runStoreContract } from './store-contract.js';

// The same contract on a private 3-master cluster, through the store's own Cluster client (auto-pipelining on).
runStoreContract(
  'RedisStore on Redis Cluster',
  async () => {
    const store = new RedisStore({
      cluster: { nodes: clusterNodes() },
      prefix: uniquePrefix('contract-cluster'),
      claimMs: CLAIM_MS,
    });
    return {
      store,
      sleep,
      async close() {
        await clearCluster(store.keys.pattern());
        await store.close();
      },
    };
  },
  { loadSummary: true },
);
