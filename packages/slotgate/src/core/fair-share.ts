/**
 * Which waiter a freed slot goes to: among the oldest FAIR_WINDOW, the one whose client holds the fewest slots for
 * its weight, oldest first; one client only: FIFO. lua/includes/queue.lua must implement the same rule.
 */
import { shareOfToken } from './ids.js';

export const FAIR_WINDOW = 64;

export function mixedClients(tokens: readonly string[]): boolean {
  const first = shareOfToken(tokens[0] ?? '').client;
  return tokens.some((t) => shareOfToken(t).client !== first);
}

export function heldByClient(slotTokens: Iterable<string>): Map<string, number> {
  const held = new Map<string, number>();
  for (const token of slotTokens) {
    const { client } = shareOfToken(token);
    held.set(client, (held.get(client) ?? 0) + 1);
  }
  return held;
}

/** The index in `tokens` (oldest first) of the waiter a freed slot goes to. */
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
