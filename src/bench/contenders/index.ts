/**
 * The contenders by id. slotgate's are built in; the peers (redis-semaphore, Bottleneck) live in the source
 * checkout's bench/contenders/ and are loaded with a dynamic import only when that works: from a checkout run
 * through tsx (`npm run bench`), with the peers installed as devDependencies.
 */
import type { Contender } from '../types.js';
import { slotgateContender, slotgateNoHandoffContender, slotgateRollbackContender } from './slotgate.js';

export const BUILT_IN: readonly Contender[] = [
  slotgateContender,
  slotgateNoHandoffContender,
  slotgateRollbackContender,
];
export const PEER_IDS = ['redis-semaphore', 'bottleneck'] as const;
export const ALL_IDS: readonly string[] = [...BUILT_IN.map((c) => c.id), ...PEER_IDS];

export async function loadContender(id: string): Promise<Contender> {
  const builtIn = BUILT_IN.find((c) => c.id === id);
  if (builtIn) return builtIn;
  if (!(PEER_IDS as readonly string[]).includes(id)) {
    throw new Error(`unknown contender "${id}" (known: ${ALL_IDS.join(', ')})`);
  }
  const url = new URL(`../../../bench/contenders/${id}.ts`, import.meta.url);
  const mod = (await import(url.href)) as { contender?: Contender };
  if (!mod.contender) throw new Error(`${url.pathname} exports no \`contender\``);
  return mod.contender;
}

/** Loads what it can; returns the contenders and a note for each one that could not be loaded. */
export async function loadContenders(
  ids: readonly string[],
): Promise<{ contenders: Contender[]; notes: string[] }> {
  const contenders: Contender[] = [];
  const notes: string[] = [];
  for (const id of ids) {
    try {
      contenders.push(await loadContender(id));
    } catch (err) {
      const code = (err as { code?: string }).code;
      const why =
        code === 'ERR_UNKNOWN_FILE_EXTENSION' || code === 'ERR_MODULE_NOT_FOUND'
          ? 'the peer comparisons run from a source checkout with its devDependencies (`npm ci && npm run bench`)'
          : (err as Error).message;
      notes.push(`${id}: left out — ${why}`);
    }
  }
  return { contenders, notes };
}
