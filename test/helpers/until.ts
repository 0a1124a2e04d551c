/**
 * Bounded polling, where a test waits for something to happen rather than sleeping a fixed time and hoping it did.
 * A check that throws counts as not yet, and its last error is kept: a timeout says what was awaited and why the
 * last try failed (also as the error's `cause`).
 */
import { setTimeout as sleep } from 'node:timers/promises';

export interface UntilOptions {
  /** @default 10_000 */
  timeoutMs?: number;
  /** Between two checks. @default 20 */
  intervalMs?: number;
}

/** Resolves with the check's first truthy result; rejects naming `what` once `timeoutMs` has passed. */
export async function until<T>(
  check: () => T | Promise<T>,
  what: string,
  { timeoutMs = 10_000, intervalMs = 20 }: UntilOptions = {},
): Promise<NonNullable<T>> {
  const deadline = performance.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (err) {
      lastError = err;
    }
    if (performance.now() > deadline) throw timedOut(what, timeoutMs, lastError);
    await sleep(intervalMs);
  }
}

/** The error of a wait that ran out, with the last failure seen while waiting (if any) as its cause. */
export function timedOut(what: string, timeoutMs: number, lastError?: unknown): Error {
  if (lastError === undefined) return new Error(`${what}: not within ${timeoutMs} ms`);
  const why = lastError instanceof Error ? lastError.message : String(lastError);
  return new Error(`${what}: not within ${timeoutMs} ms (last error: ${why})`, { cause: lastError });
}

/**
 * Calls `attempt` until it answers (a store call while Redis comes back: the first ones fail), every 50 ms for at most
 * 15 s, within a test's time-out; a timeout says why the last attempt failed.
 */
export function answered<T>(attempt: () => Promise<T>, what = 'a call answered'): Promise<NonNullable<T>> {
  return until(attempt, what, { timeoutMs: 15_000, intervalMs: 50 });
}
