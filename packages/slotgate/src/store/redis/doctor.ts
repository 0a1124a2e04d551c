/**
 * The leftover-key check (spec §7.5): lists slotgate keys in Redis that no live owner will clean up — expired leases
 * and waiter registrations still stored, slots/waiters keys without an expiry, cooldown keys without a TTL, keys of
 * the wrong type and unknown key shapes under the prefix. Read-only unless asked to fix; a fix removes exactly what
 * was reported (expired members, not the live ones next to them), and only while it is still in the state reported:
 * each removal is one small script that re-checks first, so a lease renewed meanwhile is never taken away.
 *
 * Keys of another schema version (`<prefix>:v2:...`) and keys that look like another deployment's (prefix
 * `<prefix>:<more>`, e.g. `slotgate:staging:v1:...`) are listed as notes and never touched.
 */
import type { Cluster, Redis } from 'ioredis';
import { KeyBuilder, SCHEMA_VERSION } from './keys.js';

export type FindingKind =
  'expired_members' | 'no_expiry' | 'cooldown_without_ttl' | 'wrong_type' | 'unknown_key';

export interface Finding {
  key: string;
  kind: FindingKind;
  detail: string;
  /** Expired members (for expired_members). */
  members?: string[];
  /** The Redis type found (for wrong_type and unknown_key): a fix deletes the key only while it still has it. */
  type?: string;
}

export interface DoctorReport {
  prefix: string;
  scanned: number;
  findings: Finding[];
  /** Keys under the prefix of another schema version: reported, never counted or touched. */
  otherVersions: string[];
  /** Keys of another prefix that starts with this one (`<prefix>:<more>:v1:...`): reported, never touched. */
  otherPrefixes: string[];
  fixed: number;
}

const EXPECTED_TYPE = {
  slots: 'zset',
  waiters: 'zset',
  cooldown: 'string',
  settings: 'hash',
  instances: 'hash',
} as const;

/** SCAN MATCH treats `* ? [ ] \\` as glob syntax; a prefix is matched literally. */
export function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/** `<more>:v<N>:...` after the prefix: the shape of another slotgate prefix's keys. */
const OTHER_PREFIX = /^[^{}\s]+?:v\d+:/;

async function scanAll(client: Redis | Cluster, pattern: string): Promise<string[]> {
  const nodes = (client as { isCluster?: boolean }).isCluster
    ? (client as Cluster).nodes('master')
    : [client as Redis];
  const keys = new Set<string>();
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, batch] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      for (const key of batch) keys.add(key);
      cursor = next;
    } while (cursor !== '0');
  }
  return [...keys].sort();
}

async function redisNow(client: Redis | Cluster): Promise<number> {
  const [s, us] = await client.time();
  return Number(s) * 1000 + Math.floor(Number(us) / 1000);
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
  const all = await scanAll(client, `${globEscape(prefix)}:*`);
  const now = await redisNow(client);
  const findings: Finding[] = [];
  const otherVersions: string[] = [];
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
    if (shape.kind === 'settings' || shape.kind === 'instances') continue;
    const pttl = await client.pttl(key);
    if (shape.kind === 'cooldown') {
      if (pttl === -1)
        findings.push({ key, kind: 'cooldown_without_ttl', detail: 'a cooldown that never ends' });
      continue;
    }
    const expired = await client.zrangebyscore(key, '-inf', now);
    if (expired.length > 0) {
      const what = shape.kind === 'slots' ? 'lease' : 'waiter registration';
      findings.push({
        key,
        kind: 'expired_members',
        detail: `${expired.length} expired ${what}${expired.length > 1 ? 's' : ''} still stored (owners gone)`,
        members: expired,
      });
    }
    if (pttl === -1)
      findings.push({ key, kind: 'no_expiry', detail: 'a slots/waiters key without an expiry' });
  }

  if (fix) fixed = await fixFindings(client, findings);
  return { prefix, scanned: all.length, findings, otherVersions, otherPrefixes, fixed };
}

/**
 * Undoes one finding if it still stands, in one script (one key, so it is Cluster-legal): expired members are removed
 * only while their score is still in the past on the Redis clock (a late renewal may have revived one); a key without
 * expiry gets the expiry of its newest member (or goes, when none is live); the other kinds are deleted while still of
 * the type (and TTL) reported. Returns the number of removals, expiries set counting as one.
 */
const FIX_SCRIPT = `
local kind = ARGV[1]
local ktype = redis.call('TYPE', KEYS[1]).ok
if kind == 'expired_members' then
  if ktype ~= 'zset' then return 0 end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local n = 0
  for i = 2, #ARGV do
    local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
    if score and tonumber(score) <= now then n = n + redis.call('ZREM', KEYS[1], ARGV[i]) end
  end
  return n
end
if kind == 'no_expiry' then
  if ktype ~= 'zset' or redis.call('PTTL', KEYS[1]) ~= -1 then return 0 end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if newest[2] and tonumber(newest[2]) > now then
    return redis.call('PEXPIREAT', KEYS[1], newest[2])
  end
  return redis.call('DEL', KEYS[1])
end
if kind == 'cooldown_without_ttl' then
  if ktype == 'string' and redis.call('PTTL', KEYS[1]) == -1 then
    return redis.call('DEL', KEYS[1])
  end
  return 0
end
if ktype == ARGV[2] then return redis.call('DEL', KEYS[1]) end
return 0
`;

/** Undoes the findings that still stand (see FIX_SCRIPT); returns the number of removals and expiries set. */
export async function fixFindings(client: Redis | Cluster, findings: readonly Finding[]): Promise<number> {
  let fixed = 0;
  for (const f of findings) fixed += await fixOne(client, f);
  return fixed;
}

/** Expired members removed per script call, so one huge set never blocks Redis for long. */
const FIX_BATCH = 500;

async function fixOne(client: Redis | Cluster, f: Finding): Promise<number> {
  if (f.kind !== 'expired_members')
    return Number(await client.eval(FIX_SCRIPT, 1, f.key, f.kind, f.type ?? ''));
  let n = 0;
  const members = f.members ?? [];
  for (let i = 0; i < members.length; i += FIX_BATCH)
    n += Number(await client.eval(FIX_SCRIPT, 1, f.key, f.kind, ...members.slice(i, i + FIX_BATCH)));
  return n;
}

export function formatReport(report: DoctorReport, fix: boolean): string {
  const lines = [`slotgate doctor: prefix "${report.prefix}", ${report.scanned} key(s) scanned`];
  if (report.findings.length === 0) lines.push('clean: no leftover keys');
  for (const f of report.findings) lines.push(`  LEFTOVER ${f.kind.padEnd(20)} ${f.key}  — ${f.detail}`);
  for (const key of report.otherVersions)
    lines.push(`  note: ${key} belongs to another schema version; left alone`);
  for (const key of report.otherPrefixes)
    lines.push(
      `  note: ${key} looks like a key of another prefix; left alone (check it with its own --prefix)`,
    );
  if (report.findings.length) {
    lines.push(
      fix
        ? `fixed: ${report.fixed} removal(s) for ${report.findings.length} finding(s)`
        : `${report.findings.length} finding(s); run again with --fix to remove exactly these`,
    );
  }
  return lines.join('\n');
}
