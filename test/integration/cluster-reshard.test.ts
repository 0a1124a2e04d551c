/**
 * Resharding a Redis Cluster while traffic runs, the way an operator grows one: the hash slots holding live channels
 * move between masters (their keys with them, by MIGRATE) while three admission engines in child processes, with
 * waiting on, keep every slot of every channel busy. The upstream here counts in-flight requests per channel itself,
 * so the limit is checked where it matters; every error a caller saw is reported by message.
 *
 * Two kinds of move: redis-cli --cluster reshard (the operator's tool; a slot's few keys go in one MIGRATE, so a
 * channel is split between two masters for milliseconds), and one slot moved a key at a time with pauses, so the
 * store's scripts meet ASK and TRYAGAIN (some of a script's keys on each master) for a while.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { AcquirerOptions, AcquirerSummary } from '../helpers/acquirer.js';
import { killAcquirers, startAcquirer, within, type AcquirerProcess } from '../helpers/acquirer-process.js';
import { FakeUpstream } from '../helpers/fake-upstream.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import {
  keySlots,
  lowestSlots,
  migrateSlotSlowly,
  ownerOf,
  redirectionsAnswered,
} from '../helpers/slot-migration.js';
import { until } from '../helpers/until.js';

const PROCESSES = 3;
const ACQUIRERS = 12;
const MAX = 2;
/** Slots each redis-cli reshard moves: the lowest of the source master, which hold the moving channels. */
const RESHARD_SLOTS = 60;
const MOVING = 3;
const STAYING = 2;

/** Channel ids whose slot is among `slots`, `count` of them (ids of the form r<n>, tried in order). */
async function channelsIn(
  cluster: RedisCluster,
  slots: ReadonlySet<number>,
  count: number,
  avoid: Set<string>,
) {
  const found: string[] = [];
  for (let base = 0; found.length < count; base += 2000) {
    if (base > 200_000) throw new Error(`no ${count} channel ids in ${slots.size} slots`);
    const ids = Array.from({ length: 2000 }, (_, i) => `r${base + i}`).filter((id) => !avoid.has(id));
    // the hash tag is the channel id (keys.ts): any key of the channel has this slot
    const owned = await keySlots(
      cluster,
      ids.map((id) => `x:{${id}}:slots`),
    );
    ids.forEach((id, i) => {
      if (found.length < count && slots.has(owned[i]!)) found.push(id);
    });
  }
  for (const id of found) avoid.add(id);
  return found;
}

