/**
 * Chaos with `redis.store_failure_mode: local_share`: three `slotgate serve` processes share one private
 * redis-server, with two channels of max 3 (a share of ⌊3 ÷ 3⌋ = 1 per instance and channel) and 60 streaming
 * clients. Once every instance has seen the other two in its heartbeats, Redis is killed (SIGKILL) and kept down
 * well past the lease TTL while the clients keep asking, then started again on the same port, empty (no persistence),
 * and the load goes on through the recovery.
 *
 * The upstream counts in flight per channel key itself. The test prints the figures (peak and time above max per key,
 * what each instance admitted while Redis was down, its /readyz answers, the recovery times), then asserts:
 *
 * - the upstream never saw more than max per key, over the whole run: the stale leases fenced or kept as local
 *   slots, the local admissions while Redis is down, and the recovery, when the local slots are registered again;
 * - the mode admits: requests reached the upstream while Redis was down; none in the first lease TTL of the outage
 *   (an instance fails closed until its store calls have failed for a whole TTL), and no instance ever had more than
 *   its share per key in flight after it;
 * - every instance that admitted while Redis was down answered /readyz 200 with a "degraded" reason meanwhile;
 * - normal admission resumes once Redis is back (under load, and on every gateway once the load is gone);
 * - every client got a clear answer (a complete stream, a refusal, or a stream ended by an SSE error event).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { RECOVERY_MS } from '../../packages/slotgate/src/admission/leases/local-share.js';
import {
  CHANNELS,
  StreamingLoad,
  admitted,
  channelsFull,
  startFleet,
  userAgent,
  waitFor,
  type Fleet,
  type Outcome,
} from '../helpers/chaos-fleet.js';
import type { ReceivedRequest } from '../helpers/fake-upstream.js';
import type { GwProcess } from '../helpers/gw-gateway.js';
import { RedisServer } from '../helpers/redis-server.js';
import { uniquePrefix } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';

// ---- The scenario parameters.

const MAX = 3;
const GATEWAYS = 3;
/** Each instance's share of a channel while Redis is down. */
const SHARE = Math.floor(MAX / GATEWAYS);
const CLIENTS_PER_GATEWAY = 20;
/** The smallest `lease_ttl_ms` the settings accept. */
const LEASE_TTL_MS = 5_000;
const CHUNKS = 32;
const CHUNK_DELAY_MS = 250;
/**
 * Each stream lasts about this long: the streams running at the fault outlive the lease TTL (each is fenced, or kept
 * as a local slot), and the streams admitted locally late in the outage run on through the recovery.
 */
const STREAM_MS = CHUNKS * CHUNK_DELAY_MS;
/** The fault comes this long after both channels are full. */
const FAULT_AFTER_FULL_MS = 1_000;
/**
 * Redis stays down this long: a lease TTL before any instance admits on its share, then about 7 s of local
 * admissions (a slot kept local frees up when its stream ends, at most STREAM_MS − FAULT_AFTER_FULL_MS after the
 * fault, so each share has room in that time).
 */
const OUTAGE_MS = 12_000;
/** `redis.restart_grace_ms`, the default: after a restart, nobody admits through Redis before this. */
const RESTART_GRACE_MS = 3_000;
/** ioredis's longest reconnect back-off (the store's retryStrategy). */
const RECONNECT_BACKOFF_MS = 2_000;
/**
 * A request reaching the upstream this long after Redis answers again was admitted through Redis: each instance has
 * reconnected (back-off), waited out the restart grace, registered its local slots and kept to its share for
 * RECOVERY_MS more by then, with a second to spare.
 */
const NORMAL_AFTER_HEAL_MS = RECONNECT_BACKOFF_MS + RESTART_GRACE_MS + RECOVERY_MS + 1_000;
const REDIS_TIMEOUT_MS = 500;
/** As in chaos.test.ts: above the waiters' safety poll. */
const WAIT_TIMEOUT_MS = 5_000;
const SETTINGS = { lease_ttl_ms: LEASE_TTL_MS, wait_timeout_ms: WAIT_TIMEOUT_MS };
const REQUEST_DEADLINE_MS = WAIT_TIMEOUT_MS + STREAM_MS + 20_000;
const RETRY_DELAY_MS = 150;
/** Generous for a busy runner: how long recovery (and the first heartbeats) may take before the test says so. */
const RECOVERY_DEADLINE_MS = 30_000;
const HEARTBEATS_DEADLINE_MS = 20_000;
/** How often the probes (/readyz, /admin/status) ask each gateway. */
const PROBE_EVERY_MS = 250;
const ADMIN_TOKEN = 'adm-chaos-local-share-7f3a';
const TEST_MS = 180_000;

