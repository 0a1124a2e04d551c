/**
 * The clients scenario (issue #15): clients of very different demand on one saturated channel. Each instance runs
 * closed-loop workers of every client (acquire → hold → release, again at once; 5 ms back-off after a 429), every
 * request naming its client to the contender. Each worker draws its holds from its own seeded stream, so the k-th
 * request a worker gets admitted holds the same time in every run and in the ideal schedulers (ideal-clients.ts),
 * which replay the same closed loop in memory.
 *
 * A variant is one way of running the same clients: unnamed (the contender does not know whose request it is: a
 * channel queue served in arrival order, slotgate before Stage 11's fair shares), named (slotgate's fair share
 * between clients), or with some clients limited. Contenders that know no clients run the variants without limits.
 */
// Internal (not public API): the library's seeded PRNG, as openloop.ts uses it.
import { seededRandom } from '../packages/slotgate/src/core/order.js';
import { logNormalMs, type HoldShape } from './openloop.js';
import type { BenchClient, Contender } from './types.js';

export interface ClientSpec {
  id: string;
  /** Closed-loop workers of this client on each instance. */
  workersPerInstance: number;
  /** Its share of a saturated channel against the other clients (what the ideal weighted-fair scheduler weighs). */
  weight: number;
}

export interface ClientVariant {
  id: string;
  label: string;
  /** Client id → maxConcurrency (across every instance); a client not named has no limit. */
  limits: Readonly<Record<string, number>>;
  /** The requests are not named to the contender: its queue serves them in arrival order whatever the client. */
  unnamed?: boolean;
  /**
   * Set on the variant the fair-share target of the Targets table is judged on (every variant's runs are in the
   * per-run matrix), saying why: the named one, where the fair share between clients applies.
   */
  judged?: string;
}

export interface ClientsScenario {
  kind: 'clients';
  id: string;
  title: string;
  /** One channel: the ideal schedulers simulate one. */
  channels: 1;
  max: number;
  instances: number[];
  clients: readonly ClientSpec[];
  /** The client whose wait the fair-share target is about (the light one). */
  measured: string;
  hold: HoldShape;
  seed: number;
  /** Requests arriving in the first settleMs (the queue forming) are left out of the figures. */
  settleMs: number;
  /** Long enough that the ideal schedulers, which have none, would not reach it. */
  waitTimeoutMs: number;
  /** Waiting requests allowed per channel, and per limited client (slotgate's max_waiting_per_channel). */
  maxWaiting: number;
  variants: readonly ClientVariant[];
}

/** The variants a contender runs: all of them if it knows clients, else the unnamed one (the rest would be the same). */
export function variantsFor(s: ClientsScenario, contender: Pick<Contender, 'clients'>): ClientVariant[] {
  return s.variants.filter((v) => contender.clients || (v.unnamed && Object.keys(v.limits).length === 0));
}

/** The clients as the variant names them to the contender (one object per client, reused by every request). */
export function benchClients(s: ClientsScenario, variant: ClientVariant): BenchClient[] {
  return s.clients.map((c) => ({
    id: c.id,
    weight: c.weight,
    ...(variant.limits[c.id] !== undefined ? { maxConcurrency: variant.limits[c.id]! } : {}),
    ...(variant.unnamed ? { unnamed: true } : {}),
  }));
}

/** The seed of one worker's holds: FNV-1a over (scenario seed, client, instance, worker). */
export function workerSeed(seed: number, client: string, instance: number, worker: number): number {
  let h = 0x811c9dc5;
  for (const ch of `${seed}:${client}:${instance}:${worker}`) {
    h ^= ch.charCodeAt(0);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** The holds of one worker, in order: its k-th admitted request holds the k-th. */
export function holdStream(seed: number, hold: HoldShape): () => number {
  const random = seededRandom(seed);
  return () => logNormalMs(random, hold);
}

/** What one instance runs: per client, the client as named to the contender and the hold seed of each worker. */
export interface ClientRun {
  client: BenchClient;
  seeds: number[];
}

export function clientRunsOf(s: ClientsScenario, variant: ClientVariant, instance: number): ClientRun[] {
  const named = benchClients(s, variant);
  return s.clients.map((c, k) => ({
    client: named[k]!,
    seeds: Array.from({ length: c.workersPerInstance }, (_, w) => workerSeed(s.seed, c.id, instance, w)),
  }));
}

/** A worker of the closed loop as the ideal schedulers see it: its client, instance and hold stream. */
export interface LoopWorker {
  client: string;
  instance: number;
  holds: () => number;
}

/** Every worker of every instance, with fresh hold streams (the same sequences as the instances draw). */
export function loopWorkers(s: ClientsScenario, instances: number): LoopWorker[] {
  const workers: LoopWorker[] = [];
  for (let i = 0; i < instances; i++) {
    for (const c of s.clients) {
      for (let w = 0; w < c.workersPerInstance; w++) {
        workers.push({
          client: c.id,
          instance: i,
          holds: holdStream(workerSeed(s.seed, c.id, i, w), s.hold),
        });
      }
    }
  }
  return workers;
}
