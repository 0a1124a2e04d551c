/**
 * clients2: closed-loop workers of every client on each instance. Each worker draws its holds from its own seeded
 * stream, so its k-th admitted request holds the same time in every run and in the ideal schedulers (ideal-clients.ts).
 */
import { logNormalMs, seededRandom, seedOf, type HoldShape } from './draws.js';
import { sortedWaits, waitsOf, type RequestRecord } from './fairness.js';
import { idealClosedLoop, type ClientPolicy, type LoopWorker } from './ideal-clients.js';
import { highestOverlap } from './load.js';
import type { ClientsScenario, ClientVariant } from './openloop.js';
import type { BenchClient, Contender } from './types.js';

/** All the variants on a contender that knows clients; on the others the unnamed one (the rest would be the same). */
export const variantsFor = (s: ClientsScenario, contender: Pick<Contender, 'clients'>): ClientVariant[] =>
  s.variants.filter((v) => contender.clients || (v.unnamed && Object.keys(v.limits).length === 0));

/** The clients as the variant names them to the contender (one object per client, reused by every request). */
export const benchClients = (s: ClientsScenario, variant: ClientVariant): BenchClient[] =>
  s.clients.map((c) => ({
    id: c.id,
    weight: c.weight,
    maxConcurrency: variant.limits[c.id],
    unnamed: variant.unnamed,
  }));

/** The holds of one worker, in order: its k-th admitted request holds the k-th. */
export function holdStream(seed: number, hold: HoldShape): () => number {
  const random = seededRandom(seed);
  return () => logNormalMs(random, hold);
}

const workerSeed = (s: ClientsScenario, client: string, instance: number, worker: number) =>
  seedOf(s.seed, client, instance, worker);

/** What instance `instance` runs: per client, the client as named to the contender and each worker's hold seed. */
export function clientRunsOf(s: ClientsScenario, variant: ClientVariant, instance: number) {
  const named = benchClients(s, variant);
  return s.clients.map((c, k) => ({
    client: named[k]!,
    seeds: Array.from({ length: c.workersPerInstance }, (_, w) => workerSeed(s, c.id, instance, w)),
  }));
}

/** Every worker of every instance, with fresh hold streams (the same sequences as the instances draw). */
export function loopWorkers(s: ClientsScenario, instances: number): LoopWorker[] {
  const workers: LoopWorker[] = [];
  for (let i = 0; i < instances; i++) {
    for (const c of s.clients) {
      for (let w = 0; w < c.workersPerInstance; w++)
        workers.push({ client: c.id, instance: i, holds: holdStream(workerSeed(s, c.id, i, w), s.hold) });
    }
  }
  return workers;
}

/** The window of a clients run, in ms from the common start: after the settle time, for the run's duration. */
export const clientsWindow = (s: ClientsScenario, durationS: number) => ({
  from: s.settleMs,
  to: s.settleMs + durationS * 1000,
});

/** The hold intervals (admission → release) of admitted records, per client. */
export function intervalsByClient(records: readonly RequestRecord[]): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const r of records) {
    if (r.channel === undefined || r.client === undefined || r.release === undefined) continue;
    (out[r.client] ??= []).push(r.outcome, r.release);
  }
  return out;
}

interface ClientInfo {
  id: string;
  workers: number;
  weight: number;
  limit?: number;
}

export function clientFigures(
  records: readonly RequestRecord[],
  o: { clients: readonly ClientInfo[]; window: { from: number; to: number }; peaks: Record<string, number> },
) {
  const { from, to } = o.window;
  const inWindow = (t: number) => t >= from && t < to;
  const busy = (r: RequestRecord) =>
    r.channel === undefined ? 0 : Math.max(0, Math.min(to, r.release ?? to) - Math.max(from, r.outcome));
  const allBusy = records.reduce((a, r) => a + busy(r), 0);
  return o.clients.map((c) => {
    const mine = records.filter((r) => r.client === c.id);
    const arrived = mine.filter((r) => inWindow(r.arrival));
    const waits = sortedWaits(arrived);
    const admitted = mine.filter((r) => r.channel !== undefined && inWindow(r.outcome)).length;
    return {
      client: c.id,
      workers: c.workers,
      weight: c.weight,
      limit: c.limit,
      requests: arrived.length,
      admitted,
      admittedPerS: admitted / ((to - from) / 1000),
      refused: arrived.length - waits.length,
      wait: waitsOf(waits),
      slotShare: allBusy > 0 ? mine.reduce((a, r) => a + busy(r), 0) / allBusy : NaN,
      highest: o.peaks[c.id] ?? 0,
    };
  });
}

/**
 * The clients figures of a run (records in ms from the common start; each instance's hold intervals per client on
 * the monotonic clock) and of both ideal schedulers on the same loop with the variant's limits.
 */
export function clientsRecord(
  s: ClientsScenario,
  variant: ClientVariant,
  run: {
    instances: number;
    durationS: number;
    records: readonly RequestRecord[];
    intervals: readonly Record<string, number[]>[];
  },
) {
  const clients = benchClients(s, variant).map((c, k) => ({
    id: c.id,
    workers: s.clients[k]!.workersPerInstance * run.instances,
    weight: c.weight ?? 1,
    limit: c.maxConcurrency,
  }));
  const window = clientsWindow(s, run.durationS);
  const ideal = (policy: ClientPolicy) => {
    const records = idealClosedLoop({
      channel: { id: 'c0', max: s.max },
      clients: clients.map((c) => ({
        id: c.id,
        weight: c.weight,
        maxConcurrency: c.limit,
      })),
      workers: loopWorkers(s, run.instances),
      endMs: window.to,
      policy,
    });
    return clientFigures(records, { clients, window, peaks: highestOverlap([intervalsByClient(records)]) });
  };
  return {
    variant: { id: variant.id, label: variant.label },
    measured: s.measured,
    settleMs: s.settleMs,
    clients: clientFigures(run.records, { clients, window, peaks: highestOverlap(run.intervals) }),
    ideal: { 'weighted-fair': ideal('weighted-fair'), fifo: ideal('fifo') },
  };
}

export type ClientFigures = ReturnType<typeof clientFigures>[number];
export type ClientsRecord = ReturnType<typeof clientsRecord>;

/**
 * The measured client's p90 wait over the ideal weighted-fair scheduler's on the same loop; Infinity when it was
 * starved (no admission in the window, where the ideal had some).
 */
export function measuredRatio(c: ClientsRecord, figures: readonly ClientFigures[] = c.clients): number {
  const mine = figures.find((f) => f.client === c.measured);
  const ideal = c.ideal['weighted-fair'].find((f) => f.client === c.measured)?.wait.p90 ?? NaN;
  if (mine && mine.admitted === 0 && Number.isFinite(ideal)) return Infinity;
  return (mine?.wait.p90 ?? NaN) / ideal;
}
