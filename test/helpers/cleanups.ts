/** Test resources to close, run in reverse order of registration after each test (or once after the file). */
import { afterAll, afterEach } from 'vitest';

export type Cleanup = () => unknown;

export function useCleanups(when: 'each' | 'all' = 'each'): Cleanup[] {
  const cleanups: Cleanup[] = [];
  const run = async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  };
  if (when === 'each') afterEach(run);
  else afterAll(run);
  return cleanups;
}
