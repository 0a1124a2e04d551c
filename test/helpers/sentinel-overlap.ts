/**
 * The worst case of a planned Sentinel switch, on purpose (sentinel.test.ts): instance A takes all
 * 3 slots of a channel on the old primary right after the replica was promoted (A's client has not moved yet); after
 * the switch, instance B finds the channel empty on the new primary and takes the 3 slots too. Until A's next renewal
 * ends A's leases, both believe they hold them: how long, and how many above max.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { LeaseManager, type LeaseEvent } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { RedisSentinelSet } from './redis-sentinel.js';

export interface OverlapRun {
  /** Instance A's leases taken on the old primary after the replica's promotion, and how many the new one has. */
  takenInWindow: number;
  onNewPrimary: number;
  /** The most leases the two instances believed they held at once on the channel of max 3, and for how long > 3. */
  peak: number;
  msAbove: number;
  /** A's leases ended by fencing (`lease_lost` missing), and the ms from the switch to the last. */
  fenced: number;
  fencedMsAfterSwitch: number | null;
}

export async function overlapRun(set: RedisSentinelSet, ttlMs = 5000): Promise<OverlapRun> {
  const prefix = `overlap-${Date.now().toString(36)}`;
  const events: { at: number; e: LeaseEvent }[] = [];
  const instance = (id: string) => {
    const store = new RedisStore({ sentinel: { sentinels: set.addresses, name: set.name }, prefix });
    const leases = new LeaseManager({
      store,
      instanceId: id,
      leaseTtlMs: () => ttlMs,
      onEvent: (e) => events.push({ at: performance.now(), e }),
    });
    return { store, leases };
  };
  const a = instance('a');
  const b = instance('b');
  await Promise.all([a.store.ready(), b.store.ready()]);
  const target = [{ channelId: 'w', max: 3 }];
  const promoted = new Redis(set.replica.url, { maxRetriesPerRequest: 1 });
  promoted.on('error', () => {});
  const switching = set.failover();
  while (/role:slave/.test(await promoted.info('replication'))) await sleep(2);
  const taken: string[] = [];
  for (let i = 0; i < 3; i++) {
    const { lease } = await a.leases.acquireFirst(target, false);
    if (lease) taken.push(lease.token);
  }
  const onNew = (await promoted.zrange(a.store.keys.slots('w'), 0, -1)).filter((t) => taken.includes(t));
  await switching;
  const switchedAt = performance.now();
  let peak = a.leases.size;
  let aboveSince: number | undefined;
  let msAbove = 0;
  const note = () => {
    const total = a.leases.size + b.leases.size;
    peak = Math.max(peak, total);
    if (total > 3 && aboveSince === undefined) aboveSince = performance.now();
    if (total <= 3 && aboveSince !== undefined) {
      msAbove += performance.now() - aboveSince;
      aboveSince = undefined;
    }
  };
  while (b.leases.size < 3 && performance.now() < switchedAt + 10_000) {
    const { lease } = await b.leases.acquireFirst(target, false).catch(() => ({ lease: undefined }));
    note();
    if (!lease) await sleep(20);
  }
  while (a.leases.size > 0 && performance.now() < switchedAt + 3 * ttlMs) {
    await sleep(5);
    note();
  }
  const fenced = events.filter(({ e }) => e.type === 'lease_lost' && e.reason === 'missing');
  promoted.disconnect();
  await Promise.all([a.leases.close(500), b.leases.close(500)]);
  await Promise.all([a.store.close(), b.store.close()]);
  await set.waitUntilReady();
  return {
    takenInWindow: taken.length,
    onNewPrimary: onNew.length,
    peak,
    msAbove: Math.round(msAbove),
    fenced: fenced.length,
    fencedMsAfterSwitch: fenced.length ? Math.round(fenced[fenced.length - 1]!.at - switchedAt) : null,
  };
}
