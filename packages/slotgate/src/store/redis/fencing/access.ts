/**
 * What the Redis user may not run of what slotgate needs (lua/probeAccess-1.lua), probed beside each epoch key: each
 * Cluster master has its own ACL. The epoch check runs it before it verifies a connection; `slotgate doctor` too.
 */
import type { Cluster, Redis } from 'ioredis';
import { ACCESS_SCRIPT } from '../scripts.js';

/** The denied commands, as the probe names them (`info`, `zadd key`, `publish channel`); empty when none is. */
export async function deniedCommands(
  client: Redis | Cluster,
  epochKeys: readonly string[],
  channel: string,
): Promise<string[]> {
  try {
    const replies = await Promise.all(
      epochKeys.map((k) => ACCESS_SCRIPT.call(client, [`${k}:acl-probe`], [channel])),
    );
    return [...new Set(replies.flat())];
  } catch (err) {
    // the scripts themselves refused: "NOPERM User u has no permissions to run the 'evalsha' command"
    const refused = /NOPERM.*'([^']+)' command/.exec((err as Error).message);
    if (refused) return [refused[1]!.toLowerCase()];
    throw err;
  }
}

export function deniedMessage(denied: readonly string[]): string {
  return (
    `the Redis user may not run what slotgate needs: ${denied.join(', ')} — ` +
    'see docs/redis.md, "TLS and a least-privilege user"'
  );
}
