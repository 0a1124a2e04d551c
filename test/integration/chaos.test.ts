/**
 * Chaos: three `slotgate serve` processes share one private redis-server, with two channels of max 3 and 60
 * streaming clients whose streams outlive the fault, and the fault comes while the streams run:
 *
 * - restart: Redis is killed (SIGKILL) and started again at once on the same port, empty (no persistence);
 * - pause: `CLIENT PAUSE <lease TTL + 2 s> ALL`;
 * - partition: the one gateway that holds every slot reaches Redis through a TcpProxy, which cuts it off for longer
 *   than the lease TTL (holding its bytes both ways), then heals.
 *
 * The upstream counts in flight per channel key itself, with the time of every change. Each scenario prints the
 * peak and the time above max per key (the figures to compare across releases), then asserts them against the
 * bounds below, asserts that every client got an answer (a complete stream, a refusal, or a stream ended by an SSE
 * error event; never a broken or hung one), and that every gateway admits again after the fault.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import {
  CHANNELS,
  StreamingLoad,
  admitted,
  channelsFull,
  inFlightVia,
  startFleet,
  userAgent,
  waitFor,
  type Fleet,
} from '../helpers/chaos-fleet.js';
import { RedisServer } from '../helpers/redis-server.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { uniquePrefix } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';

// ---- The bounds: how far above max a key may go at the upstream, and for how long, per scenario.

interface Bound {
  /** Requests in flight above max_concurrency, at the peak. */
  peakExcess: number;
  /** Total time above max_concurrency, in ms. */
  msAbove: number;
}

/**
 * A restart loses every lease in Redis, but not one holder is cut off: each gateway can learn of the restart and
 * put its live leases back before anybody is admitted anew (and abort by its own clock those it cannot put back in
 * time). Nothing physical forces an overlap, so none is allowed.
 */
const RESTART_BOUND: Bound = { peakExcess: 0, msAbove: 0 };

/**
 * A lease's expiry in Redis is never earlier than its holder's own reckoning (the last renewal it sent plus the TTL),
 * and Redis admits nobody until the pause ends, 2 s after every lease it held has expired: a holder that aborts its
 * stream when its lease runs out by its own clock is 2 s clear of any new admission. None is allowed.
 */
const PAUSE_BOUND: Bound = { peakExcess: 0, msAbove: 0 };

/**
 * The cut-off gateway stops its streams by its own clock while the others learn from Redis's clock that its leases
 * are gone: two processes, no message between them. Which the upstream sees first, the abort or a new request
 * through another gateway, also depends on when each process gets the CPU (timer lateness of a busy 2-core runner)
 * and on the upstream reading two sockets in one turn. So an overlap is allowed, but only of the cut-off gateway's
 * own leases (at most max per key) and only briefly: 500 ms is a tenth of the lease TTL and far above the lag of a
 * healthy event loop; a gateway that ignores its own clock (the defect) overlaps for seconds.
 */
const PARTITION_BOUND: Bound = { peakExcess: 3, msAbove: 500 };

/**
 * Recovery, generous for a busy runner: under the same load, a new request reaches the upstream within this long
 * after the fault ends (the streams that outlived the fault may hold every slot for most of a stream's length); and
 * once the load is gone, each gateway admits a request within this long.
 */
const RECOVERY_DEADLINE_MS = 30_000;

// ---- The scenario parameters.

const MAX = 3;
const GATEWAYS = 3;
const CLIENTS_PER_GATEWAY = 20;
/** The smallest `lease_ttl_ms` the settings accept. */
const LEASE_TTL_MS = 5_000;
const CHUNKS = 40;
const CHUNK_DELAY_MS = 250;
/** Each stream lasts about this long: longer than any fault below, so streams run through it. */
const STREAM_MS = CHUNKS * CHUNK_DELAY_MS;
/** The fault comes this long after both channels are full. */
const FAULT_AFTER_FULL_MS = 1_000;
const PAUSE_MS = LEASE_TTL_MS + 2_000;
const PARTITION_MS = LEASE_TTL_MS + 3_000;
const REDIS_TIMEOUT_MS = 500;
/**
 * The defaults but for the lease TTL. The wait time-out stays above the safety poll (2.5–5 s with the defaults): a
 * lease that runs out unseen is only swept by an acquire, a release or a poll, and waiters that always give up before
 * their first poll keep a full queue in front of every acquire.
 */
const WAIT_TIMEOUT_MS = 5_000;
const SETTINGS = { lease_ttl_ms: LEASE_TTL_MS, wait_timeout_ms: WAIT_TIMEOUT_MS };
/** A client request not settled within this is `hung`. */
const REQUEST_DEADLINE_MS = WAIT_TIMEOUT_MS + STREAM_MS + 20_000;
const RETRY_DELAY_MS = 150;
/** Each scenario's own bound: room for the deadlines above to report a failure before the test times out. */
const TEST_MS = 180_000;

const cleanups = useCleanups();

