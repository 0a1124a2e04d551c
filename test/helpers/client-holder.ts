/**
 * A process holding one request of a limited client, for the crash test of client slots
 * (test/integration/client-limits.test.ts):
 *
 *   node --import tsx test/helpers/client-holder.ts '<json StoreTarget>' <prefix> <client id> <lease ttl ms>
 *
 * It takes one ticket through a real admission engine on a RedisStore — one slot of client <client id>
 * (maxConcurrency 1) and one of channel `ch` (maxConcurrency 10) — prints `{"held":...}` on stdout, and holds it
 * (renewing both leases every third of the TTL) until it is killed. It exits when its stdin closes, so a parent that
 * dies never leaves it behind.
 */
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { StoreTarget } from './redis.js';

const [target, prefix, clientId, ttlArg] = process.argv.slice(2);
const leaseTtlMs = Number(ttlArg);
if (!target || !prefix || !clientId || !(leaseTtlMs > 0)) {
  console.error("usage: client-holder.ts '<json StoreTarget>' <prefix> <client id> <lease ttl ms>");
  process.exit(2);
}
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();

const store = new RedisStore({ ...(JSON.parse(target) as StoreTarget), prefix });
const admission = createAdmission({ store, settings: { lease_ttl_ms: leaseTtlMs, wait_enabled: false } });
const ticket = await admission.acquire({
  candidates: [{ id: 'ch', maxConcurrency: 10 }],
  client: { id: clientId, maxConcurrency: 1 },
});
ticket.lost.addEventListener('abort', () => console.error('ticket lost'));
process.stdout.write(`${JSON.stringify({ held: ticket.channel.id, instanceId: admission.instanceId })}\n`);
// The renewal timer is unref'd; this keeps the process alive until it is killed.
setInterval(() => {}, 60_000);