const cleanups = useCleanups();

async function getJson(
  gw: GwProcess,
  path: string,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${gw.url}${path}`, {
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    signal: AbortSignal.timeout(3_000),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

/** What /admin/status says each instance saw in its last heartbeat (undefined: no answer). */
async function instancesSeen(gw: GwProcess): Promise<number | undefined> {
  const answer = await getJson(gw, '/admin/status').catch(() => undefined);
  const seen = answer?.json.instances_seen;
  return typeof seen === 'number' ? seen : undefined;
}

interface Probe {
  gateway: number;
  at: number;
  status: number;
  reason?: string;
  instancesSeen?: number;
}

/** Asks every gateway `ask` every PROBE_EVERY_MS until stopped; keeps every answer. */
function probing(fleet: Fleet, ask: (gw: GwProcess, gateway: number) => Promise<Probe>) {
  const probes: Probe[] = [];
  let running = true;
  const loops = fleet.gateways.map(async (gw, i) => {
    while (running) {
      probes.push(await ask(gw, i));
      await sleep(PROBE_EVERY_MS);
    }
  });
  const stop = async () => {
    running = false;
    await Promise.all(loops);
  };
  cleanups.push(stop);
  return { probes, stop };
}

async function readyz(gw: GwProcess, gateway: number): Promise<Probe> {
  const at = performance.now();
  const answer = await getJson(gw, '/readyz').catch(() => undefined);
  const json = answer?.json ?? {};
  const reason =
    typeof json.reason === 'string' ? json.reason : (json.error as { message?: string })?.message;
  return { gateway, at, status: answer?.status ?? 0, ...(reason !== undefined ? { reason } : {}) };
}

async function status(gw: GwProcess, gateway: number): Promise<Probe> {
  const at = performance.now();
  const seen = await instancesSeen(gw);
  return {
    gateway,
    at,
    status: seen === undefined ? 0 : 200,
    ...(seen !== undefined ? { instancesSeen: seen } : {}),
  };
}

const via = (r: ReceivedRequest, gateway: number) => r.headers['user-agent'] === userAgent(gateway);

/** The most of `requests` in flight at once within [from, to] (an exchange still open counts as in flight). */
function peakWithin(requests: readonly ReceivedRequest[], from: number, to: number): number {
  const changes: Array<[at: number, delta: number]> = [];
  for (const r of requests) {
    const end = r.endedAt ?? Infinity;
    if (r.receivedAt > to || end <= from) continue;
    changes.push([Math.max(r.receivedAt, from), 1]);
    if (end <= to) changes.push([end, -1]);
  }
  changes.sort((a, b) => a[0] - b[0] || a[1] - b[1]); // an end before a start at the same time
  let current = 0;
  let peak = 0;
  for (const [, delta] of changes) peak = Math.max(peak, (current += delta));
  return peak;
}

/** The refusals of gateway `i`'s requests begun in [from, to], counted by status, code and reason. */
function refusals(outcomes: readonly Outcome[], i: number, from: number, to: number): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const o of outcomes) {
    if (o.gateway !== i || o.kind !== 'refused' || o.startedAt < from || o.startedAt > to) continue;
    const code = /"code":"([^"]+)"/.exec(o.detail ?? '')?.[1] ?? '?';
    const reason = /\[reason: ([a-z_]+)\]/.exec(o.detail ?? '')?.[1];
    const key = `${o.status} ${code}${reason ? ` ${reason}` : ''}`;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
}

/** The gateway's admission events of one type, each with its time in ms after `from` (performance.now()). */
function eventsAt(
  gw: GwProcess,
  type: string,
  from: number,
): Array<Record<string, unknown> & { at: number }> {
  const origin = performance.timeOrigin + from;
  return gw
    .output()
    .split('\n')
    .filter((l) => l.includes(`"event":"${type}"`))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .map((e) => ({ ...e, at: Math.round((e.time as number) - origin) }));
}

/** peakWithin per channel key. */
const peaksPerKey = (requests: readonly ReceivedRequest[], from: number, to: number) =>
  Object.fromEntries(
    CHANNELS.map((id) => [
      id,
      peakWithin(
        requests.filter((r) => r.channel === id),
        from,
        to,
      ),
    ]),
  );

/** Counts the gateway's admission events (its log lines `"event":"<type>"`). */
function eventCounts(gw: GwProcess, types: readonly string[]): Record<string, number> {
  const output = gw.output();
  return Object.fromEntries(types.map((t) => [t, output.split(`"event":"${t}"`).length - 1]));
}

describe('chaos: store_failure_mode local_share keeps the fleet within max while Redis is down and back', () => {
  it(
    `Redis killed for ${OUTAGE_MS} ms under load, then restarted empty: 3 instances on their shares, then recovery`,
    async () => {
      const startedAt = performance.now();
      const redis = await RedisServer.start();
      cleanups.push(() => redis.stop());
      const fleet = await startFleet({
        redisUrls: Array.from({ length: GATEWAYS }, () => redis.url),
        prefix: uniquePrefix('chaos-ls'),
        maxConcurrency: MAX,
        settings: SETTINGS,
        redisTimeoutMs: REDIS_TIMEOUT_MS,
        chunks: CHUNKS,
        chunkDelayMs: CHUNK_DELAY_MS,
        redis: { store_failure_mode: 'local_share' },
        adminToken: ADMIN_TOKEN,
      });
      cleanups.push(() => fleet.close());
      const { upstream, gateways } = fleet;
      // One request through each gateway first, so none is still connecting when the load starts.
      for (const gw of gateways) expect(await admitted(gw.url, 10_000)).toBeGreaterThanOrEqual(0);

      // Every instance has listed all three in a heartbeat (every 5 s): its share is max ÷ 3. Before the load starts,
      // so that the streams running at the fault are young enough to outlive the lease TTL.
      const seen = new Map<number, number | undefined>();
      const heartbeatsBy = performance.now() + HEARTBEATS_DEADLINE_MS;
      for (;;) {
        for (const [i, gw] of gateways.entries()) seen.set(i, await instancesSeen(gw));
        if ([...seen.values()].every((n) => n === GATEWAYS)) break;
        if (performance.now() > heartbeatsBy) {
          throw new Error(`instances_seen ${JSON.stringify([...seen])} after ${HEARTBEATS_DEADLINE_MS} ms`);
        }
        await sleep(PROBE_EVERY_MS);
      }
      const load = new StreamingLoad({
        chunks: CHUNKS,
        deadlineMs: REQUEST_DEADLINE_MS,
        retryDelayMs: RETRY_DELAY_MS,
      });
      cleanups.push(() => load.abortAll());
      for (const [i, gw] of gateways.entries()) load.start(gw, i, CLIENTS_PER_GATEWAY);

      await waitFor(() => channelsFull(upstream, MAX), 15_000, 'both channels full');
      await sleep(FAULT_AFTER_FULL_MS);
      expect(channelsFull(upstream, MAX), 'both channels are still full when Redis goes down').toBe(true);

      // ---- The outage.
      const faultAt = performance.now();
      await redis.stop(); // SIGKILL
      const ready = probing(fleet, readyz);
      await sleep(Math.max(0, faultAt + OUTAGE_MS - performance.now()));
      await redis.start(); // a new empty server on the same port; resolves once it answers
      const healAt = performance.now();
      const statuses = probing(fleet, status);

      // ---- The recovery, under the same load: until a request admitted through Redis reaches the upstream.
      const normalFrom = healAt + NORMAL_AFTER_HEAL_MS;
      await sleep(Math.max(0, normalFrom - performance.now()));
      const normalUnderLoad = () => upstream.all().some((r) => r.receivedAt > normalFrom);
      while (!normalUnderLoad() && performance.now() < healAt + RECOVERY_DEADLINE_MS) await sleep(100);
      const recoveredUnderLoad = normalUnderLoad();
      await ready.stop();
      await statuses.stop();
      // Streams begun while Redis was down end by themselves (they held local slots, registered since); requests
      // begun since it came back are cancelled.
      // The excess is measured up to here, as in chaos.test.ts: the cancellations of the stop free slots at once, and
      // the upstream may read the next request before the close of a cancelled one.
      const stopAt = performance.now();
      await load.stop({ streamsFrom: healAt, requestsFrom: healAt });
      const recovery: number[] = [];
      for (const gw of gateways) recovery.push(Math.round(await admitted(gw.url, RECOVERY_DEADLINE_MS)));
      const readyAfter = await Promise.all(gateways.map((gw, i) => readyz(gw, i)));

      // ---- The figures.
      const all = upstream.all();
      const rel = (t: number) => Math.round(t - faultAt);
      const excess = Object.fromEntries(CHANNELS.map((id) => [id, upstream.excess(id, MAX, stopAt)]));
      // No instance admits on its share before its store calls have failed for a whole TTL (from the fault at the
      // earliest); by then each lease of before the fault was fenced (at its last renewal + TTL − 0.5 s at the latest)
      // or kept as a local slot within its instance's share.
      const localFrom = faultAt + LEASE_TTL_MS;
      const perGateway = gateways.map((_, i) => {
        const mine = all.filter((r) => via(r, i));
        const during = mine.filter((r) => r.receivedAt > faultAt && r.receivedAt < healAt);
        const afterHeal = mine.filter((r) => r.receivedAt > healAt);
        const degraded = ready.probes.filter(
          (p) => p.gateway === i && p.at < healAt && p.status === 200 && p.reason?.startsWith('degraded'),
        );
        const seenAfterHeal = statuses.probes.filter((p) => p.gateway === i && p.instancesSeen !== undefined);
        return {
          admitted_in_outage: during.length,
          // From 1 s after the fault: a request admitted through Redis just before the kill may still be on its way.
          admitted_in_first_ttl_after_1s: during.filter(
            (r) => r.receivedAt > faultAt + 1_000 && r.receivedAt < localFrom,
          ).length,
          first_admitted_in_outage_ms: during.length
            ? rel(Math.min(...during.map((r) => r.receivedAt)))
            : null,
          peak_per_key_in_outage_after_ttl: peaksPerKey(mine, localFrom, healAt),
          peak_per_key_from_heal: peaksPerKey(mine, healAt, stopAt),
          readyz_in_outage: {
            not_ready: ready.probes.filter((p) => p.gateway === i && p.at < healAt && p.status !== 200)
              .length,
            degraded: degraded.length,
            first_degraded_ms: degraded.length ? rel(degraded[0]!.at) : null,
            reason: degraded[0]?.reason?.slice(0, 120),
          },
          refusals_in_first_ttl: refusals(load.outcomes, i, faultAt, localFrom),
          refusals_after_first_ttl: refusals(load.outcomes, i, localFrom, healAt),
          // Nobody admits through Redis in the restart grace: these were admitted on the local share (recovery).
          admitted_in_restart_grace: afterHeal.filter((r) => r.receivedAt < healAt + RESTART_GRACE_MS).length,
          first_upstream_request_after_heal_ms: afterHeal.length
            ? Math.round(Math.min(...afterHeal.map((r) => r.receivedAt)) - healAt)
            : null,
          instances_seen_after_heal: {
            min: Math.min(...seenAfterHeal.map((p) => p.instancesSeen!)),
            changes: seenAfterHeal
              .filter((p, k, a) => k === 0 || a[k - 1]!.instancesSeen !== p.instancesSeen)
              .map((p) => `${p.instancesSeen}@+${Math.round(p.at - healAt)}ms`),
          },
          local_registered_ms_after_heal: eventsAt(gateways[i]!, 'local_registered', healAt).map(
            (e) => `${String(e.leases)}@${e.at}`,
          ),
          events: eventCounts(gateways[i]!, [
            'lease_kept_local',
            'lease_lost',
            'local_registered',
            'leases_restored',
          ]),
        };
      });
      const streamedInOutage = load.outcomes.filter(
        (o) => o.streamingAt !== undefined && o.streamingAt > faultAt && o.streamingAt < healAt,
      );
      const throughFault = load.outcomes.filter(
        (o) => o.streamingAt !== undefined && o.streamingAt < faultAt,
      );
      const kinds = (list: typeof load.outcomes) =>
        Object.fromEntries(
          (['complete', 'stream_error', 'broken', 'hung', 'cancelled'] as const).map((k) => [
            k,
            list.filter((o) => o.kind === k).length,
          ]),
        );
      const figures = {
        scenario: 'local_share',
        setup_ms: Math.round(faultAt - startedAt),
        outage_ms: Math.round(healAt - faultAt),
        load_stopped_ms_after_heal: Math.round(stopAt - healAt),
        per_key: Object.fromEntries(
          Object.entries(excess).map(([id, e]) => [
            id,
            {
              peak: e.peak,
              ms_above_max: Math.round(e.msAbove),
              peak_from_heal: excessWithin(upstream.record(id).timeline, healAt, stopAt),
              ...(e.firstAbove !== undefined
                ? {
                    above_from_ms_after_fault: rel(e.firstAbove),
                    above_until_ms_after_fault: rel(e.lastAbove!),
                  }
                : {}),
            },
          ]),
        ),
        per_gateway: perGateway,
        streams_through_fault: kinds(throughFault),
        streams_begun_in_outage: kinds(streamedInOutage),
        outcomes: load.tally(),
        first_upstream_request_after_normal_from_ms: Math.round(
          Math.min(...all.filter((r) => r.receivedAt > normalFrom).map((r) => r.receivedAt)) - healAt,
        ),
        recovery_ms_after_load: recovery,
        readyz_after: readyAfter.map((p) => ({ status: p.status, reason: p.reason })),
      };
      console.log(`chaos local_share: ${JSON.stringify(figures)}`);

      const report = JSON.stringify({
        ...figures,
        odd: load.outcomes.filter((o) => !['complete', 'refused', 'cancelled'].includes(o.kind)).slice(0, 10),
      });
      // Within max per key, all along: no excess at all is allowed.
      for (const [id, e] of Object.entries(excess)) {
        expect.soft(e.peak, `peak of ${id} over max ${MAX}; ${report}`).toBeLessThanOrEqual(MAX);
        expect.soft(e.msAbove, `ms above max on ${id}`).toBe(0);
      }
      // The mode admits: requests reached the upstream while Redis was down.
      const inOutage = perGateway.reduce((n, g) => n + g.admitted_in_outage, 0);
      expect.soft(inOutage, `nothing admitted while Redis was down; ${report}`).toBeGreaterThan(0);
      for (const [i, g] of perGateway.entries()) {
        // Fail closed for a whole lease TTL, then never more than its share at once.
        expect.soft(g.admitted_in_first_ttl_after_1s, `gateway ${i} admitted in the first lease TTL`).toBe(0);
        for (const [id, peak] of Object.entries(g.peak_per_key_in_outage_after_ttl)) {
          expect
            .soft(peak, `gateway ${i} on ${id} above its share ${SHARE} while Redis was down`)
            .toBeLessThanOrEqual(SHARE);
        }
        // An instance admitting on its share stays ready, degraded.
        if (g.admitted_in_outage > 0) {
          expect
            .soft(g.readyz_in_outage.degraded, `gateway ${i}: no /readyz 200 "degraded" while Redis was down`)
            .toBeGreaterThan(0);
        }
      }
      // Normal admission resumes: under load, and on every gateway once the load is gone (ready, not degraded).
      expect
        .soft(recoveredUnderLoad, `nothing reached the upstream through Redis after it came back`)
        .toBe(true);
      for (const [i, ms] of recovery.entries()) {
        expect
          .soft(ms, `gateway ${i} admitted nothing within ${RECOVERY_DEADLINE_MS} ms`)
          .toBeGreaterThan(-1);
        expect.soft(readyAfter[i], `gateway ${i} /readyz after the recovery`).toMatchObject({ status: 200 });
        expect.soft(readyAfter[i]?.reason, `gateway ${i} still degraded after the recovery`).toBeUndefined();
      }
      // Every client got a clear answer.
      for (const kind of ['broken', 'hung', 'unexpected'] as const) {
        expect.soft(load.count(kind), `${kind} requests; ${report}`).toBe(0);
      }
      // The local slots handed back stay leases: each stream begun while Redis was down ran to its end.
      for (const o of streamedInOutage)
        expect.soft(o.kind, `a stream begun in the outage; ${report}`).toBe('complete');
      expect(throughFault.length, report).toBeGreaterThanOrEqual(MAX * CHANNELS.length);
      for (const o of throughFault) expect.soft(['complete', 'stream_error'], report).toContain(o.kind);
      expect(upstream.bad, report).toEqual([]);
    },
    TEST_MS,
  );
});

/** The peak of a [time, count] timeline within [from, to] (the count at `from` included). */
function excessWithin(timeline: ReadonlyArray<readonly [number, number]>, from: number, to: number): number {
  let peak = 0;
  let before = 0;
  for (const [at, current] of timeline) {
    if (at < from) before = current;
    else if (at <= to) peak = Math.max(peak, current);
  }
  return Math.max(peak, before);
}
