/**
 * `slotgate doctor --fix`: removes exactly what was reported, and only while it is still in the state reported —
 * each removal is one small script that checks first, so a lease renewed meanwhile is never taken away. A dead
 * owner's slot is released only while its lease still has the expiry reported, and passes to the channel's oldest
 * waiter as a release does.
 */
import type { Cluster, Redis } from 'ioredis';
import { chunk } from '../../../core/collections.js';
import { KeyBuilder } from '../keys.js';
import { SCRIPTS } from '../scripts.js';
import { heartbeatAges, redisNow } from './heartbeats.js';
import { OWNER_DEAD_AFTER_MS, type Finding } from './report.js';

/** The claim deadline and lease TTL of the grants a fix makes (the defaults: the doctor knows no settings). */
const CLAIM_MS = 5000;
const LEASE_TTL_MS = 60_000;

/**
 * Undoes the findings that still stand, each in one script call that checks first (lua/fixLeftover-1.lua); returns
 * the number of removals and expiries set.
 */
export async function fixFindings(
  client: Redis | Cluster,
  findings: readonly Finding[],
  prefix = 'slotgate',
): Promise<number> {
  const keys = new KeyBuilder(prefix);
  let fixed = 0;
  for (const f of findings)
    fixed += f.kind === 'dead_owner' ? await releaseDead(client, keys, f) : await fixOne(client, f);
  return fixed;
}

/**
 * Releases a dead owner's slots (lua/releaseDeadOwner-2.lua) after reading its heartbeat once more: an owner heard from
 * since the report keeps them. Each slot goes only while its lease still has the expiry reported.
 */
async function releaseDead(client: Redis | Cluster, keys: KeyBuilder, f: Finding): Promise<number> {
  const ages = await heartbeatAges(client, keys, await redisNow(client));
  if (!((ages.get(f.owner!) ?? -Infinity) > OWNER_DEAD_AFTER_MS)) return 0;
  const id = f.channelId!;
  const pairs = f.members!.flatMap((m, i) => [m, f.scores![i]!]);
  return SCRIPTS.releaseDeadOwner.call(
    client,
    [keys.slots(id), keys.queue(id)],
    [CLAIM_MS, LEASE_TTL_MS, keys.grants(), id, ...pairs],
  );
}

/** Expired members removed per script call, so one huge set never blocks Redis for long. */
const FIX_BATCH = 500;

async function fixOne(client: Redis | Cluster, f: Finding): Promise<number> {
  const fix = (args: (string | number)[]) => SCRIPTS.fixLeftover.call(client, [f.key], [f.kind, ...args]);
  if (f.kind !== 'expired_members') return fix([f.type ?? '']);
  let n = 0;
  for (const batch of chunk(f.members ?? [], FIX_BATCH)) n += await fix(batch);
  return n;
}
