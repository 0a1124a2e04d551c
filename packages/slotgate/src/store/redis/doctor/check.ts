/**
 * The leftover-key check: lists slotgate keys in Redis that no live owner will clean up — expired leases
 * and waiter registrations still stored, slots and queue keys without an expiry, cooldown keys without a TTL, keys of
 * the wrong type and unknown key shapes under the prefix. Read-only unless asked to fix; a fix removes exactly what
 * was reported (expired members, not the live ones next to them), and only while it is still in the state reported:
 * each removal is one small script that re-checks first, so a lease renewed meanwhile is never taken away.
 *
 * Slots held by a dead owner: a live lease (its expiry still ahead) whose token names an instance (`<instanceId>:<seq>`)
 * that the instance list (`<prefix>:v1:instances`) holds with a heartbeat older than OWNER_DEAD_AFTER_MS on the Redis
 * clock. An instance absent from the list is never called dead (a library user announces no heartbeat; a gateway's
 * first one may not have landed yet). A fix releases such a slot only while its lease still has the expiry reported
 * (a renewal means the owner lives), and passes it to the channel's oldest waiter as a release does.
 *
 * Keys of another schema version (`<prefix>:v2:...`), keys that look like another deployment's (prefix
 * `<prefix>:<more>`, e.g. `slotgate:staging:v1:...`) and an older release's queue keys (`:queue`, `:waiters`) are listed
 * as notes and never touched.
 *
 * A queue's scores are arrivals: a registration there has run out once it is older than the lifetime its member
 * names (`<max>|<lifetime ms>|<token>`, lua/includes/queue.lua).
 */
import { describeResource } from '../../../core/client.js';
import type { Cluster, Redis } from 'ioredis';
import { chunk } from '../../../core/collections.js';
import { instanceOfToken } from '../../../core/ids.js';
import { KeyBuilder, SCHEMA_VERSION } from '../keys.js';
import { redisMs } from '../loads/redis-offset.js';
import { isCluster } from '../connection/connection.js';
import { SCRIPTS } from '../scripts.js';
import { memberLifetime } from '../queues/members.js';

/** The claim deadline and lease TTL of the grants a fix makes (the defaults: the doctor knows no settings). */
const CLAIM_MS = 5000;
const LEASE_TTL_MS = 60_000;

export type FindingKind =
  'expired_members' | 'no_expiry' | 'cooldown_without_ttl' | 'wrong_type' | 'unknown_key' | 'dead_owner';

/**
 * An instance whose heartbeat (every 5 s in the gateway) is older than this is dead: three missed heartbeats, the
 * age at which the gateway's instance list drops it too. The heartbeat's time is the instance's clock, compared with
 * the Redis clock: clocks apart by more than a few seconds make this check unreliable.
 */
export const OWNER_DEAD_AFTER_MS = 15_000;

export interface Finding {
  key: string;
  kind: FindingKind;
  detail: string;
  /** Expired members (for expired_members). */
  members?: string[];
  /** The Redis type found (for wrong_type and unknown_key): a fix deletes the key only while it still has it. */
  type?: string;
  /** dead_owner: the instance holding the slots, its last heartbeat's age, and when its last lease expires by itself. */
  owner?: string;
  silentMs?: number;
  freesInMs?: number;
  /** dead_owner: the channel, and each member's expiry score as reported (a fix releases only while unchanged). */
  channelId?: string;
  scores?: number[];
}

