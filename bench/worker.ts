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
import { sendToParent as send, serveParent } from './children.js';
import { loadContender } from './contenders/index.js';
import { runLoad, type LoadResult } from './load.js';
import { RoundTripCounter } from './redis.js';
import { clientMeter, type ClientFigures } from './run.js';
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

export interface WorkerResult extends ClientFigures {
  type: 'result';
  load: LoadResult;
}

type Message = WorkerSetup | { type: 'start'; startAt: number };

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
  const meter = clientMeter(counter, session!);
  const load = await runLoad({
    session: session!,
    candidateSets: s.candidateSets,
    acquirers: s.acquirers,
    holdMs: s.holdMs,
    durationMs: s.durationMs,
    recordIntervals: true,
    startAt: message.startAt,
    onWindowStart: () => meter.start(),
    onWindowEnd: () => meter.end(),
  });
  await send({ type: 'result', load, ...meter.figures() } satisfies WorkerResult);
  await session!.close();
  process.exit(0);
}

serveParent(onMessage);
