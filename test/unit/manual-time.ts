/**
 * Driving code on a ManualClock from a test: drain what is queued, move time one millisecond at a time, and record
 * the instant a promise settled. MemoryStore does no I/O, so one macrotask turn runs every continuation there is.
 */
import type { Clock } from '../../packages/slotgate/src/core/clock.js';
import type { ManualClock } from './manual-clock.js';

/** Runs every queued continuation, however many hops deep, without moving the clock. */
export const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * Moves the clock forward by `ms`, 1 ms at a time, draining continuations before the first step and after each: a
 * timer set by a continuation fires at its own deadline, and code that reads the clock after an await sees the
 * instant it ran at.
 */
export async function elapse(clock: ManualClock, ms: number): Promise<void> {
  await flush();
  for (let i = 0; i < ms; i++) {
    await clock.advance(1);
    await flush();
  }
}

export interface Settled<T> {
  /** The clock's time when the promise settled; undefined while it is pending. */
  at: number | undefined;
  value?: T;
  error?: unknown;
}

/** Watches a promise: when it settled by the clock, and with what. Never rejects. */
export function track<T>(clock: Clock, work: Promise<T>): Settled<T> {
  const state: Settled<T> = { at: undefined };
  work.then(
    (value) => {
      state.at = clock.now();
      state.value = value;
    },
    (error: unknown) => {
      state.at = clock.now();
      state.error = error;
    },
  );
  return state;
}
