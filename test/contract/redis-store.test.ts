import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';
import { CLAIM_MS, runStoreContract } from './store-contract.js';

runStoreContract(
  'RedisStore',
  async () => {
    const store = new RedisStore({ url: redisUrl(), prefix: uniquePrefix('contract'), claimMs: CLAIM_MS });
    return {
      store,
      sleep,
      async close() {
        // leave nothing behind on the shared server
        const admin = new Redis(redisUrl());
        const keys = await admin.keys(store.keys.pattern());
        if (keys.length) await admin.del(...keys);
        admin.disconnect();
        await store.close();
      },
    };
  },
  { loadSummary: true },
);
