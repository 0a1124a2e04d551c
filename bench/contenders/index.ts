/** The contenders by id: slotgate in three modes, and the peers it is measured against. */
import type { Contender } from '../types.js';
import { contender as bottleneck } from './bottleneck.js';
import { contender as redisSemaphore } from './redis-semaphore.js';
import { slotgateContender, slotgateNoHandoffContender, slotgateRollbackContender } from './slotgate.js';

const ALL: readonly Contender[] = [
  slotgateContender,
  slotgateNoHandoffContender,
  slotgateRollbackContender,
  redisSemaphore,
  bottleneck,
];
export const ALL_IDS: readonly string[] = ALL.map((c) => c.id);

export function loadContender(id: string): Contender {
  const found = ALL.find((c) => c.id === id);
  if (!found) throw new Error(`unknown contender "${id}" (known: ${ALL_IDS.join(', ')})`);
  return found;
}
