/**
 * A lease holder in its own process, for the crash test (test/integration/lease-expiry.test.ts):
 *
 *   node --import tsx test/helpers/lease-holder.ts <redisUrl> <prefix> <channel> <leaseTtlMs> <count>
 *
 * Acquires <count> leases on <channel> (max = count) through a LeaseManager, which renews them every TTL / 3, prints
 * "ready" on stdout and then holds them until it is killed. Lease events go to stderr as JSON lines.
 */
import { LeaseManager } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';

const [url, prefix, channelId, ttlArg, countArg] = process.argv.slice(2);
const leaseTtlMs = Number(ttlArg);
const count = Number(countArg);
if (!url || !prefix || !channelId || !(leaseTtlMs > 0) || !(count > 0)) {
  console.error('usage: lease-holder.ts <redisUrl> <prefix> <channel> <leaseTtlMs> <count>');
  process.exit(2);
}

const store = new RedisStore({ url, prefix });
const leases = new LeaseManager({
  store,
  instanceId: `holder-${process.pid}`,
  leaseTtlMs: () => leaseTtlMs,
  onEvent: (event) => console.error(JSON.stringify({ ...event, error: undefined })),
});

for (let i = 0; i < count; i++) {
  const outcome = await leases.acquireFirst([{ channelId, max: count }], true);
  if (!outcome.lease) {
    console.error(`lease ${i + 1} of ${count} was not admitted: ${outcome.replies.join(',')}`);
    process.exit(1);
  }
}
console.log('ready');
// The renewal timer is unref'd (it never keeps a process alive by itself); this one does, until the test kills us.
setInterval(() => {}, 60_000);
