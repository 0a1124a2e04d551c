/**
 * redis-semaphore 5 (the closest peer): one Semaphore per channel key, `tryAcquire` with a single attempt, walking the
 * candidates round-robin from a rotating offset until one admits; release = its ZREM. It has no wait queue: when
 * every candidate refuses, the request is a 429 (the acquirer backs off 5 ms and retries, as with every contender).
 */
import { Semaphore } from 'redis-semaphore';
import { Refused, type Contender, type Session } from '../types.js';

export const contender: Contender = {
  id: 'redis-semaphore',
  label: 'redis-semaphore 5 (tryAcquire walk)',
  behaviour:
    'one Semaphore per channel (lockTimeout 60 s, refreshed every 20 s, acquireAttemptsLimit 1, retryInterval 0); ' +
    'tryAcquire on each candidate round-robin from a rotating offset until one admits; no wait queue: ' +
    'all candidates refusing is the 429 (each refusal also costs the library a setTimeout(0) before it returns)',
  async setup(ctx): Promise<Session> {
    const client = ctx.client();
    let offset = 0;
    return {
      async acquire(set) {
        const start = offset++;
        for (let i = 0; i < set.length; i++) {
          const channel = set[(start + i) % set.length]!;
          const semaphore = new Semaphore(client, `${ctx.namespace}:${channel.id}`, channel.max, {
            acquireAttemptsLimit: 1,
            retryInterval: 0,
            lockTimeout: 60_000,
            refreshInterval: 20_000,
          });
          if (await semaphore.tryAcquire()) {
            return { channel: channel.id, release: () => semaphore.release() };
          }
        }
        throw new Refused('all_full');
      },
      async close() {
        await client.quit().catch(() => client.disconnect());
      },
    };
  },
};
