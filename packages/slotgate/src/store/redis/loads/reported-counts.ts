/**
 * What one store put in the load summary for one instance (load-summary.ts): its counts as versions, each the whole
 * of its counts as one HSET wrote them, kept while a snapshot may still hold them, so a reader can take its own counts
 * out of a snapshot's sums by the version the snapshot names.
 */
import { randomBytes } from 'node:crypto';
import type { LoadExchange } from '../../store.js';
import { packCounts, type SummaryView } from './load-snapshot.js';

/** One version of an instance's counts (channel → packed count, non-zero only), as one HSET put it in. */
export interface Version {
  n: number;
  counts: ReadonlyMap<string, number>;
  /** When a later version was put in (performance.now() ms). */
  replacedAt?: number;
}

/** What puts a version in: the field's JSON ('' when it holds nothing: the field is deleted), a new hash expiry. */
export interface FieldWrite {
  field: string;
  expiry: number | '';
}

const EMPTY: ReadonlyMap<string, number> = new Map();

/** How long an instance's counts live without an exchange that gives a keep, when none ever gave one. */
const DEFAULT_KEEP_MS = 60_000;

/** Versions remembered at most (the last always). */
const MAX_VERSIONS = 256;

export class ReportedCounts {
  /** Random: versions are `<tag>.<n>`, so another process under the same instance id never matches. */
  private readonly tag = randomBytes(6).toString('base64url');
  private n = 0;
  /** Versions by n, oldest first: the last one, and those replaced lately. */
  private readonly versions = new Map<number, Version>();
  /** When its counts lapse (Redis ms, by the clock estimate) and the keep that set it. */
  private lapseAt: number | undefined;
  private keepMs: number | undefined;
  /** Whether the next write renews the hash's expiry (with a keep). */
  private renewDue = true;

  /** The last version (undefined before any): the instance's counts as last put in. */
  get last(): Version | undefined {
    return this.versions.get(this.n);
  }

  /** Applies the exchange's counts (and keep) to the last version's, as a new version; `now` on the Redis clock. */
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
    // (writes failing one after the other are never confirmed: the oldest go first; a snapshot naming one is read
    // again without a max age)
    for (const n of this.versions.keys()) {
      if (this.versions.size <= MAX_VERSIONS) break;
      this.versions.delete(n);
    }
    return version;
  }

  /** What puts the version in: its field, and the counts hash's new expiry with a keep not renewed yet. */
  writeOf(version: Version): FieldWrite {
    const flat: (string | number)[] = [`${this.tag}.${version.n}`, this.lapseAt!];
    for (const [id, packed] of version.counts) flat.push(id, packed);
    const keepMs = this.keepMs;
    // what nobody renews goes by itself: once no live instance holds anything, the hash expires
    const expiry = keepMs !== undefined && this.renewDue ? keepMs + Math.floor(keepMs / 4) : '';
    this.renewDue = false;
    return { field: version.counts.size > 0 ? JSON.stringify(flat) : '', expiry };
  }

  /**
   * A version was put in: the versions before it are replaced in Redis, and a snapshot built from them is served for
   * at most `servedMs`: they are forgotten a while after that.
   */
  confirmed(version: Version, servedMs: number): void {
    const now = performance.now();
    for (const [n, v] of this.versions) {
      if (n >= version.n) break;
      v.replacedAt ??= now;
      if (now - v.replacedAt > servedMs) this.versions.delete(n);
    }
  }

  /** The counts a snapshot's sums hold of this instance (none: not in it); undefined for a version not known. */
  ownIn(view: SummaryView, instanceId: string): ReadonlyMap<string, number> | undefined {
    const version = view.versions.get(instanceId);
    if (version === undefined) return EMPTY;
    const dot = version.lastIndexOf('.');
    // another process under the same id put these in (this one's predecessor, say): they are not this one's to take out
    if (version.slice(0, dot) !== this.tag) return EMPTY;
    return this.versions.get(Number(version.slice(dot + 1)))?.counts;
  }
}
