/**
 * One "gateway instance" for the multi-process test (test/integration/multi-process.test.ts), run as a child:
 *
 *   node --import tsx test/helpers/acquirer.ts '<json AcquirerOptions>'
 *
 * It connects a RedisStore, prints `{"ready":true}`, waits for a `go` line on stdin (so every child starts its burst
 * at the same moment), then runs `acquirers` concurrent loops. Each loop takes a ticket on one of the channels, calls
 * the test's upstream on that channel's URL while holding it, releases it, and repeats until it has `admissions`
 * admissions (or the deadline passes, or a `stop` line arrives). Finally it prints one summary line
 * `{"summary":{...}}` and exits. Its store connects to what `redis` describes: one node or a cluster.
 * It exits at once when its stdin closes, so a parent that dies never leaves it behind.
 */
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import { CapacityError } from '../../packages/slotgate/src/core/errors.js';
import type { SettingsUpdate } from '../../packages/slotgate/src/core/settings.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { channelUrl } from './fake-upstream.js';
import type { StoreTarget } from './redis.js';

export interface AcquirerOptions {
  redis: StoreTarget;
  prefix: string;
  /** The origin of the test's FakeUpstream; each channel is called on its own URL there (`channelUrl`). */
  upstream: string;
  acquirers: number;
  admissions: number;
  channels: number;
  /** The channels' ids (as many as `channels`). @default ch0, ch1, ... */
  channelIds?: string[];
  maxConcurrency: number;
  settings: SettingsUpdate;
  /** Loops stop trying after this long (ms from `go`), so a stuck run ends with a partial summary. */
  deadlineMs: number;
  /**
   * Run for this long (ms from `go`) instead of a number of admissions: each loop takes tickets until then, and a
   * loop stopped by it is not unfinished (for the fairness tests, which compare how much each instance got).
   */
  durationMs?: number;
}

export interface AcquirerSummary {
  instanceId: string;
  /** Tickets obtained (each was followed by exactly one upstream call). */
  admitted: number;
  /** Admissions that had to wait in the queue first. */
  waited: number;
  capacityErrors: Record<string, number>;
  /** Other admission errors, by code or message. */
  otherErrors: Record<string, number>;
  /** Other admission errors by message (the first 160 characters), to report what reached the caller. */
  errorMessages: Record<string, number>;
  /** Lease events (lost, release retried, uncertain acquire...) by type. */
  events: Record<string, number>;
  /** Upstream calls that failed or did not answer 200. */
  upstreamErrors: number;
  /** Loops that stopped at the deadline before their admissions were done. */
  unfinished: number;
}

const bump = (record: Record<string, number>, key: string) => (record[key] = (record[key] ?? 0) + 1);

async function main(): Promise<void> {
  const opts = JSON.parse(process.argv[2] ?? '') as AcquirerOptions;
  // The test checks the limit at the upstream, not latency: a store time-out long enough that three bursting
  // processes and the rest of the suite on two busy cores never trip it (a time-out would fail the pass closed).
  const store = new RedisStore({ ...opts.redis, prefix: opts.prefix, timeoutMs: 5000 });
  const events: Record<string, number> = {};
  const admission = createAdmission({
    store,
    settings: opts.settings,
    onEvent: (event) => bump(events, event.type),
  });
  const candidates = Array.from({ length: opts.channels }, (_, i) => ({
    id: opts.channelIds?.[i] ?? `ch${i}`,
    maxConcurrency: opts.maxConcurrency,
  }));

  const lines = createInterface({ input: process.stdin });
  let started = false;
  let stopped = false;
  const go = new Promise<void>((resolve) =>
    lines.on('line', (line) => {
      if (line.trim() === 'go') resolve();
      if (line.trim() === 'stop') stopped = true;
    }),
  );
  // The parent went away: never outlive it.
  lines.on('close', () => process.exit(started ? 3 : 2));

  await store.readLoads(candidates.map((c) => c.id)); // connect (and fail early) before the burst
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
  await go;
  started = true;

  const summary: AcquirerSummary = {
    instanceId: admission.instanceId,
    admitted: 0,
    waited: 0,
    capacityErrors: {},
    otherErrors: {},
    errorMessages: {},
    events,
    upstreamErrors: 0,
    unfinished: 0,
  };
  const deadline = Date.now() + opts.deadlineMs;
  const end = opts.durationMs === undefined ? Infinity : Date.now() + opts.durationMs;

  async function loop(): Promise<void> {
    let done = 0;
    while (done < opts.admissions && Date.now() < end && !stopped) {
      if (Date.now() > deadline) {
        summary.unfinished++;
        return;
      }
      let ticket;
      try {
        ticket = await admission.acquire({ candidates });
      } catch (err) {
        if (err instanceof CapacityError) bump(summary.capacityErrors, err.reason);
        else {
          bump(summary.otherErrors, (err as { code?: string }).code ?? String(err));
          bump(summary.errorMessages, (err instanceof Error ? err.message : String(err)).slice(0, 160));
        }
        await sleep(5 + Math.random() * 20);
        continue;
      }
      summary.admitted++;
      if (ticket.waitedMs > 0) summary.waited++;
      done++;
      try {
        const res = await fetch(`${channelUrl(opts.upstream, ticket.channel.id)}/hold`);
        await res.text();
        if (res.status !== 200) summary.upstreamErrors++;
      } catch {
        summary.upstreamErrors++;
      } finally {
        await ticket.release();
      }
    }
  }

  await Promise.all(Array.from({ length: opts.acquirers }, () => loop()));
  await admission.close();
  await store.close();
  process.stdout.write(`${JSON.stringify({ summary })}\n`);
  process.exit(0);
}

main().catch((err: unknown) => {
  process.stderr.write(
    `acquirer failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
});
