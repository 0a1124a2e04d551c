/** What a store shares with every instance beside slots: settings overrides and the instance list. */

export interface SharedSettingsOptions<T extends object> {
  /** Validates the overrides read from the store and every update written; throws on bad input. */
  parse: (input: unknown) => T;
  /** Called with the validated overrides on start, on every change and on every periodic re-read that differs. */
  onOverrides: (overrides: T) => void;
  onError?: (err: Error) => void;
  /**
   * Called on the instance that put the overrides back after the store lost them (a Redis that restarted empty):
   * what it restored and the record it restored them with.
   */
  onRestore?: (overrides: T, origin: OverridesOrigin) => void;
  /** Fallback re-read period for a lost change announcement; it also bounds how long a store loss goes unseen. @default 5000 */
  rereadMs?: number;
  /** Who writes, recorded with every change and restore (`changedBy`, `restoredBy`). @default a random id */
  instanceId?: string;
}

/** What a store records of the overrides' last change, as an instance last read it. */
export interface OverridesOrigin {
  /** Counts the recorded changes; a higher version always wins over a lower one. 0: no record (nothing written yet). */
  version: number;
  /**
   * `update` (`write`), `reset`, or `external`: the overrides were changed outside `sharedSettings` (by hand, or by
   * an older release) and `changedAt` is when an instance first saw it. null with no record.
   */
  change: 'update' | 'reset' | 'external' | null;
  /** When the change was made (ISO time, on the store's clock); null when unknown. */
  changedAt: string | null;
  /** The `instanceId` that made it; null when unknown (external). */
  changedBy: string | null;
  /** When an instance put these overrides back after the store had lost them; null when they were never lost. */
  restoredAt: string | null;
  restoredBy: string | null;
}

/** The origin of overrides nobody has recorded a change of. */
export const NO_ORIGIN: OverridesOrigin = Object.freeze({
  version: 0,
  change: null,
  changedAt: null,
  changedBy: null,
  restoredAt: null,
  restoredBy: null,
});

export interface SharedSettings<T extends object> {
  /**
   * Reads the overrides once, then follows changes. Never waits on the store beyond the first read's own time-out:
   * with the store down at start, the instance runs on its own settings and picks the overrides up later.
   */
  start(): Promise<void>;
  /** Validates an update, merges it into the stored overrides and announces it to every instance. */
  write(update: T): Promise<void>;
  /**
   * Removes every override (back to each instance's configured values) and announces it. A reset is recorded too, so
   * an instance that still holds the overrides of before never puts them back after a store loss.
   */
  reset(): Promise<void>;
  /** The record of the overrides in force on this instance: which change, when, by whom, and whether restored. */
  readonly origin: OverridesOrigin;
  close(): Promise<void>;
}

/** What an instance says of itself; `seen_at` is added by the store when it is announced. */
export type InstanceInfo = Record<string, unknown> & { id: string };

export interface Presence {
  /** Records (or refreshes) this instance; announcements older than `list`'s window drop out of it. */
  announce(info: InstanceInfo): Promise<void>;
  /** The instances announced within the last `maxAgeMs`, ordered by id, each with its `seen_at` (ISO time). */
  list(maxAgeMs: number): Promise<Array<InstanceInfo & { seen_at: string }>>;
  /** Removes the instance at once (graceful shutdown). */
  leave(id: string): Promise<void>;
}