describe('resharding a Redis Cluster under traffic', () => {
  let cluster: RedisCluster;
  let upstream: FakeUpstream;

  beforeAll(async () => {
    cluster = await RedisCluster.start();
    // Holds each request 20–30 ms.
    upstream = await FakeUpstream.start({
      reply: () => ({
        delayMs: 20 + Math.random() * 10,
        body: 'ok',
        headers: { 'content-type': 'text/plain' },
      }),
      keepRequests: false,
    });
  }, 60_000);
  afterEach(() => killAcquirers());
  afterAll(async () => {
    killAcquirers();
    await upstream?.close();
    await cluster?.stop();
  });

  /** Resolves once every channel in `ids` has received `more` requests past `from` (the traffic goes on). */
  async function progressed(
    ids: readonly string[],
    from: Record<string, number>,
    more: number,
    what: string,
  ) {
    await within(
      (async () => {
        while (ids.some((id) => upstream.record(id).received < (from[id] ?? 0) + more)) {
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      })(),
      20_000,
      what,
    );
  }
  const received = () =>
    Object.fromEntries(upstream.channels().map((id) => [id, upstream.record(id).received]));

  it('slots holding live channels move between masters: never more than max in flight, traffic goes on', async () => {
    const taken = new Set<string>();
    // Moving channels in the lowest slots of master 0; the others in slots no reshard here touches.
    const low0 = new Set(await lowestSlots(cluster, 0, RESHARD_SLOTS));
    const moving = await channelsIn(cluster, low0, MOVING, taken);
    const high1 = new Set((await lowestSlots(cluster, 1, 5000)).slice(RESHARD_SLOTS));
    const staying = await channelsIn(cluster, high1, STAYING, taken);
    const ids = [...moving, ...staying];
    const slotOf = Object.fromEntries(
      (
        await keySlots(
          cluster,
          ids.map((id) => `x:{${id}}:slots`),
        )
      ).map((slot, i) => [ids[i]!, slot]),
    );
    for (const id of moving) expect(await ownerOf(cluster, slotOf[id]!)).toBe(0);

    const prefix = 'reshard';
    const opts: AcquirerOptions = {
      redis: { cluster: { nodes: cluster.addresses } },
      prefix,
      upstream: upstream.origin,
      acquirers: ACQUIRERS,
      admissions: Number.MAX_SAFE_INTEGER,
      channels: ids.length,
      channelIds: ids,
      maxConcurrency: MAX,
      // 36 acquirers for 10 slots: most wait in the queues, so grants (released on one master, announced by PUBLISH
      // through the cluster bus) carry the traffic
      settings: { max_waiting_per_channel: 40, safety_poll_ms: 2500, wait_timeout_ms: 10_000 },
      deadlineMs: 120_000,
    };
    const children: AcquirerProcess[] = Array.from({ length: PROCESSES }, () => startAcquirer(opts));
    await within(Promise.all(children.map((c) => c.ready)), 20_000, 'starting the acquirer processes');
    const before = await redirectionsAnswered(cluster);
    for (const c of children) c.proc.stdin!.write('go\n');
    await progressed(ids, {}, 20, 'the traffic starting on every channel');

    // 1. redis-cli --cluster reshard: master 0's lowest slots (the moving channels' among them) to master 2
    let mark = received();
    await cluster.reshard(0, 2, RESHARD_SLOTS);
    for (const id of moving) expect(await ownerOf(cluster, slotOf[id]!), id).toBe(2);
    await progressed(ids, mark, 20, 'the traffic after the first reshard');

    // 2. and on from master 2 to master 1 (master 2's lowest slots are now the ones it just took)
    mark = received();
    await cluster.reshard(2, 1, RESHARD_SLOTS);
    for (const id of moving) expect(await ownerOf(cluster, slotOf[id]!), id).toBe(1);
    await progressed(ids, mark, 20, 'the traffic after the second reshard');

    // 3. one live channel's slot back to master 0, a key at a time: after each key, until Redis has answered two
    // scripts of the traffic with ASK or TRYAGAIN (its keys split between the masters)
    mark = received();
    const slow = moving[0]!;
    const splitAnswers = async () => {
      const { ASK, TRYAGAIN } = await redirectionsAnswered(cluster);
      return ASK + TRYAGAIN;
    };
    const keysMoved = await migrateSlotSlowly(cluster, slotOf[slow]!, 1, 0, async () => {
      const seen = await splitAnswers();
      await until(async () => (await splitAnswers()) >= seen + 2, 'scripts meeting the split slot', {
        intervalMs: 10,
      });
    });
    expect(keysMoved).toBeGreaterThan(0);
    expect(await ownerOf(cluster, slotOf[slow]!)).toBe(0);
    await progressed(ids, mark, 20, 'the traffic after the slow migration');
    const after = await redirectionsAnswered(cluster);
    const redirections = {
      MOVED: after.MOVED - before.MOVED,
      ASK: after.ASK - before.ASK,
      TRYAGAIN: after.TRYAGAIN - before.TRYAGAIN,
    };

    for (const c of children) c.proc.stdin!.write('stop\n');
    const summaries: AcquirerSummary[] = await within(
      Promise.all(children.map((c) => c.summary)),
      30_000,
      'the acquirers stopping',
    );
    const report = JSON.stringify({ summaries, highest: upstream.highest(), keysMoved, redirections });
    console.info(`resharding under traffic: ${report}`);

    // the moves met the traffic: clients with a stale slot map were sent on (MOVED), scripts met a split slot
    expect(redirections.MOVED, report).toBeGreaterThan(0);
    expect(redirections.ASK + redirections.TRYAGAIN, report).toBeGreaterThan(0);
    // I1, as the upstream saw it
    for (const id of ids) expect(upstream.record(id).max, `${id}: ${report}`).toBeLessThanOrEqual(MAX);
    expect(upstream.bad).toEqual([]);
    // the load was real: every channel was driven to its max, and waiters were served
    for (const id of ids) expect(upstream.record(id).max, `${id}: ${report}`).toBe(MAX);
    expect(summaries.reduce((n, s) => n + s.waited, 0)).toBeGreaterThan(0);
    // no error reached a caller: not a redirection (MOVED, ASK, TRYAGAIN) turned into a store failure, nor a time-out
    for (const s of summaries) {
      expect(s.errorMessages, report).toEqual({});
      expect(s.otherErrors, report).toEqual({});
      expect(s.upstreamErrors, report).toBe(0);
      expect(s.unfinished, report).toBe(0);
      expect(s.events.lease_lost ?? 0, report).toBe(0);
    }

    // I5: nothing left held or waiting once every process is done, wherever the keys are now
    const store = new RedisStore({ cluster: { nodes: cluster.addresses }, prefix });
    try {
      const loads = await store.readLoads(ids);
      for (const id of ids) expect(loads.get(id), id).toMatchObject({ active: 0, waiting: 0 });
    } finally {
      await store.close();
    }
  }, 150_000);
});
