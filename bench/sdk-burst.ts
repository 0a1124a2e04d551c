/**
 * A burst of concurrent calls through the official openai SDK with its default retries, every HTTP attempt recorded
 * (sent at, status, the retry headers of its answer) through the SDK's `fetch` option, and the summary docs/benchmark.md
 * reports: attempts, 429s, the largest share of the retries sent within any 100 ms window, calls that succeeded.
 */
import { performance } from 'node:perf_hooks';
import OpenAI from 'openai';

export interface Attempt {
  /** The call it belongs to, and its try (0 = the first, 1… = the SDK's retries). */
  call: number;
  try: number;
  /** When it was sent and when its answer's headers came back, ms after the burst started. */
  sentAt: number;
  answeredAt: number;
  status: number;
  retryAfter: string | null;
  retryAfterMs: string | null;
}

export interface BurstResult {
  attempts: Attempt[];
  /** Per call: whether it finally succeeded. */
  succeeded: boolean[];
  elapsedMs: number;
}

export interface BurstSummary {
  calls: number;
  attempts: number;
  rejected: number;
  retries: number;
  /** The most retries sent within one 100 ms window, and that as a share of every retry. */
  maxRetriesIn100ms: number;
  maxShareIn100ms: number;
  succeeded: number;
  /** Distinct retry-after-ms values among the 429s (0 when none carried one). */
  distinctRetryAfterMs: number;
  /** The Retry-After values of the 429s, each with how many carried it. */
  retryAfterValues: Record<string, number>;
}

export async function runSdkBurst(opts: {
  /** The gateway's base URL with /v1. */
  baseURL: string;
  apiKey: string;
  model: string;
  calls: number;
  /** @default the SDK's own (2) */
  maxRetries?: number;
}): Promise<BurstResult> {
  const attempts: Attempt[] = [];
  const start = performance.now();
  const clientFor = (call: number) => {
    let tries = 0;
    const recordingFetch: typeof fetch = async (input, init) => {
      const entry = { call, try: tries++, sentAt: performance.now() - start };
      const res = await fetch(input, init);
      attempts.push({
        ...entry,
        answeredAt: performance.now() - start,
        status: res.status,
        retryAfter: res.headers.get('retry-after'),
        retryAfterMs: res.headers.get('retry-after-ms'),
      });
      return res;
    };
    return new OpenAI({
      baseURL: opts.baseURL,
      apiKey: opts.apiKey,
      fetch: recordingFetch,
      ...(opts.maxRetries !== undefined ? { maxRetries: opts.maxRetries } : {}),
    });
  };
  const succeeded = await Promise.all(
    Array.from({ length: opts.calls }, (_, call) =>
      clientFor(call)
        .chat.completions.create({ model: opts.model, messages: [{ role: 'user', content: 'hi' }] })
        .then(
          () => true,
          (err: unknown) => {
            if (err instanceof OpenAI.APIError && err.status === 429) return false;
            throw err;
          },
        ),
    ),
  );
  return { attempts, succeeded, elapsedMs: performance.now() - start };
}

/** The most of `times` (sorted or not) that fall within one window [t, t + windowMs). */
export function maxInWindow(times: readonly number[], windowMs: number): number {
  const sorted = [...times].sort((a, b) => a - b);
  let best = 0;
  let lo = 0;
  for (let hi = 0; hi < sorted.length; hi++) {
    while (sorted[hi]! - sorted[lo]! >= windowMs) lo++;
    best = Math.max(best, hi - lo + 1);
  }
  return best;
}

export function summarize(result: BurstResult): BurstSummary {
  const { attempts, succeeded } = result;
  const rejected = attempts.filter((a) => a.status === 429);
  const retries = attempts.filter((a) => a.try > 0).map((a) => a.sentAt);
  const maxRetriesIn100ms = maxInWindow(retries, 100);
  const retryAfterValues: Record<string, number> = {};
  for (const a of rejected) {
    const key = a.retryAfter ?? '(none)';
    retryAfterValues[key] = (retryAfterValues[key] ?? 0) + 1;
  }
  return {
    calls: succeeded.length,
    attempts: attempts.length,
    rejected: rejected.length,
    retries: retries.length,
    maxRetriesIn100ms,
    maxShareIn100ms: retries.length ? maxRetriesIn100ms / retries.length : 0,
    succeeded: succeeded.filter(Boolean).length,
    distinctRetryAfterMs: new Set(rejected.map((a) => a.retryAfterMs).filter((v) => v !== null)).size,
    retryAfterValues,
  };
}
