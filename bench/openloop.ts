/**
 * The fleet scenarios and the traces they replay. An open-loop scenario is one seeded trace: Poisson arrivals
 * (exponential gaps) at a share of the candidate set's capacity, each with a log-normal hold (the shape of LLM
 * streams), dealt round-robin to the instances as a load balancer would. The same trace goes to every contender and
 * every instance count, and to the ideal scheduler (ideal.ts), so their figures compare request for request.
 * The closed-loop fairness scenario is the measured case: two instances, the second starting later. The clients
 * scenario (clients.ts) shares one channel between clients of very different demand.
 */
import type { ClientsScenario } from './clients.js';
import type { BenchChannel } from './types.js';
// Internal (not public API): the library's seeded PRNG, as scenarios.ts uses it.
import { seededRandom } from '../packages/slotgate/src/core/order.js';

export type Random = () => number;

/** A log-normal hold time: `medianMs · e^(sigma · Z)`, Z standard normal, cut at `capMs`. */
export interface HoldShape {
  medianMs: number;
  sigma: number;
  capMs: number;
}

export interface OpenScenario {
  kind: 'open';
  id: string;
  title: string;
  channels: number;
  max: number;
  instances: number[];
  /** Offered load in % of capacity (capacity = slots / mean hold). */
  loadPct: number;
  hold: HoldShape;
  seed: number;
  /** How long a request may wait for a slot before it is a 429 (every contender is set up with it). */
  waitTimeoutMs: number;
  /** Requests in flight (waiting or holding) per instance above which the benchmark sheds arrivals itself. */
  maxInFlight: number;
  /**
   * Waiting requests allowed per channel (SetupContext.maxWaiting); undefined: slotgate's default bound (max waiting
   * = max(32, 8 × max concurrency)), which refuses where the ideal scheduler (no bound) waits, so no ideal is shown
   * beside it.
   */
  maxWaiting: number | undefined;
}

export interface FairScenario {
  kind: 'fair';
  id: string;
  title: string;
  channels: number;
  max: number;
  instances: number[];
  /** Closed-loop workers per instance. */
  workers: number;
  holdMs: number;
  /** Instance i starts i × staggerMs after the first; shares are counted once all of them run. */
  staggerMs: number;
  /** Waiting requests allowed per channel (SetupContext.maxWaiting). */
  maxWaiting: number;
}

export type FleetScenario = OpenScenario | FairScenario | ClientsScenario;

const HOLD: HoldShape = { medianMs: 200, sigma: 0.8, capMs: 2000 };
const OPEN = {
  kind: 'open' as const,
  channels: 2,
  max: 4,
  instances: [1, 2, 4],
  hold: HOLD,
  seed: 7,
  waitTimeoutMs: 3000,
  maxInFlight: 2000,
  // at 200 % about 60 arrivals/s wait up to 3 s: ~180 waiting at most, so this never refuses
  maxWaiting: 500,
};

export const FLEET_SCENARIOS: readonly FleetScenario[] = [
  { ...OPEN, id: 'open60', loadPct: 60, title: 'Open loop at 60 % of capacity, equal demand per instance' },
  { ...OPEN, id: 'open200', loadPct: 200, title: 'Open loop at 200 % of capacity (overload), equal demand' },
  {
    ...OPEN,
    id: 'open200d',
    instances: [2],
    loadPct: 200,
    maxWaiting: undefined,
    title:
      "Open loop at 200 % on 2 instances with slotgate's default queue bound (the set-up of issue #11's figures)",
  },
  {
    ...OPEN,
    id: 'open200w',
    channels: 10,
    instances: [4],
    loadPct: 200,
    title: 'Open loop at 200 % on a wider set (10 channels × max 4), equal demand on 4 instances',
  },
  {
    kind: 'fair',
    id: 'fair2',
    channels: 2,
    max: 4,
    instances: [2],
    workers: 20,
    holdMs: 20,
    staggerMs: 500,
    maxWaiting: 40, // every worker of both instances can wait
    title: 'Closed-loop fairness: 2 instances × 20 workers, the second starting 0.5 s after the first',
  },
  {
    kind: 'clients',
    id: 'clients2',
    title:
      'Clients on one saturated channel: a heavy client (40 workers) and a light one (2), on 2 instances',
    channels: 1,
    max: 4,
    instances: [2],
    clients: [
      { id: 'heavy', workersPerInstance: 20, weight: 1 },
      { id: 'light', workersPerInstance: 1, weight: 1 },
    ],
    measured: 'light',
    hold: HOLD, // LLM-like, as in the open loop: log-normal, median 200 ms, σ 0.8, capped at 2 s (mean ≈ 270 ms)
    seed: 15,
    settleMs: 3000,
    // FIFO: ~38 waiters ahead × 270 ms / 4 slots ≈ 2.6 s; heavy limited to 3: its own queue ≈ 37 × 270 / 3 ≈ 3.3 s
    waitTimeoutMs: 10_000,
    maxWaiting: 64, // every worker of both instances can wait, on the channel and in a client's own queue
    variants: [
      // the requests not named to the contender: a plain FIFO queue (slotgate before Stage 11's fair shares)
      { id: 'fifo', label: 'clients unnamed: FIFO, no client limit', limits: {}, unnamed: true },
      {
        id: 'fair',
        label: 'clients named: fair share, no client limit',
        limits: {},
        judged: 'the fair share between clients (weights 1)',
      },
      { id: 'heavy3', label: 'clients named, heavy limited to 3', limits: { heavy: 3 } },
    ],
  },
];

