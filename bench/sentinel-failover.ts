/**
 * How many leases a Sentinel failover loses: Redis replicates asynchronously, so the new primary can lack the last
 * leases the old one confirmed. A private Sentinel set (test/helpers/redis-sentinel.ts); one RedisStore on it, with
 * `--loops` concurrent acquire loops over 16 channels that never fill, each lease with a TTL far longer than the run
 * (only a failover can take one away); the fault comes `--warm` ms in; the loops run on until the store has admitted
 * on the new primary for 500 ms. Then every token the loops were told `acquired` is looked up on the new primary.
 *
 *   npx tsx --conditions=slotgate-source bench/sentinel-failover.ts [--runs 5] [--loops 64] [--warm 1500]
 *     [--modes graceful,kill,overlap] [--min-replicas 1]
 *
 * Per run: the confirmed acquires, those the new primary lacks (split into confirmed before and after the fault
 * began), the StoreUnavailableErrors and their spell. `graceful` is `SENTINEL FAILOVER`, `kill` is SIGKILL of the
 * primary; the killed node comes back as a replica between runs. Then `graceful-overlap` (overlapRun below): the
 * worst case of a planned switch, two lease managers overselling one channel on purpose, and how long it lasts.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { StoreUnavailableError } from '../packages/slotgate/src/core/errors.js';
import { LeaseManager, type LeaseEvent } from '../packages/slotgate/src/admission/leases/lease-manager.js';
import { RedisStore } from '../packages/slotgate/src/store/redis/redis-store.js';
import { RedisSentinelSet } from '../test/helpers/redis-sentinel.js';

const CHANNELS = 16;
const TTL_MS = 600_000;

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

export interface LossRun {
  mode: 'graceful' | 'kill';
  /** Acquires confirmed over the run, and per second before the fault. */
  confirmed: number;
  ratePerS: number;
  /** Confirmed tokens the new primary lacks: confirmed before the fault began, and after. */
  lostBefore: number;
  lostAfter: number;
  /** Of the lost, how many were confirmed in the last 10 ms before the fault. */
  lostInLast10ms: number;
  /** From the fault to the first and the last lost lease's confirmation. */
  firstLostMs: number | null;
  lastLostMs: number | null;
  errors: number;
  otherErrors: number;
  /** From the fault to the first and the last StoreUnavailableError, and to the first acquire on the new primary. */
  firstErrorMs: number | null;
  lastErrorMs: number | null;
  failoverMs: number;
}

export async function lossRun(set: RedisSentinelSet, mode: LossRun['mode'], loops: number, warmMs: number) {
  const prefix = `loss-${mode}-${Date.now().toString(36)}`;
  const store = new RedisStore({ sentinel: { sentinels: set.addresses, name: set.name }, prefix });
  await store.ready();
  const confirmed = new Map<string, { at: number; channel: string }>();
  const errors: number[] = [];
  let other = 0;
  let seq = 0;
  let running = true;
  let lastOk = 0;
  const loop = async (i: number) => {
    const channel = `c${i % CHANNELS}`;
    while (running) {
      const token = `m:${++seq}`;
      try {
        const [reply] = await store.acquireFirst([{ channelId: channel, max: 1_000_000 }], {
          token,
          leaseTtlMs: TTL_MS,
          checkCooldown: false,
        });
        if (reply === 'acquired') confirmed.set(token, { at: performance.now(), channel });
        lastOk = performance.now();
      } catch (err) {
        if (err instanceof StoreUnavailableError) errors.push(performance.now());
        else other++;
        await sleep(10);
      }
    }
  };
  const started = performance.now();
  const all = Promise.all(Array.from({ length: loops }, (_, i) => loop(i)));
  await sleep(warmMs);
  const faultAt = performance.now();
  const beforeFault = confirmed.size;
  const killed = mode === 'kill' ? await set.killPrimary() : undefined;
  if (mode === 'graceful') await set.failover();
  else await set.waitForNewPrimary();
  const failoverMs = performance.now() - faultAt;
  const namedAt = performance.now();
  while (!(lastOk > namedAt + 500) && performance.now() < namedAt + 20_000) await sleep(50);
  running = false;
  await all;

  const admin = new Redis(set.primary.url, { maxRetriesPerRequest: 1 });
  admin.on('error', () => {});
  const present = new Set<string>();
  for (let c = 0; c < CHANNELS; c++) {
    for (const t of await admin.zrange(store.keys.slots(`c${c}`), 0, -1)) present.add(t);
  }
  admin.disconnect();
  await store.close();
  const lost = [...confirmed].filter(([token]) => !present.has(token)).map(([, v]) => v.at);
  const afterFault = errors.filter((at) => at >= faultAt);
  const run: LossRun = {
    mode,
    confirmed: confirmed.size,
    ratePerS: Math.round(beforeFault / ((faultAt - started) / 1000)),
    lostBefore: lost.filter((at) => at < faultAt).length,
    lostAfter: lost.filter((at) => at >= faultAt).length,
    lostInLast10ms: lost.filter((at) => at < faultAt && at >= faultAt - 10).length,
    firstLostMs: lost.length ? Math.round(lost.reduce((a, b) => Math.min(a, b)) - faultAt) : null,
    lastLostMs: lost.length ? Math.round(lost.reduce((a, b) => Math.max(a, b)) - faultAt) : null,
    errors: errors.length,
    otherErrors: other,
    firstErrorMs: afterFault.length ? Math.round(afterFault[0]! - faultAt) : null,
    lastErrorMs: afterFault.length ? Math.round(afterFault[afterFault.length - 1]! - faultAt) : null,
    failoverMs: Math.round(failoverMs),
  };
  if (killed) await set.revive(killed);
  else await set.waitUntilReady();
  return run;
}

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

/**
 * The worst case of a planned switch, on purpose: instance A takes all 3 slots of a channel on the old primary right
 * after the replica was promoted (A's client has not moved yet); after the switch, instance B finds the channel empty
 * on the new primary and takes the 3 slots too. Until A's next renewal ends A's leases, both believe they hold them.
 */
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

async function main(): Promise<void> {
  const runs = arg('runs', 5);
  const loops = arg('loops', 64);
  const warm = arg('warm', 1500);
  const i = process.argv.indexOf('--modes');
  const modes = (i > 0 ? process.argv[i + 1]! : 'graceful,kill,overlap').split(',');
  // --min-replicas N: the data nodes refuse writes with fewer than N replicas in sync (within 10 s)
  const minReplicas = arg('min-replicas', 0);
  const set = await RedisSentinelSet.start(
    minReplicas > 0 ? ['--min-replicas-to-write', String(minReplicas), '--min-replicas-max-lag', '10'] : [],
  );
  try {
    for (const mode of (['graceful', 'kill'] as const).filter((m) => modes.includes(m))) {
      for (let r = 0; r < runs; r++) {
        const run = await lossRun(set, mode, loops, warm);
        console.log(JSON.stringify(run));
        // a sentinel will not fail the same primary over again within 2 × failover-timeout
        await sleep(6_500);
      }
    }
    for (let r = 0; r < (modes.includes('overlap') ? runs : 0); r++) {
      console.log(JSON.stringify({ mode: 'graceful-overlap', ...(await overlapRun(set)) }));
      await sleep(6_500);
    }
  } finally {
    await set.stop();
  }
}

if (process.argv[1]?.endsWith('sentinel-failover.ts')) await main();
