/**
 * How many leases a Sentinel failover loses: Redis replicates asynchronously, so the new primary can lack the last
 * leases the old one confirmed. A private Sentinel set (test/helpers/redis-sentinel.ts); one RedisStore on it, with
 * `--loops` concurrent acquire loops over 16 channels that never fill, each lease with a TTL far longer than the run
 * (only a failover can take one away); the fault comes `--warm` ms in; the loops run on until the store has admitted
 * on the new primary for 500 ms. Then every token the loops were told `acquired` is looked up on the new primary.
 *
 *   npx tsx --conditions=slotgate-source bench/sentinel-failover.ts [--runs 5] [--loops 64] [--warm 1500]
 *
 * Per run: the confirmed acquires, those the new primary lacks (split into confirmed before and after the fault
 * began), the StoreUnavailableErrors and their spell. `graceful` is `SENTINEL FAILOVER`, `kill` is SIGKILL of the
 * primary; the killed node comes back as a replica between runs.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { StoreUnavailableError } from '../packages/slotgate/src/core/errors.js';
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

async function main(): Promise<void> {
  const runs = arg('runs', 5);
  const loops = arg('loops', 64);
  const warm = arg('warm', 1500);
  const set = await RedisSentinelSet.start();
  try {
    for (const mode of ['graceful', 'kill'] as const) {
      for (let r = 0; r < runs; r++) {
        const run = await lossRun(set, mode, loops, warm);
        console.log(JSON.stringify(run));
        // a sentinel will not fail the same primary over again within 2 × failover-timeout
        await sleep(6_500);
      }
    }
  } finally {
    await set.stop();
  }
}

if (process.argv[1]?.endsWith('sentinel-failover.ts')) await main();
