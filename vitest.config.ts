import { defineConfig } from 'vitest/config';

/**
 * Two projects, both run by `npm test`: `unit` (core logic, MemoryStore, the gateway through inject, on manual
 * clocks; no Redis, no child processes) and `integration` (real redis-server processes, gateway processes, the
 * benchmark harness, the randomized model tests of test/model). `slotgate` and `slotgate-gateway` resolve to their sources, so no build is needed.
 */
const conditions = ['slotgate-source'];

export default defineConfig({
  resolve: { conditions },
  ssr: { resolve: { conditions, externalConditions: conditions } },
  test: {
    testTimeout: 20_000,
    hookTimeout: 20_000,
    pool: 'forks',
    reporters: ['default'],
    projects: [
      {
        extends: true,
        test: { name: 'unit', include: ['test/unit/**/*.test.ts', 'test/contract/memory-store.test.ts'] },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: [
            'test/integration/**/*.test.ts',
            'test/contract/redis-store.test.ts',
            'test/contract/redis-cluster-store.test.ts',
            'test/model/**/*.test.ts',
          ],
          globalSetup: ['test/helpers/global-setup.ts'],
        },
      },
    ],
  },
});