async function privateRedis(): Promise<RedisServer> {
  const server = await RedisServer.start();
  cleanups.push(() => server.stop());
  return server;
}

async function fleetOn(redisUrls: string[]): Promise<Fleet> {
  const fleet = await startFleet({
    redisUrls,
    prefix: uniquePrefix('chaos'),
    maxConcurrency: MAX,
    settings: SETTINGS,
    redisTimeoutMs: REDIS_TIMEOUT_MS,
    chunks: CHUNKS,
    chunkDelayMs: CHUNK_DELAY_MS,
  });
  cleanups.push(() => fleet.close());
  // One request through each gateway first, so none is still connecting when the load starts.
  for (const gw of fleet.gateways) expect(await admitted(gw.url, 10_000)).toBeGreaterThanOrEqual(0);
  return fleet;
}

function loadOn(): StreamingLoad {
  const load = new StreamingLoad({
    chunks: CHUNKS,
    deadlineMs: REQUEST_DEADLINE_MS,
    retryDelayMs: RETRY_DELAY_MS,
  });
  cleanups.push(() => load.abortAll());
  return load;
}

const bothFull = (fleet: Fleet) => channelsFull(fleet.upstream, MAX);

/** Starts the clients of every gateway; resolves FAULT_AFTER_FULL_MS after both channels are full. */
async function loadUntilFull(fleet: Fleet): Promise<StreamingLoad> {
  const load = loadOn();
  for (const [i, gw] of fleet.gateways.entries()) load.start(gw, i, CLIENTS_PER_GATEWAY);
  await waitFor(() => bothFull(fleet), 15_000, 'both channels full');
  await sleep(FAULT_AFTER_FULL_MS);
  expect(bothFull(fleet), 'both channels are still full when the fault comes').toBe(true);
  return load;
}

interface Times {
  faultAt: number;
  healAt: number;
}

/**
 * Lets the streams run until every stream begun before the fault has ended, the gateways have had half a lease TTL
 * (a renewal and more) since the heal, and a request has reached the upstream since; then stops the load (the streams
 * begun since the fault and the requests begun since the heal are cancelled, the others end by themselves), prints the figures and asserts the bound,
 * the clients' outcomes and recovery.
 */
async function finish(
  name: string,
  fleet: Fleet,
  load: StreamingLoad,
  times: Times,
  bound: Bound,
): Promise<void> {
  const { faultAt, healAt } = times;
  const { upstream } = fleet;
  const admittedAfterHeal = () => upstream.all().some((r) => r.receivedAt > healAt);
  const observeUntil = Math.max(faultAt + STREAM_MS, healAt + LEASE_TTL_MS / 2) + 1_000;
  await sleep(Math.max(0, observeUntil - performance.now()));
  while (!admittedAfterHeal() && performance.now() < healAt + RECOVERY_DEADLINE_MS) await sleep(100);
  const recoveredUnderLoad = admittedAfterHeal();
  // The excess is measured up to here: the stop's cancellations free slots at once, and the upstream may read the
  // next request before the close of a cancelled one (two sockets in one turn). A 1 ms peak of 4 right at the stop
  // was seen once on a busy runner (both chaos files at once on 2 cores).
  const stopAt = performance.now();
  await load.stop({ streamsFrom: faultAt, requestsFrom: healAt });
  // The streams that were running when the fault came: each must end whole or with an error event.
  const throughFault = load.outcomes.filter((o) => o.streamingAt !== undefined && o.streamingAt < faultAt);

  const excess = Object.fromEntries(CHANNELS.map((id) => [id, upstream.excess(id, MAX, stopAt)]));
  // When each gateway's first request after the fault reached the upstream, in ms after the heal.
  const firstAfterHeal = fleet.gateways.map((_, i) => {
    const first = upstream
      .all()
      .filter((r) => r.headers['user-agent'] === userAgent(i) && r.receivedAt > healAt)
      .reduce((min, r) => Math.min(min, r.receivedAt), Infinity);
    return Number.isFinite(first) ? Math.round(first - healAt) : null;
  });
  const recovery: number[] = [];
  for (const gw of fleet.gateways) recovery.push(Math.round(await admitted(gw.url, RECOVERY_DEADLINE_MS)));

  const figures = {
    scenario: name,
    fault_ms: Math.round(healAt - faultAt),
    per_key: Object.fromEntries(
      Object.entries(excess).map(([id, e]) => [
        id,
        {
          peak: e.peak,
          ms_above_max: Math.round(e.msAbove),
          ...(e.firstAbove !== undefined
            ? {
                above_from_ms_after_fault: Math.round(e.firstAbove - faultAt),
                above_until_ms_after_fault: Math.round(e.lastAbove! - faultAt),
              }
            : {}),
        },
      ]),
    ),
    outcomes: load.tally(),
    streams_through_fault: Object.fromEntries(
      (['complete', 'stream_error', 'broken', 'hung'] as const).map((k) => [
        k,
        throughFault.filter((o) => o.kind === k).length,
      ]),
    ),
    first_upstream_request_after_heal_ms: firstAfterHeal,
    recovery_ms_after_load: recovery,
  };
  console.log(`chaos ${name}: ${JSON.stringify(figures)}`);

  const report = JSON.stringify({
    ...figures,
    odd: load.outcomes.filter((o) => !['complete', 'refused', 'cancelled'].includes(o.kind)).slice(0, 10),
  });
  for (const [id, e] of Object.entries(excess)) {
    expect
      .soft(e.peak, `${name}: peak of ${id} over max ${MAX} + ${bound.peakExcess}`)
      .toBeLessThanOrEqual(MAX + bound.peakExcess);
    expect.soft(e.msAbove, `${name}: ms above max on ${id}`).toBeLessThanOrEqual(bound.msAbove);
  }
  // Every client got a clear answer: a stream the gateway ended early says so in an SSE error event.
  for (const kind of ['broken', 'hung', 'unexpected'] as const) {
    expect.soft(load.count(kind), `${name}: ${kind} requests; ${report}`).toBe(0);
  }
  expect
    .soft(recoveredUnderLoad, `${name}: nothing reached the upstream after the fault, under load`)
    .toBe(true);
  for (const [i, ms] of recovery.entries()) {
    expect
      .soft(ms, `${name}: gateway ${i} admitted nothing within ${RECOVERY_DEADLINE_MS} ms`)
      .toBeGreaterThan(-1);
  }
  // The fault came while streams ran: at least every slot's stream was running then (other streams that were on the
  // way may count too), and each ended whole or with an error event.
  expect(throughFault.length, report).toBeGreaterThanOrEqual(MAX * CHANNELS.length);
  for (const o of throughFault) expect.soft(['complete', 'stream_error'], report).toContain(o.kind);
  expect(upstream.bad, report).toEqual([]);
}

