/** A contender: one way to bound per-channel concurrency through Redis, asked for slots by many acquirers. */
import type { Cluster, Redis } from 'ioredis';

export interface BenchChannel {
  id: string;
  max: number;
}

export interface Admitted {
  channel: string;
  release(): Promise<void>;
}

/** Thrown by `acquire` when the contender turned the request away for lack of capacity (a 429 at the edge). */
export class Refused extends Error {
  constructor(readonly reason: string) {
    super(`refused: ${reason}`);
    this.name = 'Refused';
  }
}

export interface SetupContext {
  channels: readonly BenchChannel[];
  /** In every key the contender writes. */
  namespace: string;
  /**
   * A new client on the Redis under test with slotgate's RedisStore options for every contender; its writes count as
   * round trips, so every client a contender opens must come from here.
   */
  client(): Redis | Cluster;
  /** Fleet scenarios: how long a request every candidate refuses may wait; undefined: the contender's own way. */
  waitTimeoutMs?: number;
  /** Fleet scenarios: waiting requests allowed per channel; undefined: the contender's default. */
  maxWaiting?: number;
}

/** Who a request is for (clients2); contenders without clients ignore it. */
export interface BenchClient {
  id: string;
  maxConcurrency?: number;
  weight?: number;
  /** Not named to the contender: the variant that runs as a plain FIFO queue. */
  unnamed?: boolean;
}

export interface Session {
  acquire(candidates: readonly BenchChannel[], client?: BenchClient): Promise<Admitted>;
  /** slotgate's counters so far: commands by purpose, fetch_rounds, handoffs, first_tries(_full), load_reports. */
  counters?(): Record<string, number>;
  close(): Promise<void>;
}

export interface Contender {
  id: string;
  label: string;
  /** How it picks a channel and what it does when every candidate is full (printed with the results). */
  behaviour: string;
  /** How it waits when given a wait time-out; contenders without it sit out the open loop and clients2. */
  boundedWait?: string;
  /** Honours a client's maxConcurrency and weight (clients2 runs all its variants on it). */
  clients?: boolean;
  /** Why it does not run on a Redis Cluster; undefined: it does. */
  notOnCluster?: string;
  setup(ctx: SetupContext): Promise<Session>;
}
