import { instanceOfToken } from '../core/ids.js';

/** Instance id → slots, from live lease tokens. */
export function countByInstance(tokens: Iterable<string>): Map<string, number> {
  const holders = new Map<string, number>();
  for (const token of tokens) {
    const instance = instanceOfToken(token);
    holders.set(instance, (holders.get(instance) ?? 0) + 1);
  }
  return holders;
}

/** The same from (token, expiry) pairs live at `now`. */
export function holdersOf(members: Iterable<readonly [string, number]>, now: number): Map<string, number> {
  const live: string[] = [];
  for (const [token, expiry] of members) if (expiry > now) live.push(token);
  return countByInstance(live);
}
