/**
 * `slotgate doctor --fix`: removes exactly what was reported, each removal one script that checks first that it
 * still stands, so a lease renewed meanwhile is never taken away.
 */
import type { Cluster, Redis } from 'ioredis';
import { chunk } from '../../../core/collections.js';
import { KeyBuilder } from '../keys.js';
import { SCRIPTS } from '../scripts.js';
import { heartbeatAges, redisNow } from './heartbeats.js';
import { OWNER_DEAD_AFTER_MS, type Finding } from './report.js';

/** The grants a fix makes take the default claim deadline and lease TTL: the doctor knows no settings. */
const CLAIM_MS = 5000;
const LEASE_TTL_MS = 60_000;

/** Returns the number of removals and expiries set. */
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

/** An owner heard from since the report keeps its slots; each goes only while its lease has the expiry reported. */
async function releaseDead(client: Redis | Cluster, keys: KeyBuilder, f: Finding): Promise<number> {
  const ages = await heartbeatAges(client, keys, await redisNow(client));
  if (!((ages.get(f.owner!) ?? -Infinity) > OWNER_DEAD_AFTER_MS)) return 0;
  const id = f.channelId!;
  const pairs = f.members!.flatMap((m, i) => [m, f.scores![i]!]);
  return SCRIPTS.releaseDeadOwner.call(
    client,
    [keys.slots(id), keys.queue(id), keys.peak(id), keys.limit(id)],
    // no floor: the doctor knows no channel's adaptive limit, so it grants under each waiter's own max
    [CLAIM_MS, LEASE_TTL_MS, keys.grants(), id, '', ...pairs],
  );
}

/** Per script call, so one huge set never blocks Redis for long. */
const FIX_BATCH = 500;

async function fixOne(client: Redis | Cluster, f: Finding): Promise<number> {
  const fix = (args: (string | number)[]) => SCRIPTS.fixLeftover.call(client, [f.key], [f.kind, ...args]);
  if (f.kind !== 'expired_members') return fix([f.type ?? '']);
  let n = 0;
  for (const batch of chunk(f.members ?? [], FIX_BATCH)) n += await fix(batch);
  return n;
}
