/**
 * The load of one instance in a fleet run, recording every request (fairness.ts's RequestRecord):
 *
 * - open loop: each request of the instance's share of the trace arrives at its time whether or not earlier ones
 *   are done (arrivals never wait for completions), asks for a slot, holds it for the trace's hold, gives it back;
 *   above `maxInFlight` requests waiting or holding, an arrival is shed by the benchmark itself (and counted);
 * - closed loop: `workers` loops of acquire → hold → release (5 ms back-off after a refusal), as in load.ts;
 * - clients loop: the same, per client, each worker with its own seeded hold sequence, every request naming its
 *   client to the contender; its holds are also kept per client, for the per-client peak.
 *
 * Times are on one clock for all processes of the machine (performance.timeOrigin + performance.now()); each hold
 * is also kept as an interval on the monotonic clock for the cross-process oversell sweep (load.ts).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { wallNow } from './children.js';
import { holdStream, type ClientRun } from './clients.js';
import type { RequestRecord } from './fairness.js';
import { Refused, type Admitted, type BenchChannel, type BenchClient, type Session } from './types.js';

const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);

export interface FleetLoadResult {
  records: RequestRecord[];
  /** channel → flat [start, end, …] µs on the monotonic clock. */
  intervals: Record<string, number[]>;
  /** The clients loop: client → flat [start, end, …] µs on the monotonic clock (the same holds, by client). */
  clientIntervals?: Record<string, number[]>;
  /** Arrivals shed because `maxInFlight` requests were already in flight. */
  capHits: number;
  /** How late arrivals were dispatched after their trace time, ms (sorted; a busy machine shows here). */
  lags: number[];
}

/** Runs one request (for `client` when given): acquire, hold, release, each step timed into a record. */
function requester(instance: number, session: Session, candidates: readonly BenchChannel[]) {
  const intervals: Record<string, number[]> = {};
  const clientIntervals: Record<string, number[]> = {};
  async function request(
    arrival: number,
    hold: number,
    client?: BenchClient,
    dispatched?: number,
  ): Promise<RequestRecord> {
    const whose = {
      ...(client ? { client: client.id } : {}),
      ...(dispatched !== undefined ? { dispatched } : {}),
    };
    let admitted: Admitted;
    try {
      admitted = await session.acquire(candidates, client);
    } catch (err) {
      const reason =
        err instanceof Refused
          ? err.reason
          : `error: ${err instanceof Error ? err.message.slice(0, 60) : String(err)}`;
      return { instance, ...whose, arrival, outcome: wallNow(), reason, hold };
    }
    const outcome = wallNow();
    const start = monotonicUs();
    if (hold > 0) await sleep(hold);
    const release = wallNow();
    const end = monotonicUs();
    (intervals[admitted.channel] ??= []).push(start, end);
    if (client) (clientIntervals[client.id] ??= []).push(start, end);
    await admitted.release().catch(() => {
      // the slot expires with its lease; the record already says when the holder let go
    });
    return { instance, ...whose, arrival, outcome, channel: admitted.channel, hold, release };
  }
  return { request, intervals, clientIntervals };
}

export async function runOpenLoop(o: {
  instance: number;
  session: Session;
  candidates: readonly BenchChannel[];
  /** Wall time of the trace's 0. */
  startAt: number;
  /** This instance's arrivals (ms after startAt, ascending) and their holds. */
  arrivals: readonly number[];
  holds: readonly number[];
  maxInFlight: number;
}): Promise<FleetLoadResult> {
  const { request, intervals } = requester(o.instance, o.session, o.candidates);
  const records: RequestRecord[] = [];
  const lags: number[] = [];
  const running: Promise<void>[] = [];
  let inFlight = 0;
  let capHits = 0;
  let next = 0;
  const dispatch = (k: number) => {
    const arrival = o.startAt + o.arrivals[k]!;
    const dispatched = wallNow();
    lags.push(dispatched - arrival);
    if (inFlight >= o.maxInFlight) {
      capHits++;
      records.push({
        instance: o.instance,
        arrival,
        outcome: wallNow(),
        reason: 'in_flight_cap',
        hold: 0,
        dispatched,
      });
      return;
    }
    inFlight++;
    running.push(
      request(arrival, o.holds[k]!, undefined, dispatched).then((r) => {
        inFlight--;
        records.push(r);
      }),
    );
  };
  await new Promise<void>((done) => {
    const tick = () => {
      const now = wallNow();
      while (next < o.arrivals.length && o.startAt + o.arrivals[next]! <= now) dispatch(next++);
      if (next >= o.arrivals.length) return done();
      setTimeout(tick, Math.max(0, o.startAt + o.arrivals[next]! - wallNow()));
    };
    tick();
  });
  await Promise.all(running);
  return { records, intervals, capHits, lags: lags.sort((a, b) => a - b) };
}

export async function runClosedLoop(o: {
  instance: number;
  session: Session;
  candidates: readonly BenchChannel[];
  workers: number;
  holdMs: number;
  startAt: number;
  endAt: number;
  backoffMs?: number;
}): Promise<FleetLoadResult> {
  const { request, intervals } = requester(o.instance, o.session, o.candidates);
  const records: RequestRecord[] = [];
  const wait = o.startAt - wallNow();
  if (wait > 0) await sleep(wait);
  const worker = async () => {
    while (wallNow() < o.endAt) {
      const r = await request(wallNow(), o.holdMs);
      records.push(r);
      if (r.channel === undefined) await sleep(o.backoffMs ?? 5);
    }
  };
  await Promise.all(Array.from({ length: o.workers }, worker));
  return { records, intervals, capHits: 0, lags: [] };
}

/**
 * The clients loop: for each client, one closed-loop worker per hold seed, every request naming the client. A
 * worker's k-th admitted request holds the k-th draw of its stream (a refused one draws nothing), as in the ideal
 * schedulers (ideal-clients.ts).
 */
export async function runClientsLoop(o: {
  instance: number;
  session: Session;
  candidates: readonly BenchChannel[];
  clients: readonly ClientRun[];
  hold: Parameters<typeof holdStream>[1];
  startAt: number;
  endAt: number;
  backoffMs?: number;
}): Promise<FleetLoadResult> {
  const { request, intervals, clientIntervals } = requester(o.instance, o.session, o.candidates);
  const records: RequestRecord[] = [];
  const wait = o.startAt - wallNow();
  if (wait > 0) await sleep(wait);
  const worker = async (client: BenchClient, seed: number) => {
    const holds = holdStream(seed, o.hold);
    let hold = holds();
    while (wallNow() < o.endAt) {
      const r = await request(wallNow(), hold, client);
      records.push(r);
      if (r.channel === undefined) await sleep(o.backoffMs ?? 5);
      else hold = holds();
    }
  };
  await Promise.all(o.clients.flatMap((c) => c.seeds.map((seed) => worker(c.client, seed))));
  return { records, intervals, clientIntervals, capHits: 0, lags: [] };
}
