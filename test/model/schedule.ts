/**
 * The schedules the model tests generate: a few instances and channels, then a list of operations. Operations name
 * instances, channels, held tickets and pending requests by small indices taken modulo what exists when they run, so
 * any shrunk or shortened list is still a valid schedule (fast-check shrinks arrays by dropping and simplifying
 * elements). Each schedule prints as one line per operation.
 */
import fc from 'fast-check';

export type Op =
  /** A request on one instance for one channel (its only candidate). */
  | { kind: 'acquire'; inst: number; ch: number }
  /** The upstream call of the `pick`-th held ticket ends, then the ticket is released. */
  | { kind: 'release'; pick: number }
  /** The caller of the `pick`-th pending request goes away (its signal aborts). */
  | { kind: 'abort'; pick: number }
  /** A configuration reload on every instance: the channel's max becomes `max`. */
  | { kind: 'reload'; ch: number; max: number }
  /** Time passes: renewals, safety polls, claim deadlines and wait time-outs run. */
  | { kind: 'sleep'; ms: number }
  /** The instance's process dies: no release, no more commands (a later op on it starts a new instance). */
  | { kind: 'crash'; inst: number }
  /** Every Redis connection of the instance is killed (CLIENT KILL); ioredis reconnects. */
  | { kind: 'drop'; inst: number }
  /** CLIENT PAUSE ALL for `ms`; past the lease TTL in the slow variant. */
  | { kind: 'pause'; ms: number }
  /** The Redis server is killed and started again empty on the same port. */
  | { kind: 'restart' };

export interface Schedule {
  instances: number;
  /** The initial max of each channel (`c0`, `c1`, …). */
  maxes: number[];
  /** Each channel's queue bound (`maxWaiting`). */
  maxWaiting: number;
  /** The load view's cache (`load_cache_enabled`); off where the schedule can fill a queue (see modelSchedules). */
  loadCache: boolean;
  ops: Op[];
}

const CHANNEL_NAMES = 'abcdefgh';
export const channelId = (ch: number): string => `c${CHANNEL_NAMES[ch]}`;

/** One line; instances and channels as the runner takes them (modulo the schedule's counts). */
export function formatOp(op: Op, s: Pick<Schedule, 'instances' | 'maxes'>): string {
  switch (op.kind) {
    case 'acquire':
      return `acquire on i${op.inst % s.instances} for ${channelId(op.ch % s.maxes.length)}`;
    case 'release':
    case 'abort':
      return `${op.kind} #${op.pick}`;
    case 'reload':
      return `reload: ${channelId(op.ch % s.maxes.length)} max ${op.max}`;
    case 'sleep':
    case 'pause':
      return `${op.kind} ${op.ms} ms`;
    case 'crash':
    case 'drop':
      return `${op.kind} i${op.inst % s.instances}`;
    case 'restart':
      return 'restart Redis empty';
  }
}

export function formatSchedule(s: Schedule): string {
  const head = `${s.instances} instances, maxes ${s.maxes.join('/')}, maxWaiting ${s.maxWaiting}, loadCache ${s.loadCache}`;
  return [head, ...s.ops.map((op, i) => `  ${String(i).padStart(2)}. ${formatOp(op, s)}`)].join('\n');
}

/** Which operations a variant may generate, and how often (fast-check `fc.oneof` weights). */
export interface OpMix {
  acquire: number;
  release: number;
  abort: number;
  reload: number;
  sleep?: number;
  crash?: number;
  drop?: number;
  /** Pause lengths: short (below every time-out that loses a lease) unless `longPauseMs` is given. */
  pause?: number;
  restart?: number;
}

export interface ScheduleShape {
  mix: OpMix;
  maxOps: number;
  /** Every pause lasts this long (past the lease TTL) when set; else 100–800 ms. */
  longPauseMs?: number;
  /**
   * Outcomes are compared with the model: a small queue bound (so `queue_full` happens) then comes with exact loads,
   * since a cached load view may turn a waiter away on a count a little old (docs/admission.md, "The load view").
   */
  exactQueues: boolean;
}

/** The fault-free operations, as often as every variant draws them. */
export const CALLS: OpMix = { acquire: 10, release: 6, abort: 2, reload: 2 };

const inst = fc.nat(3);
const pick = fc.nat(7);

function opArbitrary(shape: ScheduleShape): fc.Arbitrary<Op> {
  const { mix } = shape;
  const ch = fc.nat(1);
  const weighted: fc.WeightedArbitrary<Op>[] = [
    { weight: mix.acquire, arbitrary: fc.record({ kind: fc.constant('acquire' as const), inst, ch }) },
    { weight: mix.release, arbitrary: fc.record({ kind: fc.constant('release' as const), pick }) },
    { weight: mix.abort, arbitrary: fc.record({ kind: fc.constant('abort' as const), pick }) },
    {
      weight: mix.reload,
      arbitrary: fc.record({ kind: fc.constant('reload' as const), ch, max: fc.integer({ min: 1, max: 3 }) }),
    },
  ];
  const faults: [number | undefined, fc.Arbitrary<Op>][] = [
    [mix.sleep, fc.record({ kind: fc.constant('sleep' as const), ms: fc.integer({ min: 50, max: 1000 }) })],
    [mix.crash, fc.record({ kind: fc.constant('crash' as const), inst })],
    [mix.drop, fc.record({ kind: fc.constant('drop' as const), inst })],
    [
      mix.pause,
      fc.record({
        kind: fc.constant('pause' as const),
        ms: shape.longPauseMs ? fc.constant(shape.longPauseMs) : fc.integer({ min: 100, max: 800 }),
      }),
    ],
    [mix.restart, fc.constant({ kind: 'restart' as const })],
  ];
  for (const [weight, arbitrary] of faults) if (weight) weighted.push({ weight, arbitrary });
  return fc.oneof(...weighted);
}

export function schedules(shape: ScheduleShape): fc.Arbitrary<Schedule> {
  const small = fc.integer({ min: 1, max: 4 });
  const queues = shape.exactQueues
    ? fc.oneof(
        fc.record({ maxWaiting: small, loadCache: fc.constant(false) }),
        fc.record({ maxWaiting: fc.constant(32), loadCache: fc.boolean() }),
      )
    : fc.record({ maxWaiting: fc.oneof(small, fc.constant(32)), loadCache: fc.boolean() });
  return fc
    .record({
      instances: fc.integer({ min: 2, max: 4 }),
      maxes: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 1, maxLength: 2 }),
      queues,
      ops: fc.array(opArbitrary(shape), { minLength: 1, maxLength: shape.maxOps }),
    })
    .map(({ queues: q, ...rest }) => {
      const schedule: Schedule = { ...rest, ...q };
      // fast-check prints a counterexample with this
      return Object.assign(schedule, { [fc.toStringMethod]: () => `\n${formatSchedule(schedule)}` });
    });
}
