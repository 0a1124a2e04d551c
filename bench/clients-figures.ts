/**
 * The clients scenario's figures, per client, from every request's record — pure functions, so a contender's records
 * and the ideal schedulers' go through the same code: admitted, admissions/s, wait percentiles, share of the held
 * slot-time, and the highest number of the client's requests holding slots at once across every instance (a sweep
 * over the hold intervals on one clock, as the oversell check sweeps a channel's).
 */
import { benchClients, loopWorkers, type ClientsScenario, type ClientVariant } from './clients.js';
import { waitsOf, type RequestRecord, type Waits } from './fairness.js';
import { idealClosedLoop, type ClientPolicy, type ClientRecord } from './ideal-clients.js';

/**
 * The highest number of intervals open at once, over lists of flat [start, end, …] on one clock; an interval that
 * ends at t is closed before one that starts at t opens.
 */
export function peakInFlight(lists: readonly (readonly number[])[]): number {
  const events: [number, number][] = [];
  for (const flat of lists) {
    for (let i = 0; i + 1 < flat.length; i += 2) events.push([flat[i]!, 1], [flat[i + 1]!, -1]);
  }
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let top = 0;
  for (const [, step] of events) {
    now += step;
    if (now > top) top = now;
  }
  return top;
}

/** Per client, the peak across instances: each instance gives client → flat hold intervals, all on one clock. */
export function clientPeaks(
  perInstance: readonly Readonly<Record<string, readonly number[]>>[],
): Record<string, number> {
  const byClient = new Map<string, (readonly number[])[]>();
  for (const intervals of perInstance) {
    for (const [client, flat] of Object.entries(intervals)) {
      const lists = byClient.get(client) ?? [];
      lists.push(flat);
      byClient.set(client, lists);
    }
  }
  return Object.fromEntries([...byClient].map(([client, lists]) => [client, peakInFlight(lists)]));
}

/** The hold intervals (admission → release) of admitted records, per client: the ideal's, for clientPeaks. */
export function intervalsByClient(records: readonly RequestRecord[]): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const r of records) {
    if (r.channel === undefined || r.client === undefined || r.release === undefined) continue;
    (out[r.client] ??= []).push(r.outcome, r.release);
  }
  return out;
}

export interface ClientFigures {
  client: string;
  /** Workers in all (every instance). */
  workers: number;
  weight: number;
  /** Its maxConcurrency in the variant; undefined: no limit. */
  limit?: number;
  /** Requests arriving in the window. */
  requests: number;
  /** Admissions in the window. */
  admitted: number;
  admittedPerS: number;
  /** Of the requests arriving in the window, those refused. */
  refused: number;
  /** Admitted requests arriving in the window: admission − arrival. */
  wait: Waits;
  /** Its held slot-time inside the window over every client's. */
  slotShare: number;
  /** The most of its requests holding slots at once, across every instance, over the whole run. */
  highest: number;
}

export interface ClientInfo {
  id: string;
  workers: number;
  weight: number;
  limit?: number;
}

export function clientFigures(
  records: readonly RequestRecord[],
  o: { clients: readonly ClientInfo[]; window: { from: number; to: number }; peaks: Record<string, number> },
): ClientFigures[] {
  const { from, to } = o.window;
  const inWindow = (t: number) => t >= from && t < to;
  const busy = (r: RequestRecord) =>
    r.channel === undefined ? 0 : Math.max(0, Math.min(to, r.release ?? to) - Math.max(from, r.outcome));
  const allBusy = records.reduce((a, r) => a + busy(r), 0);
  return o.clients.map((c) => {
    const mine = records.filter((r) => r.client === c.id);
    const arrived = mine.filter((r) => inWindow(r.arrival));
    const waits = arrived
      .filter((r) => r.channel !== undefined)
      .map((r) => r.outcome - r.arrival)
      .sort((a, b) => a - b);
    const admitted = mine.filter((r) => r.channel !== undefined && inWindow(r.outcome)).length;
    return {
      client: c.id,
      workers: c.workers,
      weight: c.weight,
      ...(c.limit !== undefined ? { limit: c.limit } : {}),
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

/** What a clients run adds to its fleet record. */
export interface ClientsRecord {
  variant: { id: string; label: string };
  /** Why the fair-share target is judged on this variant (ClientVariant.judged); undefined: shown, not judged. */
  judged?: string;
  /** The client the fair-share target is about. */
  measured: string;
  /** Settle time before the window, ms. */
  settleMs: number;
  clients: ClientFigures[];
  /** The ideal schedulers on the same closed loop and hold sequences, with the variant's limits. */
  ideal: Record<ClientPolicy, ClientFigures[]>;
}

/** The window of a clients run, in ms from the common start: after the settle time, for the run's duration. */
export const clientsWindow = (s: ClientsScenario, durationS: number) => ({
  from: s.settleMs,
  to: s.settleMs + durationS * 1000,
});

function clientInfo(s: ClientsScenario, variant: ClientVariant, instances: number): ClientInfo[] {
  return benchClients(s, variant).map((c, k) => ({
    id: c.id,
    workers: s.clients[k]!.workersPerInstance * instances,
    weight: c.weight ?? 1,
    ...(c.maxConcurrency !== undefined ? { limit: c.maxConcurrency } : {}),
  }));
}

/** The ideal scheduler's records under `policy` for this scenario, variant and instance count. */
export function idealClientRecords(
  s: ClientsScenario,
  variant: ClientVariant,
  instances: number,
  durationS: number,
  policy: ClientPolicy,
): ClientRecord[] {
  return idealClosedLoop({
    channel: { id: 'c0', max: s.max },
    clients: clientInfo(s, variant, instances).map((c) => ({
      id: c.id,
      weight: c.weight,
      ...(c.limit !== undefined ? { maxConcurrency: c.limit } : {}),
    })),
    workers: loopWorkers(s, instances),
    endMs: clientsWindow(s, durationS).to,
    policy,
  });
}

/**
 * The clients figures of a run (records in ms from the common start; each instance's hold intervals per client on
 * the machine's monotonic clock) and of both ideal schedulers on the same loop.
 */
export function clientsRecord(
  s: ClientsScenario,
  variant: ClientVariant,
  run: {
    instances: number;
    durationS: number;
    records: readonly RequestRecord[];
    intervals: readonly Readonly<Record<string, readonly number[]>>[];
  },
): ClientsRecord {
  const clients = clientInfo(s, variant, run.instances);
  const window = clientsWindow(s, run.durationS);
  const ideal = (policy: ClientPolicy) => {
    const records = idealClientRecords(s, variant, run.instances, run.durationS, policy);
    return clientFigures(records, { clients, window, peaks: clientPeaks([intervalsByClient(records)]) });
  };
  return {
    variant: { id: variant.id, label: variant.label },
    ...(variant.judged !== undefined ? { judged: variant.judged } : {}),
    measured: s.measured,
    settleMs: s.settleMs,
    clients: clientFigures(run.records, { clients, window, peaks: clientPeaks(run.intervals) }),
    ideal: { 'weighted-fair': ideal('weighted-fair'), fifo: ideal('fifo') },
  };
}
