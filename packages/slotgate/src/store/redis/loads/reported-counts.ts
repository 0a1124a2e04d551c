/**
 * The versions of one instance's counts in the load summary, kept while a snapshot may still hold them, so a reader
 * can take its own counts out of the sums by the version the snapshot names.
 */
import { randomBytes } from 'node:crypto';
import type { LoadExchange } from '../../store.js';
import { packCounts, type SummaryView } from './load-snapshot.js';

interface Version {
  n: number;
  /** channel → packed count, non-zero only. */
  counts: ReadonlyMap<string, number>;
  /** When a later version was put in (performance.now()). */
  replacedAt?: number;
}

/** The field's JSON ('' deletes it) and the counts hash's new expiry ('' for none). */
export interface FieldWrite {
  field: string;
  expiry: number | '';
}

const EMPTY: ReadonlyMap<string, number> = new Map();

/** The lapse of an instance's counts when no exchange ever gave a keep. */
const DEFAULT_KEEP_MS = 60_000;

const MAX_VERSIONS = 256;

export class ReportedCounts {
  /** Versions are `<tag>.<n>`: another process under the same instance id never matches. */
  private readonly tag = randomBytes(6).toString('base64url');
  private n = 0;
  /** The last version and those replaced lately, oldest first. */
  private readonly versions = new Map<number, Version>();
  /** Redis ms, by the clock estimate. */
  private lapseAt: number | undefined;
  private keepMs: number | undefined;
  private renewDue = true;

  get last(): Version | undefined {
    return this.versions.get(this.n);
  }

  /** The exchange's counts applied to the last version's, as a new version; `now` on the Redis clock. */
  apply(ex: Pick<LoadExchange, 'mode' | 'counts' | 'keepMs'>, now: number): Version {
    const counts = new Map(ex.mode === 'changes' ? this.last?.counts : undefined);
    if (ex.mode !== 'leave') {
      for (const [id, own] of ex.counts) {
        const packed = packCounts(own);
        if (packed > 0) counts.set(id, packed);
        else counts.delete(id);
      }
    }
    if (ex.keepMs !== undefined) {
      this.lapseAt = Math.round(now + ex.keepMs);
      this.keepMs = ex.keepMs;
      this.renewDue = true;
    }
    this.lapseAt ??= Math.round(now + DEFAULT_KEEP_MS);
    const version: Version = { n: ++this.n, counts };
    this.versions.set(version.n, version);
    // unconfirmed versions pile up while writes fail: a snapshot naming a dropped one is read again fresh
    for (const n of this.versions.keys()) {
      if (this.versions.size <= MAX_VERSIONS) break;
      this.versions.delete(n);
    }
    return version;
  }

  writeOf(version: Version): FieldWrite {
    const flat: (string | number)[] = [`${this.tag}.${version.n}`, this.lapseAt!];
    for (const [id, packed] of version.counts) flat.push(id, packed);
    const keepMs = this.keepMs;
    // what nobody renews goes by itself: once no live instance holds anything, the hash expires
    const expiry = keepMs !== undefined && this.renewDue ? keepMs + Math.floor(keepMs / 4) : '';
    this.renewDue = false;
    return { field: version.counts.size > 0 ? JSON.stringify(flat) : '', expiry };
  }

  /** The versions before `version` are replaced; a snapshot of them is served at most `servedMs` more. */
  confirmed(version: Version, servedMs: number): void {
    const now = performance.now();
    for (const [n, v] of this.versions) {
      if (n >= version.n) break;
      v.replacedAt ??= now;
      if (now - v.replacedAt > servedMs) this.versions.delete(n);
    }
  }

  /** This instance's counts in a snapshot's sums; undefined for a version not remembered. */
  ownIn(view: SummaryView, instanceId: string): ReadonlyMap<string, number> | undefined {
    const version = view.versions.get(instanceId);
    if (version === undefined) return EMPTY;
    const dot = version.lastIndexOf('.');
    // another process under the same id put these in: not this one's to take out
    if (version.slice(0, dot) !== this.tag) return EMPTY;
    return this.versions.get(Number(version.slice(dot + 1)))?.counts;
  }
}