export function findFleetScenario(id: string): FleetScenario | undefined {
  return FLEET_SCENARIOS.find((s) => s.id.toLowerCase() === id.toLowerCase());
}

export function fleetChannels(s: Pick<FleetScenario, 'channels' | 'max'>): BenchChannel[] {
  return Array.from({ length: s.channels }, (_, i) => ({ id: `c${i}`, max: s.max }));
}

/** An exponential gap in ms between arrivals of a Poisson stream of `ratePerS` arrivals per second. */
export function exponentialMs(random: Random, ratePerS: number): number {
  return (-Math.log(1 - random()) / ratePerS) * 1000;
}

/** A standard normal value (Box–Muller; one of the pair, so each call takes two uniforms). */
export function standardNormal(random: Random): number {
  const u = 1 - random(); // (0, 1]: log(0) never happens
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}

export function logNormalMs(random: Random, shape: HoldShape): number {
  return Math.min(shape.capMs, shape.medianMs * Math.exp(shape.sigma * standardNormal(random)));
}

/** erf by Abramowitz–Stegun 7.1.26 (absolute error < 1.5e-7), enough for a mean in ms. */
function erf(x: number): number {
  const t = 1 / (1 + 0.3275911 * Math.abs(x));
  const y =
    1 -
    ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) *
      t *
      Math.exp(-x * x);
  return x >= 0 ? y : -y;
}

const normalCdf = (x: number) => 0.5 * (1 + erf(x / Math.SQRT2));

/** E[min(X, cap)] for the log-normal X of `shape`, ms. */
export function meanHoldMs(shape: HoldShape): number {
  const mu = Math.log(shape.medianMs);
  const s = shape.sigma;
  const lnCap = Math.log(shape.capMs);
  return (
    Math.exp(mu + (s * s) / 2) * normalCdf((lnCap - mu - s * s) / s) +
    shape.capMs * (1 - normalCdf((lnCap - mu) / s))
  );
}

/** Arrivals per second at `loadPct` % of the capacity of `slots` slots. */
export function arrivalRate(s: Pick<OpenScenario, 'channels' | 'max' | 'loadPct' | 'hold'>): number {
  return ((s.channels * s.max) / (meanHoldMs(s.hold) / 1000)) * (s.loadPct / 100);
}

/** One request of a trace: arrival (ms from the start), hold (ms), and the instance the balancer sends it to. */
export interface TraceRequest {
  at: number;
  hold: number;
  instance: number;
}

/**
 * The trace of an open-loop run: arrivals in [0, durationMs) and their holds, each from its own seeded stream (so
 * the holds are the same sequence at every load), request k to instance k mod `instances`.
 */
export function makeTrace(o: {
  seed: number;
  ratePerS: number;
  durationMs: number;
  hold: HoldShape;
  instances: number;
}): TraceRequest[] {
  const gaps = seededRandom(o.seed);
  const holds = seededRandom(o.seed + 1);
  const trace: TraceRequest[] = [];
  for (let at = exponentialMs(gaps, o.ratePerS); at < o.durationMs; at += exponentialMs(gaps, o.ratePerS)) {
    trace.push({ at, hold: logNormalMs(holds, o.hold), instance: trace.length % o.instances });
  }
  return trace;
}

/** The trace of an open-loop scenario (the same for every instance count but for the dealing). */
export function traceOf(s: OpenScenario, durationS: number, instances: number): TraceRequest[] {
  return makeTrace({
    seed: s.seed,
    ratePerS: arrivalRate(s),
    durationMs: durationS * 1000,
    hold: s.hold,
    instances,
  });
}
