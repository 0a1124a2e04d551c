/**
 * One process of a multi-instance run, kept in a pool (pool.ts): a contender session per instance it hosts. Every
 * request is recorded and every hold kept on the monotonic clock, so the parent can sweep all processes for oversell.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { sendToParent as send, serveParent, sleepUntil, wallNow } from './children.js';
import { holdStream } from './clients.js';
import { loadContender } from './contenders/index.js';
import type { HoldShape } from './draws.js';
import { monotonicUs, percentile, runLoad, type LoadResult } from './load.js';
import type { RequestRecord } from './fairness.js';
import { clientMeter, RoundTripCounter, type MeterFigures } from './redis.js';
import { Refused, type Admitted, type BenchChannel, type BenchClient, type Session } from './types.js';

export interface WorkerSetup {
  type: 'setup';
  contender: string;
  redisUrl: string;
  namespace: string;
  channels: BenchChannel[];
  /** Candidate sets; an arrival names one by index, the closed loops use the first. */
  sets: BenchChannel[][];
  /** The instances this process hosts, one session each. */
  instances: number[];
  waitTimeoutMs?: number;
  maxWaiting?: number;
  /** An unmeasured closed loop on every session first: connections, scripts, JIT. */
  warmup: { ms: number; acquirers: number; holdMs: number };
}

/** An open-loop arrival: ms after startAt, its hold, the session (index in `instances`) and candidate set. */
export interface Arrival {
  at: number;
  hold: number;
  session: number;
  set: number;
}

/** A closed-loop worker: a fixed hold, or a seeded hold stream (clients2) with a client named to the contender. */
export interface ClosedWorker {
  session: number;
  holdMs?: number;
  seed?: number;
  client?: BenchClient;
}

export type WorkerRun = {
  type: 'run';
  startAt: number;
  /** The process figures' window ends here (fleetsim); undefined: when the load is done. */
  windowEndAt?: number;
} & (
  | { mode: 'load'; acquirers: number; holdMs: number; durationMs: number }
  | { mode: 'open'; arrivals: Arrival[]; maxInFlight?: number }
  | { mode: 'closed'; endAt: number; workers: ClosedWorker[]; hold?: HoldShape }
);

export interface WorkerResult extends MeterFigures {
  type: 'result';
  records: RequestRecord[];
  /** channel → flat [start, end, …] µs on the monotonic clock; the same holds by client. */
  intervals: Record<string, number[]>;
  clientIntervals: Record<string, number[]>;
  /** Mode 'load': what runLoad measured. */
  load?: LoadResult;
  capHits: number;
  /** How late arrivals were dispatched after their time, and how late the event loop ran a 1 ms timer, ms. */
  lagP99Ms: number;
  lagMaxMs: number;
  loopDelay: { p99Ms: number; maxMs: number };
}

const counter = new RoundTripCounter();
let setup: WorkerSetup | undefined;
let sessions: Session[] = [];

async function onSetup(m: WorkerSetup): Promise<void> {
  setup = m;
  const contender = loadContender(m.contender);
  sessions = await Promise.all(
    m.instances.map(() =>
      contender.setup({
        channels: m.channels,
        namespace: m.namespace,
        client: () => counter.client(m.redisUrl),
        waitTimeoutMs: m.waitTimeoutMs,
        maxWaiting: m.maxWaiting,
      }),
    ),
  );
  if (m.warmup.ms > 0) {
    const { ms: durationMs, acquirers, holdMs } = m.warmup;
    await Promise.all(
      sessions.map((session) => runLoad({ session, candidateSets: m.sets, acquirers, holdMs, durationMs })),
    );
  }
}

