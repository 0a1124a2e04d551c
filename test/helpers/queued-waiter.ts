/**
 * A process with one request waiting in a channel's queue, for the test of a grant to an instance that died:
 *
 *   node --import tsx test/helpers/queued-waiter.ts '<json StoreTarget>' <prefix> <channel>
 *
 * It prints `queued` once its request waits in the queue, then waits until it is killed.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { StoreTarget } from './redis.js';

const [target, prefix, channel] = process.argv.slice(2) as [string, string, string];
const store = new RedisStore({ ...(JSON.parse(target) as StoreTarget), prefix });
const admission = createAdmission({
  store,
  settings: { wait_timeout_ms: 60_000, max_waiting_per_channel: 20, safety_poll_ms: 10_000 },
});
void admission.acquire({ candidates: [{ id: channel, maxConcurrency: 1 }] });
while ((admission.stats().channels[channel]?.waiting ?? 0) === 0) await sleep(10);
process.stdout.write('queued\n');
process.stdin.on('close', () => process.exit(0));
await new Promise(() => {});
