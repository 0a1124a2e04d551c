/**
 * No oversell across real processes: three child processes, each an admission engine with
 * 100 concurrent acquirers, share one Redis and 20 channels of max 2 (one candidate set, one priority). Every holder
 * calls an upstream run here in the test while it holds its slot; the upstream counts in-flight requests per channel
 * itself, so the assertions are about what the upstream saw, not what the engines believe. The same run on one node
 * and on a 3-master cluster (the store's own Cluster client, auto-pipelining on: one script call per channel tried).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { AcquirerOptions } from '../helpers/acquirer.js';
import {
  killAcquirers as killAll,
  startAcquirer as startChild,
  within,
} from '../helpers/acquirer-process.js';
import { FakeUpstream } from '../helpers/fake-upstream.js';
import { clearOn, topologies, uniquePrefix } from '../helpers/redis.js';

const PROCESSES = 3;
const ACQUIRERS = 100;
const ADMISSIONS = 5;
const CHANNELS = 20;
const MAX = 2;

describe.each(topologies())('several processes on $name', ({ target }) => {
  const prefix = uniquePrefix('multiproc');
  let upstream: FakeUpstream;

  beforeAll(async () => {
    // Holds each request 20–30 ms.
    upstream = await FakeUpstream.start({
      reply: () => ({
        delayMs: 20 + Math.random() * 10,
        body: 'ok',
        headers: { 'content-type': 'text/plain' },
      }),
      keepRequests: false,
    });
  });

  afterEach(() => {
    killAll(); // a failed or timed-out test never leaves children behind
  });

  afterAll(async () => {
    killAll();
    await upstream?.close();
    await clearOn(target, `${prefix}:*`);
  });

  it(`3 processes × ${ACQUIRERS} acquirers never exceed max ${MAX} per channel at the upstream`, async () => {
    const opts: AcquirerOptions = {
      redis: target,
      prefix,
      upstream: upstream.origin,
      acquirers: ACQUIRERS,
      admissions: ADMISSIONS,
      channels: CHANNELS,
      maxConcurrency: MAX,
      // Queues with room for every acquirer, short polls and short waits: the burst goes through waiting, wait
      // time-outs and retries (each loop retries a CapacityError after a short pause), and ends in a few seconds.
      settings: { max_waiting_per_channel: 20, safety_poll_ms: 2000, wait_timeout_ms: 1000 },
      deadlineMs: 15_000,
    };
    const started = Array.from({ length: PROCESSES }, () => startChild(opts));
    await within(Promise.all(started.map((c) => c.ready)), 15_000, 'starting the acquirer processes');
    for (const c of started) c.proc.stdin!.write('go\n');
    const summaries = await within(Promise.all(started.map((c) => c.summary)), 25_000, 'the burst');

    const admitted = summaries.reduce((n, s) => n + s.admitted, 0);
    const waited = summaries.reduce((n, s) => n + s.waited, 0);
    const channels = upstream.channels();
    const report = {
      summaries,
      channels: Object.fromEntries(
        channels.map((id) => [id, `${upstream.record(id).max}/${upstream.record(id).received}`]),
      ),
    };

    // I1, as the upstream saw it.
    const over = channels.filter((id) => upstream.record(id).max > MAX);
    expect(over, JSON.stringify(report)).toEqual([]);

    // The load was real: every acquirer finished, every admission reached the upstream exactly once, the
    // channels were driven to their maximum, and the burst had to queue.
    expect(upstream.bad).toEqual([]);
    expect(channels.filter((id) => !/^ch\d+$/.test(id))).toEqual([]);
    expect(new Set(summaries.map((s) => s.instanceId)).size).toBe(PROCESSES);
    for (const s of summaries) {
      expect(s.unfinished, JSON.stringify(s)).toBe(0);
      expect(s.upstreamErrors, JSON.stringify(s)).toBe(0);
      expect(s.otherErrors, JSON.stringify(s)).toEqual({});
    }
    expect(admitted).toBe(PROCESSES * ACQUIRERS * ADMISSIONS);
    expect(upstream.total()).toBe(admitted);
    const atMax = channels.filter((id) => upstream.record(id).max === MAX).length;
    expect(atMax, JSON.stringify(report)).toBeGreaterThanOrEqual(15);
    expect(waited).toBeGreaterThan(0);

    // I5: nothing left behind in Redis once every process is done.
    const store = new RedisStore({ ...target, prefix });
    try {
      const ids = Array.from({ length: CHANNELS }, (_, i) => `ch${i}`);
      const loads = await store.readLoads(ids);
      for (const id of ids) expect(loads.get(id), id).toMatchObject({ active: 0, waiting: 0 });
    } finally {
      await store.close();
    }
  }, 45_000);
});
