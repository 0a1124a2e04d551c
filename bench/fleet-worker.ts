/**
 * One instance of a fleet run, in its own process (forked by fleet.ts with an IPC channel). A worker serves run
 * after run, one contender session at a time:
 *
 *   parent → { type: 'setup', … }   set the contender up (with the scenario's wait time-out), warm up → { type: 'ready' }
 *   parent → { type: 'run', … }     the open, closed or clients loop from startAt → { type: 'result', … }
 *   parent → { type: 'close' }      close the session → { type: 'closed' }
 *
 * The parent takes the INFO snapshots around the run; the worker counts its clients' round trips and its CPU over
 * the same span and sends back every request's record and every hold interval.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { sendToParent as send, serveParent } from './children.js';
import { loadContender } from './contenders/index.js';
import type { ClientRun } from './clients.js';
import { runClientsLoop, runClosedLoop, runOpenLoop, type FleetLoadResult } from './fleet-load.js';
import type { HoldShape } from './openloop.js';
import { runLoad } from './load.js';
import { RoundTripCounter } from './redis.js';
import { clientMeter, type ClientFigures } from './run.js';
import type { BenchChannel, Session } from './types.js';

export interface FleetSetup {
  type: 'setup';
  contender: string;
  redisUrl: string;
  namespace: string;
  channels: BenchChannel[];
  waitTimeoutMs?: number;
  maxWaiting?: number;
  warmupMs: number;
}

export type FleetRunMessage = { type: 'run'; instance: number } & (
  | { mode: 'open'; startAt: number; arrivals: number[]; holds: number[]; maxInFlight: number }
  | { mode: 'closed'; startAt: number; endAt: number; workers: number; holdMs: number }
  | { mode: 'clients'; startAt: number; endAt: number; clients: ClientRun[]; hold: HoldShape }
);

export interface FleetResult extends ClientFigures, FleetLoadResult {
  type: 'result';
  /**
   * How late this process's event loop ran a 1 ms timer during the run (perf_hooks.monitorEventLoopDelay, its 1 ms
   * taken off), ms: what every message, reply and timer of the instance waited on top of its own work.
   */
  loopDelay: { p99Ms: number; maxMs: number };
}

type Message = FleetSetup | FleetRunMessage | { type: 'close' };

const counter = new RoundTripCounter();
let session: Session | undefined;
let channels: BenchChannel[] = [];

async function onMessage(message: Message): Promise<void> {
  if (message.type === 'setup') {
    const contender = loadContender(message.contender);
    channels = message.channels;
    session = await contender.setup({
      redisUrl: message.redisUrl,
      channels,
      namespace: message.namespace,
      client: () => counter.client(message.redisUrl),
      ...(message.waitTimeoutMs !== undefined ? { waitTimeoutMs: message.waitTimeoutMs } : {}),
      ...(message.maxWaiting !== undefined ? { maxWaiting: message.maxWaiting } : {}),
    });
    // connections, scripts and JIT, unmeasured; every slot is given back before the run starts
    if (message.warmupMs > 0) {
      await runLoad({
        session,
        candidateSets: [channels],
        acquirers: 2,
        holdMs: 0,
        durationMs: message.warmupMs,
      });
    }
    await send({ type: 'ready' });
    return;
  }
  if (message.type === 'close') {
    await session?.close();
    session = undefined;
    await send({ type: 'closed' });
    return;
  }
  const meter = clientMeter(counter, session!);
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  meter.start();
  const load =
    message.mode === 'open'
      ? await runOpenLoop({ ...message, session: session!, candidates: channels })
      : message.mode === 'clients'
        ? await runClientsLoop({ ...message, session: session!, candidates: channels })
        : await runClosedLoop({ ...message, session: session!, candidates: channels });
  meter.end();
  delay.disable();
  // the histogram holds whole intervals between ticks: the 1 ms resolution is taken off, leaving how late each was
  const late = (ns: number) => Math.max(0, ns / 1e6 - 1);
  const loopDelay = { p99Ms: late(delay.percentile(99)), maxMs: late(delay.max) };
  await send({ type: 'result', ...load, ...meter.figures(), loopDelay } satisfies FleetResult);
}

serveParent(onMessage);
