/**
 * The fair share between clients on a saturated channel: which waiter a freed slot goes to. Among the oldest
 * FAIR_WINDOW waiters of the channel's queue, the one whose client holds the fewest of the channel's slots relative
 * to its weight, the oldest first among equals; with waiters of one client only, the oldest (plain FIFO). A waiter's
 * client and weight, and each slot's client, are read from the tokens (core/ids.ts). MemoryStore uses this;
 * lua/includes/queue.lua is the same rule in Lua.
 */
import { shareOfToken } from './ids.js';

/** How many of the oldest waiters a grant chooses among. */
export const FAIR_WINDOW = 64;

/** Whether the waiters (tokens, oldest first) belong to more than one client. */
export function mixedClients(tokens: readonly string[]): boolean {
  const first = shareOfToken(tokens[0] ?? '').client;
  return tokens.some((t) => shareOfToken(t).client !== first);
}

/** Live slots held per client, from the slots' tokens. */
export function heldByClient(slotTokens: Iterable<string>): Map<string, number> {
  const held = new Map<string, number>();
  for (const token of slotTokens) {
    const { client } = shareOfToken(token);
    held.set(client, (held.get(client) ?? 0) + 1);
  }
  return held;
}

/** The index (in `tokens`, oldest first) of the waiter a freed slot goes to. */
export function fairPick(tokens: readonly string[], held: ReadonlyMap<string, number>): number {
  let pick = 0;
  let best = Infinity;
  tokens.forEach((token, i) => {
    const { client, weight } = shareOfToken(token);
    const rate = (held.get(client) ?? 0) / weight;
    if (rate < best) {
      best = rate;
      pick = i;
    }
  });
  return pick;
}