describe('chaos: the upstream never sees more than max per key while Redis or the network fails', () => {
  it(
    'Redis killed and restarted empty while streams run',
    async () => {
      const redis = await privateRedis();
      const fleet = await fleetOn(Array.from({ length: GATEWAYS }, () => redis.url));
      const load = await loadUntilFull(fleet);

      const faultAt = performance.now();
      await redis.restart(); // SIGKILL, then a new empty server on the same port
      const healAt = performance.now();
      await finish('restart', fleet, load, { faultAt, healAt }, RESTART_BOUND);
    },
    TEST_MS,
  );

  it(
    `Redis paused (CLIENT PAUSE ${PAUSE_MS} ALL) past the lease TTL while streams run`,
    async () => {
      const redis = await privateRedis();
      const fleet = await fleetOn(Array.from({ length: GATEWAYS }, () => redis.url));
      const load = await loadUntilFull(fleet);

      const admin = new Redis(redis.url, { maxRetriesPerRequest: 0 });
      admin.on('error', () => {});
      cleanups.push(() => admin.disconnect());
      const faultAt = performance.now();
      expect(await admin.call('CLIENT', 'PAUSE', String(PAUSE_MS), 'ALL')).toBe('OK');
      const healAt = faultAt + PAUSE_MS;
      await finish('pause', fleet, load, { faultAt, healAt }, PAUSE_BOUND);
    },
    TEST_MS,
  );

  it(
    'one gateway holding every slot cut off from Redis past the lease TTL, then healed',
    async () => {
      const redis = await privateRedis();
      const proxy = new TcpProxy(redis.port);
      const proxyPort = await proxy.listen();
      cleanups.push(() => proxy.close());
      // Gateway 0 reaches Redis through the proxy, the others directly.
      const urls = Array.from({ length: GATEWAYS }, (_, i) =>
        i === 0 ? `redis://127.0.0.1:${proxyPort}` : redis.url,
      );
      const fleet = await fleetOn(urls);
      const load = loadOn();
      // Gateway 0's clients first, until it holds every slot; then the others' clients, who find both channels full.
      load.start(fleet.gateways[0]!, 0, CLIENTS_PER_GATEWAY);
      await waitFor(() => bothFull(fleet), 15_000, 'both channels full through gateway 0');
      expect(inFlightVia(fleet.upstream, 0), 'gateway 0 holds every slot').toBe(MAX * CHANNELS.length);
      for (let i = 1; i < GATEWAYS; i++) load.start(fleet.gateways[i]!, i, CLIENTS_PER_GATEWAY);
      await sleep(FAULT_AFTER_FULL_MS);
      expect(inFlightVia(fleet.upstream, 0), 'gateway 0 still holds every slot when it is cut off').toBe(
        MAX * CHANNELS.length,
      );

      const faultAt = performance.now();
      proxy.cut();
      await sleep(PARTITION_MS);
      proxy.heal();
      const healAt = performance.now();
      await finish('partition', fleet, load, { faultAt, healAt }, PARTITION_BOUND);
    },
    TEST_MS,
  );
});
