/**
 * What a schedule may leave in Redis once every instance is closed: the epoch key (it must outlive everything), and
 * otherwise only keys that go by themselves within their documented expiry (docs/redis.md, "Key layout" and
 * "Nothing is left behind"), so nothing stays once traffic stops. No lease of a gracefully closed instance is still
 * live; a crashed instance's leases, grants and registrations are bounded by `deadOwnerProblems`. Waiting out those
 * expiries would cost a lease TTL per schedule; their bounds are read from the PTTLs instead.
 */
import type { RedisBackend } from './backends.js';

export interface DeadOwner {
  id: string;
  /** Redis time once every connection of the crashed instance was gone. */
  diedAt: number;
  /** Nothing it held or was granted may be live after this (Redis time). */
  liveUntil: number;
}

export interface LeftoverLimits {
  leaseTtlMs: number;
  /** A registration's lifetime: `wait_timeout_ms` + 2 s. */
  lifetimeMs: number;
  dead: readonly DeadOwner[];
  /** No slots or queue key at all (a run without faults, where every lease and waiter left). */
  strict: boolean;
  /** The tokens of every ticket the run released. */
  released: ReadonlySet<string>;
  claimMs: number;
}

const PEAK_KEY_MS = 120_000;
const ownerOf = (token: string) => token.slice(0, token.indexOf(':'));

/** The members a crashed instance has in the store past `liveUntil`: none may be. */
export async function deadOwnerProblems(
  redis: RedisBackend,
  channels: readonly string[],
  dead: readonly DeadOwner[],
): Promise<string[]> {
  const problems: string[] = [];
  for (const ch of channels) {
    for (const [token, score] of await redis.members(redis.keys.slots(ch))) {
      const owner = dead.find((d) => d.id === ownerOf(token));
      if (owner && score > owner.liveUntil) {
        problems.push(
          `${token} of crashed ${owner.id} held on ${ch} until ${score - owner.diedAt} ms after the crash ` +
            `(bound ${owner.liveUntil - owner.diedAt} ms)`,
        );
      }
    }
  }
  return problems;
}

export async function leftoverProblems(redis: RedisBackend, limits: LeftoverLimits): Promise<string[]> {
  const { keys } = redis;
  const now = await redis.time();
  const problems: string[] = [];
  const expiring = (key: string, pttl: number, boundMs: number) => {
    if (pttl === -1) problems.push(`${key} has no expiry`);
    else if (pttl > boundMs) problems.push(`${key} expires in ${pttl} ms, bound ${boundMs} ms`);
  };
  for (const { key, pttl } of await redis.keysLeft()) {
    const parsed = keys.parse(key);
    if (pttl === -2 || parsed?.kind === 'epoch') continue;
    if (
      parsed &&
      'channelId' in parsed &&
      (parsed.kind === 'slots' || parsed.kind === 'queue') &&
      limits.strict
    ) {
      problems.push(`${key} left after a run without faults`);
    }
    switch (parsed?.kind) {
      case 'slots':
        expiring(key, pttl, 1.25 * limits.leaseTtlMs);
        for (const [token, score] of await redis.members(key)) {
          const dead = limits.dead.some((d) => d.id === ownerOf(token));
          if (!dead && score > now)
            problems.push(`${token} is still live on ${key} after its instance closed`);
        }
        break;
      case 'queue':
        expiring(key, pttl, 2 * limits.lifetimeMs);
        break;
      case 'peak':
        expiring(key, pttl, PEAK_KEY_MS);
        break;
      case 'load_counts':
      case 'load_snapshot':
        expiring(key, pttl, 1.25 * limits.leaseTtlMs);
        break;
      default:
        problems.push(`${key}: not a key these schedules write`);
    }
  }
  return problems;
}
