import { ManualClock } from '../../packages/slotgate/src/core/clock.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import { CLAIM_MS, runStoreContract } from './store-contract.js';

runStoreContract('MemoryStore', async () => {
  const clock = new ManualClock();
  const store = new MemoryStore({ clock, claimMs: CLAIM_MS });
  return { store, sleep: (ms) => clock.advance(ms), close: () => store.close() };
});
