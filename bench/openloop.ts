/**
 * The fleet scenarios on several instances: the open loop (one seeded Poisson trace with log-normal holds, dealt
 * round-robin, the same for every contender, instance count and the ideal), fair2, and clients2.
 */
import { exponentialMs, logNormalMs, meanHoldMs, seededRandom, type HoldShape } from './draws.js';

interface FleetBase {
  id: string;
  title: string;
  channels: number;
  max: number;
  instances: number[];
}

export interface OpenScenario extends FleetBase {
  kind: 'open';
  /** Offered load in % of capacity (slots / mean hold). */
  loadPct: number;
  hold: HoldShape;
  seed: number;
  /** How long a request may wait for a slot before it is a 429 (every contender is set up with it). */
  waitTimeoutMs: number;
  /** Requests in flight per instance above which the bench sheds arrivals itself. */
  maxInFlight: number;
  /** Waiting requests allowed per channel; undefined: slotgate's default bound, and no ideal beside it. */
  maxWaiting: number | undefined;
}

export interface FairScenario extends FleetBase {
  kind: 'fair';
  workers: number;
  holdMs: number;
  /** Instance i starts i × staggerMs after the first; shares are counted once all of them run. */
  staggerMs: number;
  maxWaiting: number;
}

export interface ClientSpec {
  id: string;
  workersPerInstance: number;
  weight: number;
}

/** One way of running the same clients: named or not to the contender, some of them limited. */
export interface ClientVariant {
  id: string;
  label: string;
  /** Client id → maxConcurrency across every instance. */
  limits: Readonly<Record<string, number>>;
  /** Not named to the contender: its queue serves them in arrival order whatever the client. */
  unnamed?: boolean;
}

export interface ClientsScenario extends FleetBase {
  kind: 'clients';
  /** One channel: the ideal schedulers simulate one. */
  channels: 1;
  clients: readonly ClientSpec[];
  /** The client whose wait is set beside the ideal weighted-fair scheduler's (the light one). */
  measured: string;
  hold: HoldShape;
  seed: number;
  /** Requests arriving in the first settleMs (the queue forming) are left out of the figures. */
  settleMs: number;
  /** Long enough that the ideal schedulers, which have none, would not reach it. */
  waitTimeoutMs: number;
  /** Per channel, and per limited client. */
  maxWaiting: number;
  variants: readonly ClientVariant[];
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
    title: "Open loop at 200 % on 2 instances with slotgate's default queue bound",
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
    hold: HOLD,
    seed: 15,
    settleMs: 3000,
    // FIFO: ~38 waiters ahead × 270 ms / 4 slots ≈ 2.6 s; heavy limited to 3: its own queue ≈ 37 × 270 / 3 ≈ 3.3 s
    waitTimeoutMs: 10_000,
    maxWaiting: 64, // every worker of both instances can wait, on the channel and in a client's own queue
    variants: [
      { id: 'fifo', label: 'clients unnamed: FIFO, no client limit', limits: {}, unnamed: true },
      { id: 'fair', label: 'clients named: fair share, no client limit', limits: {} },
      { id: 'heavy3', label: 'clients named, heavy limited to 3', limits: { heavy: 3 } },
    ],
  },
];

export function findFleetScenario(id: string): FleetScenario | undefined {
  return FLEET_SCENARIOS.find((s) => s.id.toLowerCase() === id.toLowerCase());
}

/** Arrivals per second at `loadPct` % of the capacity of the scenario's slots. */
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
 * Arrivals in [0, durationMs) and their holds, each from its own seeded stream (so the holds are the same sequence
 * at every load), request k to instance k mod `instances`.
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

export const traceOf = (s: OpenScenario, durationS: number, instances: number): TraceRequest[] =>
  makeTrace({
    seed: s.seed,
    ratePerS: arrivalRate(s),
    durationMs: durationS * 1000,
    hold: s.hold,
    instances,
  });
