/**
 * The leftover-key check: lists slotgate keys in Redis that no live owner will clean up — expired leases
 * and waiter registrations still stored, slots/waiters keys without an expiry, cooldown keys without a TTL, keys of
 * the wrong type and unknown key shapes under the prefix. Read-only unless asked to fix; a fix removes exactly what
 * was reported (expired members, not the live ones next to them), and only while it is still in the state reported:
 * each removal is one small script that re-checks first, so a lease renewed meanwhile is never taken away.
 *
 * Keys of another schema version (`<prefix>:v2:...`) and keys that look like another deployment's (prefix
 * `<prefix>:<more>`, e.g. `slotgate:staging:v1:...`) are listed as notes and never touched.
 */
import type { Cluster, Redis } from 'ioredis';
import { chunk } from '../../core/collections.js';
import { KeyBuilder, SCHEMA_VERSION } from './keys.js';
import { redisMs } from './redis-time.js';
import { isCluster } from './topology.js';
import { SCRIPTS } from './scripts.js';

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
  /** Nodes scanned: every master of a Cluster, else 1. */
  nodes: number;
  scanned: number;
  findings: Finding[];
  /** Keys under the prefix of another schema version: reported, never counted or touched. */
  otherVersions: string[];
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
  waiters: 'zset',
  queue: 'zset',
  cooldown: 'string',
  settings: 'hash',
  instances: 'hash',
  epoch: 'string',
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
    if (shape.kind === 'settings' || shape.kind === 'instances' || shape.kind === 'epoch') continue;
    const pttl = await client.pttl(key);
    // A queue's scores are arrival times, not expiries: its members expire with their waiters' registrations (the
    // waiters key, checked on its own), and the key itself with its expiry.
    if (shape.kind === 'queue') {
      if (pttl === -1) findings.push({ key, kind: 'no_expiry', detail: 'a queue key without an expiry' });
      continue;
    }
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
  return {
    prefix,
    nodes: nodes.length,
    scanned: all.length,
    findings,
    otherVersions,
    otherPrefixes,
    ...(all.length === 0 && { prefixesSeen: await prefixesSeen(nodes) }),
    fixed,
  };
}

/**
 * Undoes the findings that still stand, each in one script call that checks first (lua/fixLeftover-2.lua); returns
 * the number of removals and expiries set.
 */
export async function fixFindings(client: Redis | Cluster, findings: readonly Finding[]): Promise<number> {
  let fixed = 0;
  for (const f of findings) fixed += await fixOne(client, f);
  return fixed;
}

/** Expired members removed per script call, so one huge set never blocks Redis for long. */
const FIX_BATCH = 500;

async function fixOne(client: Redis | Cluster, f: Finding): Promise<number> {
  // a waiters key's queue goes with it: an expired registration leaves both (same hash tag)
  const companion = f.key.endsWith('}:waiters') ? `${f.key.slice(0, -':waiters'.length)}:queue` : f.key;
  const fix = (args: string[]) => SCRIPTS.fixLeftover.call(client, [f.key, companion], [f.kind, ...args]);
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