export interface DoctorReport {
  prefix: string;
  /** Nodes scanned: every master of a Cluster, else 1. */
  nodes: number;
  scanned: number;
  findings: Finding[];
  /** Keys under the prefix of another schema version: reported, never counted or touched. */
  otherVersions: string[];
  /**
   * An older release's queue keys (`{<channel>}:queue` and `:waiters`, before the queue moved to `:fifo`): gateways of
   * that release sharing this Redis still use them, and they expire by themselves. Reported, never touched.
   */
  olderQueues: string[];
  /** Keys of another prefix that starts with this one (`<prefix>:<more>:v1:...`): reported, never touched. */
  otherPrefixes: string[];
  /**
   * Only when no key was under the prefix: the prefixes of slotgate-shaped keys (`<prefix>:v<N>:...`) a bounded scan
   * saw (at most PREFIX_HINTS of them, from at most HINT_SCAN_CALLS SCAN calls per node), to say where keys may be.
   */
  prefixesSeen?: string[];
  fixed: number;
}

const EXPECTED_TYPE = {
  slots: 'zset',
  queue: 'zset',
  legacy_queue: 'zset',
  cooldown: 'string',
  settings: 'hash',
  instances: 'hash',
  epoch: 'string',
  load_summary: 'hash',
  load_counts: 'hash',
  load_reporters: 'zset',
  load_reporter: 'hash',
  load_cooling: 'hash',
  load_snapshot: 'string',
} as const;

/** SCAN MATCH treats `* ? [ ] \\` as glob syntax; a prefix is matched literally. */
export function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/** `<more>:v<N>:...` after the prefix: the shape of another slotgate prefix's keys. */
const OTHER_PREFIX = /^[^{}\s]+?:v\d+:/;

/** The nodes holding keys: every master of a Cluster (a client that is ready: its node list is filled then). */
function nodesOf(client: Redis | Cluster): (Redis | Cluster)[] {
  if (!isCluster(client)) return [client];
  const masters = client.nodes('master');
  // a Cluster client lists no node before it is ready: "clean" from scanning nothing would be a lie
  if (masters.length === 0)
    throw new Error('the Redis Cluster client knows no master node (is it connected?)');
  return masters;
}

/** Every key matching `pattern` on `nodes`; `maxCalls` bounds the SCAN calls per node. */
async function scanAll(nodes: (Redis | Cluster)[], pattern: string, maxCalls = Infinity): Promise<string[]> {
  const keys = new Set<string>();
  for (const node of nodes) {
    let cursor = '0';
    let calls = 0;
    do {
      const [next, batch] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      for (const key of batch) keys.add(key);
      cursor = next;
    } while (cursor !== '0' && ++calls < maxCalls);
  }
  return [...keys].sort();
}

/** Prefixes named in a hint, and SCAN calls (of COUNT 1000) per node spent looking for them. */
const PREFIX_HINTS = 10;
const HINT_SCAN_CALLS = 20;

/** The prefixes of slotgate-shaped keys a bounded scan sees (a prefix has no braces or spaces). */
async function prefixesSeen(nodes: (Redis | Cluster)[]): Promise<string[]> {
  const found = new Set<string>();
  for (const key of await scanAll(nodes, '*:v[0-9]*:*', HINT_SCAN_CALLS)) {
    const m = /^([^{}\s]+?):v\d+:/.exec(key);
    if (m) found.add(m[1]!);
    if (found.size >= PREFIX_HINTS) break;
  }
  return [...found].sort();
}

async function redisNow(client: Redis | Cluster): Promise<number> {
  return redisMs(await client.time());
}

/** The age of each instance's last heartbeat (ms, against `now`), from the instance list. */
async function heartbeatAges(
  client: Redis | Cluster,
  keys: KeyBuilder,
  now: number,
): Promise<Map<string, number>> {
  const ages = new Map<string, number>();
  for (const [id, value] of Object.entries(await client.hgetall(keys.instances()))) {
    try {
      const seen = Date.parse((JSON.parse(value) as { seen_at?: string }).seen_at ?? '');
      if (Number.isFinite(seen)) ages.set(id, now - seen);
    } catch {
      // an entry that is not a heartbeat says nothing about its instance
    }
  }
  return ages;
}

