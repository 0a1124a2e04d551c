/** What `slotgate doctor` finds, and how it says it. */

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
  /** An older release's queue keys (`:queue`, `:waiters`): they expire by themselves. Reported, never touched. */
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
