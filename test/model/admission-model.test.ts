/**
 * Randomized model tests on one Redis node of the test's own, which it restarts and pauses (README.md, "Model
 * tests"): 2–4 instances, random schedules of acquires, releases, aborts and reloads, compared with the memory model
 * when nothing fails, and checked against the invariants and the documented bounds under crashes, dropped
 * connections, pauses and empty restarts. A failing schedule shrinks to a minimal one, printed with its trace.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { RedisServer } from '../helpers/redis-server.js';
import { checkSchedules, checkUnderFaults, compareWithModel, share } from './property.js';
import { CALLS, schedules } from './schedule.js';

describe('admission model on one Redis node', () => {
  let server: RedisServer;
  beforeAll(async () => {
    server = await RedisServer.start();
  });
  afterAll(async () => {
    await server?.stop();
  });
  const target = () => ({ url: server.url });

  it('without faults, every schedule gives the memory model’s outcomes', async () => {
    const arbitrary = schedules({ mix: CALLS, maxOps: 25, exactQueues: true });
    await checkSchedules('one node, no faults', arbitrary, share(0.4), (s) => compareWithModel(s, target()));
  }, 600_000);

  it('under crashes, dropped connections, short pauses and empty restarts, the bounds hold', async () => {
    const mix = { ...CALLS, sleep: 2, crash: 2, drop: 2, pause: 1, restart: 1 };
    const arbitrary = schedules({ mix, maxOps: 15, exactQueues: false });
    await checkSchedules('one node, faults', arbitrary, share(0.2), (s) =>
      checkUnderFaults(s, target(), server),
    );
  }, 600_000);

  it('under pauses past the lease TTL, the bounds hold', async () => {
    const mix = { ...CALLS, crash: 2, pause: 4 };
    const arbitrary = schedules({ mix, maxOps: 10, exactQueues: false, longPauseMs: 6_000 }).filter((s) =>
      s.ops.some((op) => op.kind === 'pause'),
    );
    await checkSchedules('one node, long pauses', arbitrary, share(0.01, 2), (s) =>
      checkUnderFaults(s, target(), server),
    );
  }, 600_000);
});
