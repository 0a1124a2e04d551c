/**
 * The model tests on the shared 3-master Redis Cluster (README.md, "Model tests"): schedules
 * compared with the memory model, and under crashes and dropped connections. No pauses or restarts here: the Cluster
 * is shared with the other test files.
 */
import { describe, it } from 'vitest';
import { clusterNodes } from '../helpers/redis.js';
import { checkSchedules, checkUnderFaults, compareWithModel, share } from './property.js';
import { CALLS, schedules } from './schedule.js';

describe('admission model on a Redis Cluster', () => {
  const target = () => ({ cluster: { nodes: clusterNodes() } });

  it('without faults, every schedule gives the memory model’s outcomes', async () => {
    const arbitrary = schedules({ mix: CALLS, maxOps: 25, exactQueues: true });
    await checkSchedules('Cluster, no faults', arbitrary, share(0.15), (s) => compareWithModel(s, target()));
  }, 600_000);

  it('under crashes and dropped connections, the bounds hold', async () => {
    const arbitrary = schedules({
      mix: { ...CALLS, sleep: 2, crash: 2, drop: 2 },
      maxOps: 20,
      exactQueues: false,
    });
    await checkSchedules('Cluster, faults', arbitrary, share(0.15), (s) => checkUnderFaults(s, target()));
  }, 600_000);
});
