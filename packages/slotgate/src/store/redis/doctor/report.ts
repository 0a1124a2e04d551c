import { describeResource } from '../../../core/client.js';
import { deniedMessage } from '../fencing/access.js';
import { formatAdaptiveLimits, type AdaptiveReport } from './limits.js';

export type FindingKind =
  'expired_members' | 'no_expiry' | 'cooldown_without_ttl' | 'wrong_type' | 'unknown_key' | 'dead_owner';

/** How often a gateway writes its heartbeat into the instance list. */
export const HEARTBEAT_PERIOD_MS = 5000;

/**
 * A heartbeat older than this means a dead instance: three missed. It is stamped by the instance's clock and compared
 * with Redis's, so clocks seconds apart make the check unreliable.
 */
export const OWNER_DEAD_AFTER_MS = 3 * HEARTBEAT_PERIOD_MS;

/**
 * A heartbeat older than this is late: the beat due one period after it is half a period overdue. A live gateway's
 * heartbeat is at most one period old plus a round trip, so the half period of slack absorbs timer drift, a slow
 * Redis, an event-loop stall or a clock a second or two off Redis's; an instance killed holding slots shows as late
 * at most this long after its last beat instead of passing for clean until it is presumed dead. Nothing is released
 * for a late owner: only the doctor's verdict says so.
 */
export const OWNER_LATE_AFTER_MS = 1.5 * HEARTBEAT_PERIOD_MS;

export interface Finding {
  key: string;
  kind: FindingKind;
  detail: string;
  /** expired_members and dead_owner. */
  members?: string[];
  /** wrong_type and unknown_key: a fix deletes the key only while it still has this type. */
  type?: string;
  /** dead_owner: the instance, its heartbeat's age, when its last lease expires by itself. */
  owner?: string;
  silentMs?: number;
  freesInMs?: number;
  /** dead_owner: the channel, and each member's expiry as reported (a fix releases only while unchanged). */
  channelId?: string;
  scores?: number[];
}

/** The live slots of an instance whose heartbeat is late but not yet presumed dead: reported, never released. */
export interface LateOwner {
  owner: string;
  /** The heartbeat's age (Redis clock), and how long until the owner is presumed dead if it stays silent. */
  silentMs: number;
  deadInMs: number;
  /** Its live slots in all. */
  slots: number;
  /** Per slots key: the channel (or client resource), its live slots, when the last of them expires by itself. */
  held: Array<{ key: string; channelId: string; slots: number; freesInMs: number }>;
}

/** A channel's high-water mark (store/peak.ts): the most slots held at once over the window before the check. */
export interface Peak {
  channelId: string;
  peak: number;
  windowMs: number;
}

export interface DoctorReport {
  prefix: string;
  /** Nodes scanned: every master of a Cluster, else 1. */
  nodes: number;
  scanned: number;
  findings: Finding[];
  /** Slots of owners whose heartbeat is late (older than OWNER_LATE_AFTER_MS) but not yet dead: not a finding. */
  lateOwners: LateOwner[];
  /** Noted, never touched: keys of another schema version. */
  otherVersions: string[];
  /** Noted, never touched: an older release's queue keys (`:queue`, `:waiters`), which expire by themselves. */
  olderQueues: string[];
  /** Noted, never touched: keys of a longer prefix (`<prefix>:<more>:v1:...`). */
  otherPrefixes: string[];
  /** The channels that held slots lately, with the most held at once (not a finding). */
  peaks: Peak[];
  /** The stored limits of the adaptive channels the check was given (not a finding). */
  adaptive?: AdaptiveReport;
  /** Only when no key was under the prefix: the slotgate prefixes a bounded scan saw. */
  prefixesSeen?: string[];
  /** What the Redis user may not run (an ACL rule too narrow): nothing else was checked. */
  denied?: string[];
  fixed: number;
}

const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? '' : 's'}`;
const seconds = (ms: number): string => `${(ms / 1000).toFixed(ms % 1000 ? 1 : 0)} s`;

/** The verdict when slots of late owners exist: never "clean", whatever else was found. */
function lateVerdict(late: readonly LateOwner[], findings: number): string {
  const slots = late.reduce((n, o) => n + o.slots, 0);
  const deadIn = Math.ceil(Math.max(...late.map((o) => o.deadInMs)) / 1000);
  return (
    `late heartbeats: ${plural(slots, 'slot')} held by ${plural(late.length, 'instance')} not heard from for over ` +
    `${seconds(OWNER_LATE_AFTER_MS)} (presumed dead after ${seconds(OWNER_DEAD_AFTER_MS)}); left alone, ` +
    `run again in ${deadIn} s` +
    (findings === 0 ? '; no leftover keys' : '')
  );
}

function lateLine(o: LateOwner): string {
  const where = o.held.map((h) => `${h.slots} of ${describeResource(h.channelId)}`).join(', ');
  return (
    `  LATE OWNER ${plural(o.slots, 'slot')} held by instance ${o.owner}, last heartbeat ` +
    `${Math.round(o.silentMs / 1000)} s ago (${where}): presumed dead in ${Math.ceil(o.deadInMs / 1000)} s ` +
    `unless it beats again`
  );
}

/**
 * The high-water marks, against each channel's max when `maxes` (channel id → max_concurrency, from a config) names
 * it; a mark above its max says so.
 */
function peakLine(peaks: readonly Peak[], maxes: ReadonlyMap<string, number>): string {
  const marks = peaks.map(({ channelId, peak }) => {
    const max = maxes.get(channelId);
    const of = max === undefined ? `${peak}` : `${peak} of max ${max}${peak > max ? ' — ABOVE MAX' : ''}`;
    return `${describeResource(channelId)} ${of}`;
  });
  const longest = Math.max(...peaks.map((p) => p.windowMs));
  return `  most slots held at once in the last ${Math.round(longest / 1000)} s: ${marks.join(', ')}`;
}

export function formatReport(
  report: DoctorReport,
  fix: boolean,
  maxes: ReadonlyMap<string, number> = new Map(),
): string {
  const nodes = `${report.nodes} node${report.nodes === 1 ? '' : 's'}`;
  const lines = [`slotgate doctor: prefix "${report.prefix}", ${report.scanned} key(s) scanned on ${nodes}`];
  if (report.denied?.length) {
    lines.push(`  ACCESS ${deniedMessage(report.denied)}; nothing else checked`);
    return lines.join('\n');
  }
  const late = report.lateOwners;
  if (late.length) lines.push(lateVerdict(late, report.findings.length));
  else if (report.findings.length === 0) lines.push('clean: no leftover keys');
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
  for (const o of late) lines.push(lateLine(o));
  if (report.peaks.length) lines.push(peakLine(report.peaks, maxes));
  if (report.adaptive) lines.push(...formatAdaptiveLimits(report.adaptive));
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
