/**
 * redis-semaphore 5, the closest peer: one Semaphore per channel key, a tryAcquire walk over the candidates, no wait
 * queue (`behaviour` and `boundedWait` say how it is driven).
 */
import type { Redis } from 'ioredis';
import { Semaphore, TimeoutError } from 'redis-semaphore';
import { Refused, type Contender, type Session } from '../types.js';

const LOCK = { lockTimeout: 60_000, refreshInterval: 20_000 };

export const contender: Contender = {
  id: 'redis-semaphore',
  label: 'redis-semaphore 5 (tryAcquire walk)',
  behaviour:
    'one Semaphore per channel (lockTimeout 60 s, refreshed every 20 s, acquireAttemptsLimit 1, retryInterval 0); ' +
    'tryAcquire on each candidate round-robin from a rotating offset until one admits; no wait queue: ' +
    'all candidates refusing is the 429 (each refusal also costs the library a setTimeout(0) before it returns)',
  boundedWait:
    "after a refused walk, the library's own acquire on the walk's first channel: a retry every 10 ms " +
    '(retryInterval, its default) until the rest of the wait time-out (acquireTimeout) has passed; then the 429',
  async setup(ctx): Promise<Session> {
    // Every script of a Semaphore takes its one key, so a Cluster client routes each call by it (ioredis knows
    // EVALSHA's key position); its type only asks for the commands both clients have.
    const client = ctx.client() as Redis;
    const key = (id: string) => `${ctx.namespace}:${id}`;
    let offset = 0;
    return {
      async acquire(set) {
        const began = Date.now();
        const start = offset++;
        for (let i = 0; i < set.length; i++) {
          const channel = set[(start + i) % set.length]!;
          const semaphore = new Semaphore(client, key(channel.id), channel.max, {
            ...LOCK,
            acquireAttemptsLimit: 1,
            retryInterval: 0,
          });
          if (await semaphore.tryAcquire()) {
            return { channel: channel.id, release: () => semaphore.release() };
          }
        }
        const remaining = ctx.waitTimeoutMs === undefined ? 0 : ctx.waitTimeoutMs - (Date.now() - began);
        if (remaining <= 0) throw new Refused('all_full');
        const channel = set[start % set.length]!;
        const semaphore = new Semaphore(client, key(channel.id), channel.max, {
          ...LOCK,
          acquireTimeout: remaining,
          retryInterval: 10,
        });
        try {
          await semaphore.acquire();
        } catch (err) {
          if (err instanceof TimeoutError) throw new Refused('wait_timeout');
          throw err;
        }
        return { channel: channel.id, release: () => semaphore.release() };
      },
      async close() {
        await client.quit().catch(() => client.disconnect());
      },
    };
  },
};
