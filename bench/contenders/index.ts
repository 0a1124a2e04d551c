/** The contenders by id: slotgate in three modes (and adaptive, when named), and the peers it is measured against. */
import type { Contender } from '../types.js';
import { contender as bottleneck } from './bottleneck.js';
import { contender as redisSemaphore } from './redis-semaphore.js';
import {
  slotgateAdaptiveContender,
  slotgateContender,
  slotgateNoHandoffContender,
  slotgateRollbackContender,
} from './slotgate.js';

const ALL: readonly Contender[] = [
  slotgateContender,
  slotgateNoHandoffContender,
  slotgateRollbackContender,
  redisSemaphore,
  bottleneck,
];
/** Run only when named: slotgate with adaptive limits, to measure what the reports cost (issue 36). */
const NAMED_ONLY: readonly Contender[] = [slotgateAdaptiveContender];
/** The contenders run when none are named. */
export const ALL_IDS: readonly string[] = ALL.map((c) => c.id);
export const KNOWN_IDS: readonly string[] = [...ALL, ...NAMED_ONLY].map((c) => c.id);

export function loadContender(id: string): Contender {
  const found = [...ALL, ...NAMED_ONLY].find((c) => c.id === id);
  if (!found) throw new Error(`unknown contender "${id}" (known: ${KNOWN_IDS.join(', ')})`);
  return found;
}
