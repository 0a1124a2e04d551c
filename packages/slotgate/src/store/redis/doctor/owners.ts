/**
 * The live leases of owners not heard from: dead ones (heartbeat older than OWNER_DEAD_AFTER_MS), reported as findings
 * that `--fix` releases, and late ones (older than OWNER_LATE_AFTER_MS), only reported. Ages are on the Redis clock.
 * An instance absent from the list is neither: a library user announces no heartbeat.
 */
import type { Cluster, Redis } from 'ioredis';
import { describeResource } from '../../../core/client.js';
import { instanceOfToken } from '../../../core/ids.js';
import { OWNER_DEAD_AFTER_MS, OWNER_LATE_AFTER_MS, type Finding, type LateOwner } from './report.js';

/** Whether any listed instance's heartbeat is late or worse: otherwise no slots key needs reading. */
export const anySilent = (ages: ReadonlyMap<string, number>): boolean =>
  [...ages.values()].some((age) => age > OWNER_LATE_AFTER_MS);

/** One slots key's live leases of silent owners: a dead_owner finding per dead owner; late owners go into `late`. */
export async function silentOwners(
  client: Redis | Cluster,
  key: string,
  channelId: string,
  now: number,
  ages: ReadonlyMap<string, number>,
  late: Map<string, LateOwner>,
): Promise<Finding[]> {
  const live = await client.zrangebyscore(key, `(${now}`, '+inf', 'WITHSCORES');
  const byOwner = new Map<string, { members: string[]; scores: number[] }>();
  for (let i = 0; i < live.length; i += 2) {
    const owner = instanceOfToken(live[i]!);
    if (!((ages.get(owner) ?? -Infinity) > OWNER_LATE_AFTER_MS)) continue;
    const held = byOwner.get(owner) ?? { members: [], scores: [] };
    held.members.push(live[i]!);
    held.scores.push(Number(live[i + 1]));
    byOwner.set(owner, held);
  }
  const dead: Finding[] = [];
  for (const [owner, { members, scores }] of byOwner) {
    const silentMs = ages.get(owner)!;
    const freesInMs = Math.max(...scores) - now;
    const n = members.length;
    if (silentMs <= OWNER_DEAD_AFTER_MS) {
      const entry = late.get(owner) ?? {
        owner,
        silentMs,
        deadInMs: OWNER_DEAD_AFTER_MS - silentMs,
        slots: 0,
        held: [],
      };
      entry.slots += n;
      entry.held.push({ key, channelId, slots: n, freesInMs });
      late.set(owner, entry);
      continue;
    }
    dead.push({
      key,
      kind: 'dead_owner',
      detail:
        `${n} slot${n > 1 ? 's' : ''} of ${describeResource(channelId)} held by instance ${owner}, whose heartbeat stopped ` +
        `${Math.round(silentMs / 1000)} s ago (dead owner): frees in ${Math.ceil(freesInMs / 1000)} s by itself`,
      members,
      owner,
      silentMs,
      freesInMs,
      channelId,
      scores,
    });
  }
  return dead;
}
