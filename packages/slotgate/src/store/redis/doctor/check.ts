/**
 * The leftover-key check: slotgate keys no live owner will clean up (expired members still stored, keys without an
 * expiry, wrong types, unknown shapes) and live leases of dead owners. Read-only unless asked to fix (fix.ts). Keys
 * of another schema version or prefix, an older release's queue keys, and live leases of owners whose heartbeat is
 * late but not yet dead (owners.ts), are only noted. Given adaptive channels, it reads their stored limits (limits.ts).
 */
import type { Cluster, Redis } from 'ioredis';
import { KeyBuilder, SCHEMA_VERSION } from '../keys.js';
import { isCluster } from '../connection/connection.js';
import { memberLifetime } from '../queues/members.js';
import { SCRIPTS } from '../scripts.js';
import { deniedCommands } from '../fencing/access.js';
import { epochKeys } from '../fencing/cluster-epochs.js';
import { fixFindings } from './fix.js';
import { heartbeatAges, redisNow } from './heartbeats.js';
import { readAdaptiveLimits, type AdaptiveChannel } from './limits.js';
import { anySilent, silentOwners } from './owners.js';
import type { DoctorReport, Finding, LateOwner, Peak } from './report.js';

const EXPECTED_TYPE = {
  slots: 'zset',
  queue: 'zset',
  legacy_queue: 'zset',
  cooldown: 'string',
  peak: 'hash',
  limit: 'hash',
  settings: 'hash',
  instances: 'hash',
  epoch: 'string',
  load_counts: 'hash',
  load_cooling: 'hash',
  load_snapshot: 'string',
} as const;

/** A prefix matched literally by SCAN MATCH. */
function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/** `<more>:v<N>:...` after the prefix: the shape of another slotgate prefix's keys. */
const OTHER_PREFIX = /^[^{}\s]+?:v\d+:/;

/** Every master of a Cluster: a client not ready yet lists none, and "clean" from scanning nothing would be a lie. */
function nodesOf(client: Redis | Cluster): (Redis | Cluster)[] {
  if (!isCluster(client)) return [client];
  const masters = client.nodes('master');
  if (masters.length === 0)
    throw new Error('the Redis Cluster client knows no master node (is it connected?)');
  return masters;
}

/** What the user may not run of what a gateway needs (fencing/access.ts), and SCAN, which the doctor needs. */
async function deniedToDoctor(client: Redis | Cluster, keys: KeyBuilder): Promise<string[]> {
  const denied = await deniedCommands(
    client,
    isCluster(client) ? await epochKeys(client, keys.epoch()) : [keys.epoch()],
    keys.grants(),
  );
  const scan = await Promise.all(
    nodesOf(client).map((node) =>
      node.scan('0', 'COUNT', 1).then(
        () => true,
        (err: Error) => !/NOPERM/.test(err.message),
      ),
    ),
  );
  return scan.every(Boolean) ? denied : [...denied, 'scan'];
}

function emptyReport(prefix: string, nodes: number): DoctorReport {
  return {
    prefix,
    nodes,
    scanned: 0,
    findings: [],
    lateOwners: [],
    otherVersions: [],
    olderQueues: [],
    otherPrefixes: [],
    peaks: [],
    fixed: 0,
  };
}

/** `maxCalls` bounds the SCAN calls per node. */
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

/** Prefixes named in a hint, and SCAN calls per node spent looking for them. */
const PREFIX_HINTS = 10;
const HINT_SCAN_CALLS = 20;

/** The prefixes of slotgate-shaped keys a bounded scan sees. */
async function prefixesSeen(nodes: (Redis | Cluster)[]): Promise<string[]> {
  const found = new Set<string>();
  for (const key of await scanAll(nodes, '*:v[0-9]*:*', HINT_SCAN_CALLS)) {
    const m = /^([^{}\s]+?):v\d+:/.exec(key);
    if (m) found.add(m[1]!);
    if (found.size >= PREFIX_HINTS) break;
  }
  return [...found].sort();
}

async function pushUnknown(client: Redis | Cluster, findings: Finding[], key: string): Promise<void> {
  const type = await client.type(key);
  if (type !== 'none')
    findings.push({ key, kind: 'unknown_key', detail: `not a key slotgate makes (a ${type})`, type });
}

