/**
 * What the benchmark compares: a contender is one way to bound per-channel concurrency through Redis (slotgate,
 * slotgate in rollback mode, redis-semaphore, Bottleneck). Each one is set up against the Redis under test and then
 * asked, by many concurrent acquirers, for a slot on one channel of a candidate set.
 */
import type { Cluster, Redis } from 'ioredis';

/** A bounded channel as the benchmark sees it. */
export interface BenchChannel {
  id: string;
  max: number;
}

/** A slot the contender granted: the channel it is on and how to give it back. */
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
  redisUrl: string;
  /** Every channel of the scenario. */
  channels: readonly BenchChannel[];
  /** Unique to this run: every key the contender writes contains it (so a shared Redis can be cleaned up). */
  namespace: string;
  /**
   * A new ioredis client on the Redis under test, with the same options for every contender (those slotgate's
   * RedisStore uses: auto-pipelining on; on a cluster, the store's own Cluster client). Its socket writes, and those of
   * its duplicates, count as round trips. Every client a contender opens must come from here.
   */
  client(): Redis | Cluster;
  /**
   * The fleet scenarios' wait time-out: a request every candidate refuses may wait this long for a slot, then it is
   * refused. Undefined: the contender's own closed-loop behaviour.
   */
  waitTimeoutMs?: number;
  /**
   * How many requests may wait per channel (slotgate's max_waiting_per_channel) in the fleet scenarios: long enough
   * that only the wait time-out refuses, as for the ideal scheduler and for redis-semaphore, which have no bound.
   * Undefined: the contender's default.
   */
  maxWaiting?: number;
}

/**
 * Who a request is for (the clients scenario, clients.ts). slotgate passes it to its acquire as `client`; the peers,
 * which have no notion of a client, ignore it.
 */
export interface BenchClient {
  id: string;
  /** > 0: the client's requests in flight across every instance; undefined: no limit. */
  maxConcurrency?: number;
  weight?: number;
  /** The request is not named to the contender (the variant that runs without clients: a plain FIFO queue). */
  unnamed?: boolean;
}

export interface Session {
  /**
   * A slot on one of the candidates, or Refused when the contender turns the request away; `client` says whose
   * request it is (contenders without clients ignore it).
   */
  acquire(candidates: readonly BenchChannel[], client?: BenchClient): Promise<Admitted>;
  /** Commands issued so far by purpose, for contenders that count them (slotgate); `fetch_rounds` = load reads. */
  purposes?(): Record<string, number>;
  close(): Promise<void>;
}

export interface Contender {
  /** Short id used in flags and JSON: slotgate, slotgate-no-handoff, slotgate-rollback, redis-semaphore, bottleneck. */
  id: string;
  label: string;
  /** How it picks a channel and what it does when every candidate is full (printed in the legend). */
  behaviour: string;
  /** How it waits when given SetupContext.waitTimeoutMs; contenders without it are left out of the fleet scenarios. */
  boundedWait?: string;
  /**
   * Honours a client's maxConcurrency (and, later, its weight): the clients scenario runs its variants with client
   * limits only on such contenders; the others run the variant without limits, the clients named and ignored.
   */
  clients?: boolean;
  /** Why it does not run on a Redis Cluster (shown as n/a there); undefined: it does. */
  notOnCluster?: string;
  setup(ctx: SetupContext): Promise<Session>;
}
