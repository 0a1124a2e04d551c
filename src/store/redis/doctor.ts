/**
 * The leftover-key check (spec §7.5): lists slotgate keys in Redis that no live owner will clean up — expired leases
 * and waiter registrations still stored, slots/waiters keys without an expiry, cooldown keys without a TTL, keys of
 * the wrong type and unknown key shapes under the prefix. Read-only unless asked to fix; a fix removes exactly what
 * was reported (expired members, not the live ones next to them).
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
}

export interface DoctorReport {
  prefix: string;
  scanned: number;
  findings: Finding[];
  /** Keys under the prefix of another schema version: reported, never counted or touched. */
  otherVersions: string[];
  fixed: number;
}

const EXPECTED_TYPE = {
  slots: 'zset',
  waiters: 'zset',
  cooldown: 'string',
  settings: 'hash',
  instances: 'hash',
} as const;

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

export async function checkLeftovers(
  client: Redis | Cluster,
  prefix = 'slotgate',
  fix = false,
): Promise<DoctorReport> {
  const keys = new KeyBuilder(prefix);
  const all = await scanAll(client, `${prefix}:*`);
  const now = await redisNow(client);
  const findings: Finding[] = [];
  const otherVersions: string[] = [];
  let fixed = 0;

  for (const key of all) {
    if (!key.startsWith(`${keys.base}:`)) {
      if (/^v\d+:/.test(key.slice(prefix.length + 1)) && !key.startsWith(`${prefix}:${SCHEMA_VERSION}:`))
        otherVersions.push(key);
      else findings.push({ key, kind: 'unknown_key', detail: 'not a key slotgate makes' });
      continue;
    }
    const shape = keys.parse(key);
    if (!shape) {
      findings.push({ key, kind: 'unknown_key', detail: 'not a key slotgate makes' });
      continue;
    }
    const type = await client.type(key);
    if (type === 'none') continue; // expired or removed while scanning
    if (type !== EXPECTED_TYPE[shape.kind]) {
      findings.push({
        key,
        kind: 'wrong_type',
        detail: `expected a ${EXPECTED_TYPE[shape.kind]}, found a ${type}`,
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

  if (fix) {
    for (const f of findings) {
      if (f.kind === 'expired_members' && f.members) fixed += await client.zrem(f.key, ...f.members);
      else if (f.kind === 'no_expiry') {
        // Give it the expiry its newest member needs; it then vanishes with its last member.
        const newest = await client.zrange(f.key, -1, -1, 'WITHSCORES');
        const until = Number(newest[1] ?? 0);
        fixed += until > now ? await client.pexpireat(f.key, until) : await client.del(f.key);
      } else fixed += await client.del(f.key);
    }
  }
  return { prefix, scanned: all.length, findings, otherVersions, fixed };
}

export function formatReport(report: DoctorReport, fix: boolean): string {
  const lines = [`slotgate doctor: prefix "${report.prefix}", ${report.scanned} key(s) scanned`];
  if (report.findings.length === 0) lines.push('clean: no leftover keys');
  for (const f of report.findings) lines.push(`  LEFTOVER ${f.kind.padEnd(20)} ${f.key}  — ${f.detail}`);
  for (const key of report.otherVersions)
    lines.push(`  note: ${key} belongs to another schema version; left alone`);
  if (report.findings.length) {
    lines.push(
      fix
        ? `fixed: ${report.fixed} removal(s) for ${report.findings.length} finding(s)`
        : `${report.findings.length} finding(s); run again with --fix to remove exactly these`,
    );
  }
  return lines.join('\n');
}
