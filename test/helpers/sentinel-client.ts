/**
 * One "gateway instance" on a Sentinel set, run as a child for the failover tests (test/integration/sentinel.test.ts):
 *
 *   node --import tsx test/helpers/sentinel-client.ts '<json SentinelClientOptions>'
 *
 * An admission engine on a RedisStore made from `sentinel`. It prints `{"ready":true}`, waits for a `go` line, then
 * runs `loops` loops until a `stop` line: each takes a ticket on one of the channels and calls the test's upstream
 * while it holds it, for a random time in `holdMs` (like a stream), aborting the call when the ticket's slot is lost
 * (fencing: what the gateway does). Then it prints one summary line `{"summary":{...}}` and exits. Times are
 * Date.now(), comparable with the parent's. It exits at once when its stdin closes.
 */
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import { CapacityError, StoreUnavailableError } from '../../packages/slotgate/src/core/errors.js';
import type { SettingsUpdate } from '../../packages/slotgate/src/core/settings.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { channelUrl } from './fake-upstream.js';

export interface SentinelClientOptions {
  sentinels: string[];
  name: string;
  prefix: string;
  /** The origin of the test's FakeUpstream (channels told apart by path). */
  upstream: string;
  /** Sent as `x-client` with every upstream call, so the upstream can tell the instances apart. */
  label: string;
  loops: number;
  channels: number;
  maxConcurrency: number;
  settings: SettingsUpdate;
  /** Each call holds its slot for a time drawn uniformly from this range (ms). */
  holdMs: [number, number];
  /** After each call, a loop pauses for a time drawn from this range before it asks again. @default [0, 0] */
  thinkMs?: [number, number];
  timeoutMs: number;
}

export interface SentinelClientSummary {
  label: string;
  admitted: number;
  /** When each admitted acquire began. */
  admittedStarts: number[];
  /** When each acquire that failed with StoreUnavailableError (fail closed) began. */
  failedStarts: number[];
  capacityErrors: Record<string, number>;
  otherErrors: Record<string, number>;
  /** Upstream calls aborted because their slot was lost, and calls that failed otherwise. */
  abortedByLoss: number;
  upstreamErrors: number;
  /** Lease events by type (`lease_lost` also by reason, as `lease_lost:<reason>`). */
  events: Record<string, number>;
  /** The store's restart count at the end (a failover is not seen as a restart today). */
  restartsDetected: number;
}

const bump = (record: Record<string, number>, key: string) => (record[key] = (record[key] ?? 0) + 1);

async function main(): Promise<void> {
  const opts = JSON.parse(process.argv[2] ?? '') as SentinelClientOptions;
  const store = new RedisStore({
    sentinel: { sentinels: opts.sentinels, name: opts.name },
    prefix: opts.prefix,
    timeoutMs: opts.timeoutMs,
  });
  const summary: SentinelClientSummary = {
    label: opts.label,
    admitted: 0,
    admittedStarts: [],
    failedStarts: [],
    capacityErrors: {},
    otherErrors: {},
    abortedByLoss: 0,
    upstreamErrors: 0,
    events: {},
    restartsDetected: 0,
  };
  const admission = createAdmission({
    store,
    settings: opts.settings,
    onEvent: (e) => {
      bump(summary.events, e.type);
      if (e.type === 'lease_lost') bump(summary.events, `lease_lost:${e.reason}`);
    },
  });
  const candidates = Array.from({ length: opts.channels }, (_, i) => ({
    id: `ch${i}`,
    maxConcurrency: opts.maxConcurrency,
  }));

  const lines = createInterface({ input: process.stdin });
  let running = true;
  let go!: () => void;
  const started = new Promise<void>((resolve) => (go = resolve));
  lines.on('line', (line) => {
    if (line.trim() === 'go') go();
    if (line.trim() === 'stop') running = false;
  });
  lines.on('close', () => process.exit(2)); // the parent went away: never outlive it

  await store.readLoads(candidates.map((c) => c.id)); // connect before the load
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
  await started;

  const [holdMin, holdMax] = opts.holdMs;
  const [thinkMin, thinkMax] = opts.thinkMs ?? [0, 0];
  async function loop(): Promise<void> {
    while (running) {
      const begun = Date.now();
      let ticket;
      try {
        ticket = await admission.acquire({ candidates });
      } catch (err) {
        if (err instanceof StoreUnavailableError) summary.failedStarts.push(begun);
        else if (err instanceof CapacityError) bump(summary.capacityErrors, err.reason);
        else bump(summary.otherErrors, (err as { code?: string }).code ?? String(err));
        await sleep(20 + Math.random() * 30);
        continue;
      }
      summary.admitted++;
      summary.admittedStarts.push(begun);
      const hold = Math.round(holdMin + Math.random() * (holdMax - holdMin));
      try {
        const res = await fetch(`${channelUrl(opts.upstream, ticket.channel.id)}/hold`, {
          headers: { 'x-hold-ms': String(hold), 'x-client': opts.label },
          signal: ticket.lost,
        });
        await res.text();
        if (res.status !== 200) summary.upstreamErrors++;
      } catch {
        if (ticket.lost.aborted) summary.abortedByLoss++;
        else summary.upstreamErrors++;
      } finally {
        await ticket.release();
      }
      if (thinkMax > 0) await sleep(thinkMin + Math.random() * (thinkMax - thinkMin));
    }
  }

  await Promise.all(Array.from({ length: opts.loops }, () => loop()));
  summary.restartsDetected = store.restartsDetected;
  await admission.close();
  await store.close();
  process.stdout.write(`${JSON.stringify({ summary })}\n`);
  process.exit(0);
}

main().catch((err: unknown) => {
  process.stderr.write(
    `sentinel client failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
});