/** The live leases of one slots key held by dead owners: one finding per owner. */
async function deadOwners(
  client: Redis | Cluster,
  key: string,
  channelId: string,
  now: number,
  ages: ReadonlyMap<string, number>,
): Promise<Finding[]> {
  const live = await client.zrangebyscore(key, `(${now}`, '+inf', 'WITHSCORES');
  const byOwner = new Map<string, { members: string[]; scores: number[] }>();
  for (let i = 0; i < live.length; i += 2) {
    const owner = instanceOfToken(live[i]!);
    if (!((ages.get(owner) ?? -Infinity) > OWNER_DEAD_AFTER_MS)) continue;
    const held = byOwner.get(owner) ?? { members: [], scores: [] };
    held.members.push(live[i]!);
    held.scores.push(Number(live[i + 1]));
    byOwner.set(owner, held);
  }
  return [...byOwner].map(([owner, { members, scores }]) => {
    const silentMs = ages.get(owner)!;
    const freesInMs = Math.max(...scores) - now;
    const n = members.length;
    return {
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
    };
  });
}

async function pushUnknown(client: Redis | Cluster, findings: Finding[], key: string): Promise<void> {
  const type = await client.type(key);
  if (type !== 'none')
    findings.push({ key, kind: 'unknown_key', detail: `not a key slotgate makes (a ${type})`, type });
}

export async function checkLeftovers(
  client: Redis | Cluster,
  prefix = 'slotgate',
  fix = false,
): Promise<DoctorReport> {
  const keys = new KeyBuilder(prefix);
  // first: a command waits for a Cluster client to be ready, and its list of masters with it
  const now = await redisNow(client);
  const nodes = nodesOf(client);
  const all = await scanAll(nodes, `${globEscape(prefix)}:*`);
  const ages = all.includes(keys.instances())
    ? await heartbeatAges(client, keys, now)
    : new Map<string, number>();
  // with no silent instance there is no dead owner to look for: no read of the live leases
  const anyDead = [...ages.values()].some((age) => age > OWNER_DEAD_AFTER_MS);
  const findings: Finding[] = [];
  const otherVersions: string[] = [];
  const olderQueues: string[] = [];
  const otherPrefixes: string[] = [];
  let fixed = 0;

  for (const key of all) {
    if (!key.startsWith(`${keys.base}:`)) {
      const rest = key.slice(prefix.length + 1);
      if (/^v\d+:/.test(rest) && !rest.startsWith(`${SCHEMA_VERSION}:`)) otherVersions.push(key);
      else if (OTHER_PREFIX.test(rest)) otherPrefixes.push(key);
      else await pushUnknown(client, findings, key);
      continue;
    }
    const shape = keys.parse(key);
    if (!shape) {
      await pushUnknown(client, findings, key);
      continue;
    }
    if (shape.kind === 'legacy_queue') {
      olderQueues.push(key);
      continue;
    }
    const type = await client.type(key);
    if (type === 'none') continue; // expired or removed while scanning
    if (type !== EXPECTED_TYPE[shape.kind]) {
      findings.push({
        key,
        kind: 'wrong_type',
        detail: `expected a ${EXPECTED_TYPE[shape.kind]}, found a ${type}`,
        type,
      });
      continue;
    }
    if (
      shape.kind === 'settings' ||
      shape.kind === 'instances' ||
      shape.kind === 'epoch' ||
      shape.kind === 'load_summary' ||
      shape.kind === 'load_counts' ||
      shape.kind === 'load_reporters' ||
      shape.kind === 'load_reporter' ||
      shape.kind === 'load_cooling' ||
      shape.kind === 'load_snapshot'
    )
      continue;
    const pttl = await client.pttl(key);
    if (shape.kind === 'queue') {
      // scores are arrivals (µs): a registration runs out the lifetime its member names after its arrival
      const expired = ranOut(await client.zrange(key, 0, -1, 'WITHSCORES'), now);
      if (expired.length > 0)
        findings.push({
          key,
          kind: 'expired_members',
          detail: `${expired.length} expired waiter registration${expired.length > 1 ? 's' : ''} still stored (owners gone)`,
          members: expired,
        });
      if (pttl === -1) findings.push({ key, kind: 'no_expiry', detail: 'a queue key without an expiry' });
      continue;
    }
    if (shape.kind === 'cooldown') {
      if (pttl === -1)
        findings.push({ key, kind: 'cooldown_without_ttl', detail: 'a cooldown that never ends' });
      continue;
    }
    if (shape.kind === 'slots' && anyDead)
      findings.push(...(await deadOwners(client, key, shape.channelId, now, ages)));
    const expired = await client.zrangebyscore(key, '-inf', now);
    if (expired.length > 0) {
      findings.push({
        key,
        kind: 'expired_members',
        detail: `${expired.length} expired lease${expired.length > 1 ? 's' : ''} still stored (owners gone)`,
        members: expired,
      });
    }
    if (pttl === -1) findings.push({ key, kind: 'no_expiry', detail: 'a slots key without an expiry' });
  }

  if (fix) fixed = await fixFindings(client, findings, prefix);
  return {
    prefix,
    nodes: nodes.length,
    scanned: all.length,
    findings,
    otherVersions,
    olderQueues,
    otherPrefixes,
    ...(all.length === 0 && { prefixesSeen: await prefixesSeen(nodes) }),
    fixed,
  };
}

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

