/**
 * One process of the fleet simulator (forked by fleetsim.ts): several admission engines, each with its own instance
 * id, RedisStore and connection, as separate gateway instances would have. It serves cell after cell:
 *
 *   parent → { type: 'setup', … }  the engines of this cell, connected and warmed up → { type: 'ready' }
 *   parent → { type: 'run', … }    every engine's seeded open-loop arrivals from startAt → { type: 'result', … }
 *   parent → { type: 'close' }     engines and stores closed → { type: 'closed' }
 *
 * The engines' own counters (commands by purpose, first tries, load-view rounds) and this process's CPU are taken at
 * startAt and at startAt + durationMs, the window the parent takes its INFO snapshots over; requests still waiting
 * or holding at its end finish before the result goes back, so every request has a record.
 */
import type { Cluster, Redis } from 'ioredis';
import { CapacityError, RedisStore, createAdmission, type Admission, type Candidate } from 'slotgate';
import { sendToParent as send, serveParent, sleepUntil, wallNow } from './children.js';
import { engineArrivals } from './fleetsim-shape.js';
import type { HoldShape } from './openloop.js';
import { benchClient } from './redis.js';

export interface SimSetup {
  type: 'setup';
  redisUrl: string;
  namespace: string;
  channels: number;
  max: number;
  /** Channel indices of each candidate set. */
  sets: number[][];
  /** The instance numbers this process hosts. */
  engines: number[];
  summary: boolean;
  waitTimeoutMs: number;
}

export interface SimRun {
  type: 'run';
  startAt: number;
  durationMs: number;
  seed: number;
  ratePerS: number;
  hold: HoldShape;
}

/** One request: times on the machine-wide wall clock (children.ts); channel index, or why it was refused. */
export interface SimRecord {
  instance: number;
  arrival: number;
  outcome: number;
  channel?: number;
  reason?: string;
}

/** An engine's counters (stats()) that the simulator reads, as deltas over the window. */
export interface EngineCounters {
  /** Store commands of every purpose. */
  commands: number;
  loadRead: number;
  firstTries: number;
  firstTriesFull: number;
  /** Load-view store reads (rounds), and summary exchanges made only to put in this instance's counts. */
  fetches: number;
  reports: number;
}

export interface SimResult {
  type: 'result';
  records: SimRecord[];
  /** channel index → flat [start, end, …] µs on the monotonic clock (the cross-process oversell sweep). */
  intervals: Record<string, number[]>;
  /** Counter deltas over the window, per engine (in `engines` order). */
  counters: EngineCounters[];
  /** This process's CPU over the window, ms. */
  cpuMs: number;
  /** How late arrivals were dispatched after their time, ms: p99 and max. */
  lagP99Ms: number;
  lagMaxMs: number;
}

interface Engine {
  instance: number;
  client: Redis | Cluster;
  store: RedisStore;
  admission: Admission;
}

const monotonicUs = () => Number(process.hrtime.bigint() / 1000n);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let engines: Engine[] = [];
let sets: Candidate[][] = [];

function countersOf(e: Engine): EngineCounters {
  const s = e.admission.stats();
  return {
    commands: Object.values(s.commands).reduce((a, b) => a + b, 0),
    loadRead: s.commands.load_read,
    firstTries: s.firstTries,
    firstTriesFull: s.firstTriesFull,
    fetches: s.loadView.fetches,
    reports: s.loadView.reports,
  };
}

const minus = (a: EngineCounters, b: EngineCounters): EngineCounters => ({
  commands: a.commands - b.commands,
  loadRead: a.loadRead - b.loadRead,
  firstTries: a.firstTries - b.firstTries,
  firstTriesFull: a.firstTriesFull - b.firstTriesFull,
  fetches: a.fetches - b.fetches,
  reports: a.reports - b.reports,
});

