/**
 * The model tests' properties: the runs and seed (printed, replayable), one schedule run on a backend with every check
 * after it, and the comparison of Redis's trace with the memory model's.
 *
 * SLOTGATE_MODEL_RUNS scales every variant (CI: 300); SLOTGATE_MODEL_SEED replays a run, SLOTGATE_MODEL_PATH
 * (the `path` fast-check prints with a counterexample) replays its shrunk schedule directly.
 */
import fc from 'fast-check';
import type { StoreTarget } from '../helpers/redis.js';
import { uniquePrefix } from '../helpers/redis.js';
import type { RedisServer } from '../helpers/redis-server.js';
import { memoryBackend, RedisBackend } from './backends.js';
import { Faults } from './faults.js';
import type { Backend, InstanceSettings } from './fleet.js';
import { leftoverProblems } from './leftovers.js';
import { Runner } from './runner.js';
import { formatSchedule, type Schedule } from './schedule.js';

export const RUNS = Number(process.env.SLOTGATE_MODEL_RUNS ?? 300);
export const SEED = Number(process.env.SLOTGATE_MODEL_SEED ?? Date.now() % 2 ** 31);
const PATH = process.env.SLOTGATE_MODEL_PATH;
/** SLOTGATE_MODEL_TRACE=1 prints every run's trace (with a replayed seed, to watch one schedule). */
const TRACE = process.env.SLOTGATE_MODEL_TRACE === '1';

/** This variant's share of the runs, at least `min`. */
export const share = (fraction: number, min = 1): number => Math.max(min, Math.round(RUNS * fraction));

/** Checks every generated schedule; prints the seed first and, on failure, the shrunk schedule and what broke. */
export async function checkSchedules(
  name: string,
  arbitrary: fc.Arbitrary<Schedule>,
  runs: number,
  check: (schedule: Schedule) => Promise<void>,
): Promise<void> {
  const replay = `SLOTGATE_MODEL_SEED=${SEED} npm run test:model -- --runs ${RUNS}`;
  console.log(`model tests, ${name}: seed ${SEED}, ${runs} schedules (replay: ${replay})`);
  await fc.assert(fc.asyncProperty(arbitrary, check), {
    numRuns: runs,
    seed: SEED,
    ...(PATH && { path: PATH }),
  });
}

const LEASE_TTL_MS = 5_000; // the smallest the settings accept
const CLAIM_MS = 1_000;
const WAIT_TIMEOUT_MS = { exact: 30_000, faults: 3_000 };
const REGISTRATION_MARGIN_MS = 2_000;

function settingsOf(schedule: Schedule, exact: boolean): InstanceSettings {
  return {
    lease_ttl_ms: LEASE_TTL_MS,
    wait_timeout_ms: exact ? WAIT_TIMEOUT_MS.exact : WAIT_TIMEOUT_MS.faults,
    // with faults, a waiter whose queue or grant was lost finds out within a second
    safety_poll_ms: exact ? 5_000 : 1_000,
    load_cache_enabled: schedule.loadCache,
  };
}

function redisBackend(target: StoreTarget): RedisBackend {
  return new RedisBackend({
    target,
    prefix: uniquePrefix('model'),
    claimMs: CLAIM_MS,
    timeoutMs: 500,
    restartGraceMs: 1_500,
  });
}

/** Runs the schedule, then the end-of-run checks; throws with the violations and the trace. */
async function runOn(
  backend: Backend,
  schedule: Schedule,
  exact: boolean,
  after: (runner: Runner) => Promise<string[]>,
  faults?: Faults,
): Promise<string[][]> {
  const runner = new Runner(schedule, {
    backend,
    settings: settingsOf(schedule, exact),
    exact,
    faults,
    tag: uniquePrefix('m'),
  });
  let failure: unknown;
  try {
    await runner.run();
    await runner.finish();
    for (const problem of await after(runner)) runner.violation(problem);
  } catch (err) {
    failure = err;
  } finally {
    for (const inst of runner.live) await inst.close().catch(() => {});
  }
  if (failure !== undefined || runner.violations.length > 0) {
    const what = [...runner.violations, ...(failure === undefined ? [] : [String(failure)])];
    throw new Error(`on ${backend.name}:\n${what.join('\n')}\ntrace:\n${formatTrace(runner.trace)}`);
  }
  if (TRACE) console.log(`${formatSchedule(schedule)}\non ${backend.name}:\n${formatTrace(runner.trace)}`);
  return runner.trace;
}

/** The tokens of every ticket the run admitted (all released by its end). */
const released = (runner: Runner) =>
  new Set(runner.requests.flatMap((r) => (r.ticket?.token ? [r.ticket.token] : [])));

export function formatTrace(trace: readonly string[][]): string {
  return trace
    .map(([op, ...events], i) => `  ${String(i).padStart(2)}. ${op}: ${events.join(', ') || '-'}`)
    .join('\n');
}

/** No faults: Redis must do exactly what the memory model does, and leave nothing behind. */
export async function compareWithModel(schedule: Schedule, target: StoreTarget): Promise<void> {
  const model = await runOn(memoryBackend(CLAIM_MS), schedule, true, async () => []);
  const redis = redisBackend(target);
  try {
    const limits = { leaseTtlMs: LEASE_TTL_MS, lifetimeMs: WAIT_TIMEOUT_MS.exact + REGISTRATION_MARGIN_MS };
    const real = await runOn(redis, schedule, true, () =>
      leftoverProblems(redis, { ...limits, dead: [], strict: true, released: new Set(), claimMs: CLAIM_MS }),
    );
    const differ = real.findIndex((step, i) => step.join() !== model[i]!.join());
    if (differ >= 0) {
      throw new Error(
        `${redis.name} differs from the memory model from step ${differ}:\n` +
          `model:\n${formatTrace(model)}\n${redis.name}:\n${formatTrace(real)}`,
      );
    }
  } finally {
    await redis.close();
  }
}

/** Faults: the invariants and the documented bounds hold, crashed instances' slots expire, nothing is left behind. */
export async function checkUnderFaults(
  schedule: Schedule,
  target: StoreTarget,
  server?: RedisServer,
): Promise<void> {
  const redis = redisBackend(target);
  const lifetimeMs = WAIT_TIMEOUT_MS.faults + REGISTRATION_MARGIN_MS;
  const limits = { leaseTtlMs: LEASE_TTL_MS, lifetimeMs, claimMs: CLAIM_MS, restartGraceMs: 1_500 };
  const faults = new Faults(redis, limits, server);
  try {
    await runOn(
      redis,
      schedule,
      false,
      async (runner) => [
        ...(await faults.deadOwnerProblems(runner.channels)),
        ...(await leftoverProblems(redis, {
          ...limits,
          dead: faults.dead,
          strict: false,
          released: released(runner),
        })),
      ],
      faults,
    );
  } finally {
    await redis.close();
  }
}