/**
 * The members of a queue (`ZRANGE … WITHSCORES`: member, arrival µs, …) whose registration has run out at `now` (ms):
 * arrived longer ago than the lifetime the member names ("<max>|<lifetime ms>|<token>"). A member of another shape
 * has no lifetime: run out.
 */
function ranOut(withScores: readonly string[], now: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < withScores.length; i += 2) {
    const member = withScores[i]!;
    const live = memberLifetime(member);
    if (!(Number(withScores[i + 1]) > (now - (Number.isFinite(live) ? live : 0)) * 1000)) out.push(member);
  }
  return out;
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

export function formatReport(report: DoctorReport, fix: boolean): string {
  const nodes = `${report.nodes} node${report.nodes === 1 ? '' : 's'}`;
  const lines = [`slotgate doctor: prefix "${report.prefix}", ${report.scanned} key(s) scanned on ${nodes}`];
  if (report.findings.length === 0) lines.push('clean: no leftover keys');
  if (report.prefixesSeen?.length) {
    const names = report.prefixesSeen.map((p) => `"${p}"`).join(', ');
    lines.push(`  hint: no key under this prefix; keys were seen under ${names} (check with --prefix)`);
  } else if (report.prefixesSeen) {
    lines.push(
      '  hint: no key under this prefix, nor a key of another slotgate prefix among those seen (is this the right Redis?)',
    );
  }
  for (const f of report.findings)
    lines.push(
      `  ${f.kind === 'dead_owner' ? 'DEAD OWNER' : 'LEFTOVER'} ${f.kind.padEnd(20)} ${f.key}  — ${f.detail}`,
    );
  for (const key of report.otherVersions)
    lines.push(`  note: ${key} belongs to another schema version; left alone`);
  for (const key of report.olderQueues)
    lines.push(`  note: ${key} is an older release's wait queue (it expires by itself); left alone`);
  for (const key of report.otherPrefixes)
    lines.push(
      `  note: ${key} looks like a key of another prefix; left alone (check it with its own --prefix)`,
    );
  if (report.findings.length) {
    lines.push(
      fix
        ? `fixed: ${report.fixed} removal(s) for ${report.findings.length} finding(s)`
        : `${report.findings.length} finding(s); run again with --fix to remove exactly these` +
            (report.findings.some((f) => f.kind === 'dead_owner')
              ? " (and release the dead owners' slots)"
              : ''),
    );
  }
  return lines.join('\n');
}