async function setup(m: SimSetup): Promise<void> {
  // candidate objects built once per channel, as a gateway's registry does
  const channels: Candidate[] = Array.from({ length: m.channels }, (_, i) => ({
    id: `c${i}`,
    maxConcurrency: m.max,
  }));
  sets = m.sets.map((set) => set.map((i) => channels[i]!));
  engines = m.engines.map((instance) => {
    const client = benchClient(m.redisUrl);
    client.on('error', () => {}); // surfaced per command
    const store = new RedisStore({ client, prefix: m.namespace });
    const admission = createAdmission({
      store,
      instanceId: `sim${instance}`,
      settings: { load_summary_enabled: m.summary, wait_timeout_ms: m.waitTimeoutMs },
    });
    return { instance, client, store, admission };
  });
  // connections, scripts and JIT, unmeasured: one acquire and release per engine
  await Promise.all(
    engines.map(async (e) => {
      const ticket = await e.admission.acquire({ candidates: sets[e.instance % sets.length]! });
      await ticket.release();
    }),
  );
}

async function run(m: SimRun): Promise<SimResult> {
  const arrivals = engines
    .flatMap((e, k) =>
      engineArrivals({
        seed: m.seed,
        instance: e.instance,
        ratePerS: m.ratePerS,
        durationMs: m.durationMs,
        sets: sets.length,
        hold: m.hold,
      }).map((a) => ({ ...a, engine: k })),
    )
    .sort((a, b) => a.at - b.at);
  const records: SimRecord[] = [];
  const intervals: Record<string, number[]> = {};
  const lags: number[] = [];
  const running: Promise<void>[] = [];

  const request = async (e: Engine, arrival: number, set: number, hold: number) => {
    let ticket;
    try {
      ticket = await e.admission.acquire({ candidates: sets[set]! });
    } catch (err) {
      const reason =
        err instanceof CapacityError
          ? err.reason
          : `error: ${err instanceof Error ? err.message.slice(0, 60) : String(err)}`;
      records.push({ instance: e.instance, arrival, outcome: wallNow(), reason });
      return;
    }
    const outcome = wallNow();
    const start = monotonicUs();
    await sleep(hold);
    (intervals[ticket.channel.id.slice(1)] ??= []).push(start, monotonicUs());
    await ticket.release().catch(() => {
      // the slot expires with its lease; the interval already says when the holder let go
    });
    records.push({ instance: e.instance, arrival, outcome, channel: Number(ticket.channel.id.slice(1)) });
  };

  // the window's counters, taken on timers at its two ends (the parent's INFO snapshots are taken then too)
  let before: EngineCounters[] = [];
  let after: EngineCounters[] = [];
  let cpu = process.cpuUsage();
  const windowStart = sleepUntil(m.startAt).then(() => {
    before = engines.map(countersOf);
    cpu = process.cpuUsage();
  });
  const windowEnd = sleepUntil(m.startAt + m.durationMs).then(() => {
    after = engines.map(countersOf);
    cpu = process.cpuUsage(cpu);
  });

  await windowStart;
  let next = 0;
  await new Promise<void>((done) => {
    const tick = () => {
      const now = wallNow();
      while (next < arrivals.length && m.startAt + arrivals[next]!.at <= now) {
        const a = arrivals[next++]!;
        const arrival = m.startAt + a.at;
        lags.push(now - arrival);
        running.push(request(engines[a.engine]!, arrival, a.set, a.hold));
      }
      if (next >= arrivals.length) return done();
      setTimeout(tick, Math.max(0, m.startAt + arrivals[next]!.at - wallNow()));
    };
    tick();
  });
  await windowEnd;
  await Promise.all(running);
  lags.sort((a, b) => a - b);
  return {
    type: 'result',
    records,
    intervals,
    counters: after.map((a, k) => minus(a, before[k]!)),
    cpuMs: (cpu.user + cpu.system) / 1000,
    lagP99Ms: lags.length ? lags[Math.min(lags.length - 1, Math.ceil(0.99 * lags.length) - 1)]! : 0,
    lagMaxMs: lags.at(-1) ?? 0,
  };
}

async function close(): Promise<void> {
  await Promise.all(
    engines.map(async (e) => {
      await e.admission.close();
      await e.store.close();
      await e.client.quit().catch(() => e.client.disconnect());
    }),
  );
  engines = [];
}

serveParent(async (message: SimSetup | SimRun | { type: 'close' }) => {
  if (message.type === 'setup') {
    await setup(message);
    await send({ type: 'ready' });
  } else if (message.type === 'run') {
    await send(await run(message));
  } else {
    await close();
    await send({ type: 'closed' });
  }
});
