export type FindingKind =
  'expired_members' | 'no_expiry' | 'cooldown_without_ttl' | 'wrong_type' | 'unknown_key' | 'dead_owner';

/**
 * A heartbeat (every 5 s in the gateway) older than this means a dead instance: three missed. It is stamped by the
 * instance's clock and compared with Redis's, so clocks seconds apart make the check unreliable.
 */
export const OWNER_DEAD_AFTER_MS = 15_000;

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

export interface DoctorReport {
  prefix: string;
  /** Nodes scanned: every master of a Cluster, else 1. */
  nodes: number;
  scanned: number;
  findings: Finding[];
  /** Noted, never touched: keys of another schema version. */
  otherVersions: string[];
  /** Noted, never touched: an older release's queue keys (`:queue`, `:waiters`), which expire by themselves. */
  olderQueues: string[];
  /** Noted, never touched: keys of a longer prefix (`<prefix>:<more>:v1:...`). */
  otherPrefixes: string[];
  /** Only when no key was under the prefix: the slotgate prefixes a bounded scan saw. */
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
