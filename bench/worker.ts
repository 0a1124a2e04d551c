/**
 * One instance of a scale-out run, in its own process (forked by scale.ts with an IPC channel):
 *
 *   parent → { type: 'setup', … }   child sets the contender up, warms up, answers { type: 'ready' }
 *   parent → { type: 'start', startAt }   child runs the load from startAt, answers { type: 'result', … }, exits
 *
 * The parent takes the INFO snapshots at startAt and startAt + duration; the child counts its own round trips and
 * commands by purpose over the same window and records every hold as an interval for the cross-process oversell
 * check.
 */
import { loadContender } from './contenders/index.js';
import { runLoad, type LoadResult } from './load.js';
import { RoundTripCounter } from './redis.js';
import type { BenchChannel, Session } from './types.js';

export interface WorkerSetup {
  type: 'setup';
  contender: string;
  redisUrl: string;
  namespace: string;
  channels: BenchChannel[];
  candidateSets: BenchChannel[][];
  acquirers: number;
  holdMs: number;
  durationMs: number;
  warmupMs: number;
}

export interface WorkerResult {
  type: 'result';
  load: LoadResult;
  roundTrips: number;
  socketWrites: number;
  clientCpuMs: number;
  purposes?: Record<string, number>;
}

type Message = WorkerSetup | { type: 'start'; startAt: number };

const send = (message: unknown) =>
  new Promise<void>((resolve, reject) =>
    process.send!(message, undefined, {}, (err) => (err ? reject(err) : resolve())),
  );

let setup: WorkerSetup | undefined;
let session: Session | undefined;
const counter = new RoundTripCounter();

async function onMessage(message: Message): Promise<void> {
  if (message.type === 'setup') {
    setup = message;
    const contender = await loadContender(message.contender);
    session = await contender.setup({
      redisUrl: message.redisUrl,
      channels: message.channels,
      namespace: message.namespace,
      client: () => counter.client(message.redisUrl),
    });
    if (message.warmupMs > 0) {
      await runLoad({
        session,
        candidateSets: message.candidateSets,
        acquirers: message.acquirers,
        holdMs: message.holdMs,
        durationMs: message.warmupMs,
      });
    }
    await send({ type: 'ready' });
    return;
  }
  const s = setup!;
  let rt = { requests: 0, writes: 0 };
  let cpu = process.cpuUsage();
  let before: Record<string, number> | undefined;
  let after: Record<string, number> | undefined;
  const load = await runLoad({
    session: session!,
    candidateSets: s.candidateSets,
    acquirers: s.acquirers,
    holdMs: s.holdMs,
    durationMs: s.durationMs,
    recordIntervals: true,
    startAt: message.startAt,
    onWindowStart: () => {
      rt = counter.snapshot();
      cpu = process.cpuUsage();
      before = session!.purposes?.();
    },
    onWindowEnd: () => {
      const now = counter.snapshot();
      rt = { requests: now.requests - rt.requests, writes: now.writes - rt.writes };
      cpu = process.cpuUsage(cpu);
      after = session!.purposes?.();
    },
  });
  let purposes: Record<string, number> | undefined;
  if (before && after) {
    purposes = {};
    for (const [k, v] of Object.entries(after)) purposes[k] = v - (before[k] ?? 0);
  }
  await send({
    type: 'result',
    load,
    roundTrips: rt.requests,
    socketWrites: rt.writes,
    clientCpuMs: (cpu.user + cpu.system) / 1000,
    ...(purposes ? { purposes } : {}),
  } satisfies WorkerResult);
  await session!.close();
  process.exit(0);
}

process.on('message', (message: Message) => {
  onMessage(message).catch(async (err: unknown) => {
    await send({
      type: 'error',
      message: err instanceof Error ? (err.stack ?? err.message) : String(err),
    }).catch(() => {});
    process.exit(1);
  });
});
process.on('disconnect', () => process.exit(0));
