import { ManualClock } from '../../packages/slotgate/src/core/clock.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import { runStoreContract } from './store-contract.js';

runStoreContract('MemoryStore', async () => {
  const clock = new ManualClock();
  const store = new MemoryStore({ clock });
  return { store, sleep: (ms) => clock.advance(ms), close: () => store.close() };
});
