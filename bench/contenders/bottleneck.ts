/**
 * Bottleneck 2 in Redis clustering mode: one limiter per channel on one shared IORedisConnection, as its
 * documentation recommends for many limiters (`behaviour` says the rest); a job dropped at highWater is the 429.
 */
import Bottleneck from 'bottleneck';
import { Refused, type Contender, type Session } from '../types.js';

const NOT_ON_CLUSTER =
  'its scripts take several keys per limiter (b_<id>_settings, b_<id>_job_weights, …), Cluster-legal only with a ' +
  'hash tag in every limiter id; not set up for Cluster here, measured on one node only';

export const contender: Contender = {
  id: 'bottleneck',
  label: 'Bottleneck 2 (Redis clustering)',
  behaviour:
    'one limiter per channel (maxConcurrent = max, highWater = max, strategy OVERFLOW), one shared IORedisConnection; ' +
    'each request is scheduled on the next candidate round-robin and waits in that limiter queue (no time-out) ' +
    'until Redis grants it; a job dropped at highWater is the 429',
  notOnCluster: NOT_ON_CLUSTER,
  async setup(ctx): Promise<Session> {
    const client = ctx.client();
    if ((client as { isCluster?: boolean }).isCluster) throw new Error(`bottleneck: ${NOT_ON_CLUSTER}`);
    const connection = new Bottleneck.IORedisConnection({ client });
    const errors: unknown[] = [];
    connection.on('error', (err: unknown) => errors.push(err));
    const limiters = new Map<string, Bottleneck>();
    for (const channel of ctx.channels) {
      const limiter = new Bottleneck({
        id: `${ctx.namespace}-${channel.id}`,
        datastore: 'ioredis',
        connection,
        clearDatastore: false, // the namespace is new; clearing would drop other instances' registrations
        maxConcurrent: channel.max,
        highWater: channel.max,
        strategy: Bottleneck.strategy.OVERFLOW,
      });
      limiter.on('error', (err: unknown) => errors.push(err));
      limiters.set(channel.id, limiter);
    }
    await Promise.all([...limiters.values()].map((l) => l.ready()));
    let next = 0;
    return {
      acquire(set) {
        const channel = set[next++ % set.length]!;
        const limiter = limiters.get(channel.id)!;
        return new Promise((resolve, reject) => {
          let done: () => void = () => {};
          const hold = new Promise<void>((r) => (done = r));
          const finished = limiter.schedule(() => {
            resolve({
              channel: channel.id,
              release: async () => {
                done();
                await finished; // resolves after Bottleneck freed the slot in Redis
              },
            });
            return hold;
          });
          finished.catch((err: unknown) => {
            const dropped = err instanceof Bottleneck.BottleneckError && /dropped/i.test(String(err));
            reject(dropped ? new Refused('dropped') : err);
          });
        });
      },
      async close() {
        await Promise.all([...limiters.values()].map((l) => l.disconnect(false)));
        await connection.disconnect(true);
        if (errors.length)
          console.error(`bottleneck: ${errors.length} error(s), first: ${String(errors[0])}`);
      },
    };
  },
};
