/** What a store shares with every instance beside slots: settings overrides and the instance list. */

export interface SharedSettingsOptions<T extends object> {
  /** Validates the overrides read from the store and every update written; throws on bad input. */
  parse: (input: unknown) => T;
  /** Called with the validated overrides on start and whenever they change. */
  onOverrides: (overrides: T) => void;
  onError?: (err: Error) => void;
  /** Called on the instance that put the overrides back after the store lost them. */
  onRestore?: (overrides: T, origin: OverridesOrigin) => void;
  /** Re-read period, the fallback for a lost change announcement. @default 5000 */
  rereadMs?: number;
  /** Recorded with every change and restore. @default a random id */
  instanceId?: string;
}

/** The record of the overrides' last change, as an instance last read it. */
export interface OverridesOrigin {
  /** Counts the recorded changes; the higher version wins. 0: nothing recorded. */
  version: number;
  /** `external`: changed outside `sharedSettings`, `changedAt` when an instance first saw it. null: no record. */
  change: 'update' | 'reset' | 'external' | null;
  /** ISO time on the store's clock; null when unknown. */
  changedAt: string | null;
  changedBy: string | null;
  /** When an instance put these overrides back after the store lost them; null when never lost. */
  restoredAt: string | null;
  restoredBy: string | null;
}

export const NO_ORIGIN: OverridesOrigin = Object.freeze({
  version: 0,
  change: null,
  changedAt: null,
  changedBy: null,
  restoredAt: null,
  restoredBy: null,
});

export interface SharedSettings<T extends object> {
  /** Reads the overrides once, then follows changes; with the store down, picks them up later. */
  start(): Promise<void>;
  /** Validates an update, merges it into the stored overrides and announces it to every instance. */
  write(update: T): Promise<void>;
  /** Removes every override and announces it; recorded, so no instance puts the old ones back after a store loss. */
  reset(): Promise<void>;
  /** The record of the overrides in force on this instance. */
  readonly origin: OverridesOrigin;
  close(): Promise<void>;
}

/** What an instance says of itself; the store adds `seen_at`. */
export type InstanceInfo = Record<string, unknown> & { id: string };

export interface Presence {
  /** Records (or refreshes) this instance. */
  announce(info: InstanceInfo): Promise<void>;
  /** The instances announced within the last `maxAgeMs`, ordered by id, each with its `seen_at` (ISO time). */
  list(maxAgeMs: number): Promise<Array<InstanceInfo & { seen_at: string }>>;
  /** Removes the instance at once. */
  leave(id: string): Promise<void>;
}