export interface CheckOptions {
  /** Adaptive channels (from a config): their stored limits join the report. */
  adaptive?: readonly AdaptiveChannel[];
  /** The config's `adaptive_enabled`; a settings override in the store wins. @default true */
  adaptiveEnabled?: boolean;
}

export async function checkLeftovers(
  client: Redis | Cluster,
  prefix = 'slotgate',
  fix = false,
  options: CheckOptions = {},
): Promise<DoctorReport> {
  const keys = new KeyBuilder(prefix);
  // first: a command waits for a Cluster client to be ready, and its list of masters with it
  const denied = await deniedToDoctor(client, keys);
  if (denied.length) return { ...emptyReport(prefix, nodesOf(client).length), denied };
  const now = await redisNow(client);
  const nodes = nodesOf(client);
  const all = await scanAll(nodes, `${globEscape(prefix)}:*`);
  const ages = all.includes(keys.instances())
    ? await heartbeatAges(client, keys, now)
    : new Map<string, number>();
  const silent = anySilent(ages);
  const late = new Map<string, LateOwner>();
  const findings: Finding[] = [];
  const otherVersions: string[] = [];
  const olderQueues: string[] = [];
  const otherPrefixes: string[] = [];
  /** Channels with slots or a high-water mark. */
  const marked = new Set<string>();
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
    if (!('channelId' in shape)) continue;
    const pttl = await client.pttl(key);
    if (shape.kind === 'cooldown') {
      if (pttl === -1)
        findings.push({ key, kind: 'cooldown_without_ttl', detail: 'a cooldown that never ends' });
      continue;
    }
    if (shape.kind === 'peak') {
      if (pttl === -1) findings.push({ key, kind: 'no_expiry', detail: 'a peak key without an expiry' });
      marked.add(shape.channelId);
      continue;
    }
    if (shape.kind === 'limit') {
      if (pttl === -1) findings.push({ key, kind: 'no_expiry', detail: 'a limit key without an expiry' });
      continue;
    }
    const queue = shape.kind === 'queue';
    if (!queue) marked.add(shape.channelId);
    if (!queue && silent)
      findings.push(...(await silentOwners(client, key, shape.channelId, now, ages, late)));
    const expired = queue
      ? ranOut(await client.zrange(key, 0, -1, 'WITHSCORES'), now)
      : await client.zrangebyscore(key, '-inf', now);
    const noun = queue ? 'waiter registration' : 'lease';
    if (expired.length > 0)
      findings.push({
        key,
        kind: 'expired_members',
        detail: `${expired.length} expired ${noun}${expired.length > 1 ? 's' : ''} still stored (owners gone)`,
        members: expired,
      });
    if (pttl === -1)
      findings.push({ key, kind: 'no_expiry', detail: `a ${shape.kind} key without an expiry` });
  }

  const peaks = await peaksOf(client, keys, marked);
  const adaptive = options.adaptive?.length
    ? await readAdaptiveLimits(client, prefix, options.adaptive, options.adaptiveEnabled)
    : undefined;
  if (fix) fixed = await fixFindings(client, findings, prefix);
  return {
    prefix,
    nodes: nodes.length,
    scanned: all.length,
    findings,
    lateOwners: [...late.values()].sort((a, b) => a.owner.localeCompare(b.owner)),
    otherVersions,
    olderQueues,
    otherPrefixes,
    peaks,
    ...(adaptive && { adaptive }),
    ...(all.length === 0 && { prefixesSeen: await prefixesSeen(nodes) }),
    fixed,
  };
}

/** The channels' high-water marks above 0, one read each (lua/readPeaks-n.lua). */
async function peaksOf(client: Redis | Cluster, keys: KeyBuilder, ids: ReadonlySet<string>): Promise<Peak[]> {
  const peaks: Peak[] = [];
  for (const id of [...ids].sort()) {
    const [at, peak, since] = await SCRIPTS.readPeaks.call(client, [keys.slots(id), keys.peak(id)], []);
    if (peak! > 0) peaks.push({ channelId: id, peak: peak!, windowMs: at! - since! });
  }
  return peaks;
}

/**
 * The queue members (`ZRANGE … WITHSCORES`, scored by arrival in µs) that arrived longer ago than the lifetime they
 * name (lua/includes/queue.lua); a member of another shape has none.
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