async function onRun(m: WorkerRun): Promise<WorkerResult> {
  const { sets, instances } = setup!;
  const records: RequestRecord[] = [];
  const intervals: Record<string, number[]> = {};
  const clientIntervals: Record<string, number[]> = {};
  const lags: number[] = [];
  let capHits = 0;
  let load: LoadResult | undefined;

  const request = async (
    k: number,
    arrival: number,
    hold: number,
    set: readonly BenchChannel[],
    client?: BenchClient,
    dispatched?: number,
  ): Promise<RequestRecord> => {
    const base = { instance: instances[k]!, arrival, client: client?.id, dispatched };
    let admitted: Admitted;
    try {
      admitted = await sessions[k]!.acquire(set, client);
    } catch (err) {
      const reason =
        err instanceof Refused
          ? err.reason
          : `error: ${err instanceof Error ? err.message.slice(0, 60) : String(err)}`;
      return { ...base, outcome: wallNow(), reason };
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
    return { ...base, outcome, channel: admitted.channel, release };
  };

  const meter = clientMeter(counter, sessions);
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  let windowEnd: Promise<void> | undefined;
  if (m.mode !== 'load') {
    await sleepUntil(m.startAt);
    meter.start();
    if (m.windowEndAt !== undefined) windowEnd = sleepUntil(m.windowEndAt).then(() => meter.end());
  }
  if (m.mode === 'load') {
    load = await runLoad({
      session: sessions[0]!,
      candidateSets: sets,
      acquirers: m.acquirers,
      holdMs: m.holdMs,
      durationMs: m.durationMs,
      recordIntervals: true,
      startAt: m.startAt,
      onWindowStart: () => meter.start(),
      onWindowEnd: () => meter.end(),
    });
    Object.assign(intervals, load.intervals);
    delete load.intervals;
  } else if (m.mode === 'open') {
    // arrivals never wait for completions; above maxInFlight the bench sheds them itself
    const running: Promise<void>[] = [];
    let inFlight = 0;
    let next = 0;
    await new Promise<void>((done) => {
      const tick = () => {
        const now = wallNow();
        while (next < m.arrivals.length && m.startAt + m.arrivals[next]!.at <= now) {
          const a = m.arrivals[next++]!;
          const arrival = m.startAt + a.at;
          const dispatched = wallNow();
          lags.push(dispatched - arrival);
          if (inFlight >= (m.maxInFlight ?? Infinity)) {
            capHits++;
            const shed = { arrival, outcome: wallNow(), reason: 'in_flight_cap', dispatched };
            records.push({ instance: instances[a.session]!, ...shed });
            continue;
          }
          inFlight++;
          running.push(
            request(a.session, arrival, a.hold, sets[a.set]!, undefined, dispatched).then((r) => {
              inFlight--;
              records.push(r);
            }),
          );
        }
        if (next >= m.arrivals.length) return done();
        setTimeout(tick, Math.max(0, m.startAt + m.arrivals[next]!.at - wallNow()));
      };
      tick();
    });
    await Promise.all(running);
  } else {
    // a worker's k-th admitted request holds the k-th draw of its stream (a refused one draws nothing)
    const loop = async (w: ClosedWorker) => {
      const holds = w.seed !== undefined ? holdStream(w.seed, m.hold!) : () => w.holdMs ?? 0;
      let hold = holds();
      while (wallNow() < m.endAt) {
        const r = await request(w.session, wallNow(), hold, sets[0]!, w.client);
        records.push(r);
        if (r.channel === undefined) await sleep(5);
        else hold = holds();
      }
    };
    await Promise.all(m.workers.map(loop));
  }
  if (windowEnd) await windowEnd;
  else if (m.mode !== 'load') meter.end();
  delay.disable();
  lags.sort((a, b) => a - b);
  // the histogram holds whole intervals between ticks: the 1 ms resolution is taken off, leaving how late each was
  const late = (ns: number) => Math.max(0, ns / 1e6 - 1);
  return {
    type: 'result',
    records,
    intervals,
    clientIntervals,
    load,
    capHits,
    lagP99Ms: percentile(lags, 0.99) || 0,
    lagMaxMs: lags.at(-1) ?? 0,
    loopDelay: { p99Ms: late(delay.percentile(99)), maxMs: late(delay.max) },
    ...meter.figures(),
  };
}

serveParent(async (m: WorkerSetup | WorkerRun | { type: 'close' }) => {
  if (m.type === 'setup') {
    await onSetup(m);
    await send({ type: 'ready' });
  } else if (m.type === 'run') {
    await send(await onRun(m));
  } else {
    await Promise.all(sessions.map((s) => s.close()));
    sessions = [];
    await send({ type: 'closed' });
  }
});
