/** A candidate channel as the admission pass sees it (the gateway's channels carry more fields). */
export interface Candidate {
  id: string;
  /** > 0 bounds the channel's concurrency across every instance; 0 (default) = unlimited, never touches Redis. */
  maxConcurrency?: number;
  /** Higher is preferred; tiers are walked from the highest priority down. @default 0 */
  priority?: number;
  /** Relative share among channels of equal load in one tier; 0 = last resort. @default 1 */
  weight?: number;
  /** Bound of this channel's wait queue; else the setting max_waiting_per_channel, else max(32, 8 × maxConcurrency). */
  maxWaiting?: number;
  /** false removes the channel from every candidate set. @default true */
  enabled?: boolean;
}

export const isBounded = (c: Candidate): boolean => (c.maxConcurrency ?? 0) > 0;
export const priorityOf = (c: Candidate): number => c.priority ?? 0;
export const weightOf = (c: Candidate): number => Math.max(0, c.weight ?? 1);
