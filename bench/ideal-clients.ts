/**
 * The ideal schedulers of clients2: the instances' closed loop on one channel, in memory. A freed slot goes at once
 * to the waiter whose client holds the fewest slots per weight (weighted-fair, oldest among equals) or to the oldest
 * (fifo). A limited client's request first takes one of its client's own slots, as slotgate's acquire does. No wait
 * time-out: the scenario's is too long to be reached.
 */
import type { RequestRecord } from './fairness.js';

export type ClientPolicy = 'fifo' | 'weighted-fair';

export interface SimClient {
  id: string;
  weight: number;
  maxConcurrency?: number;
}

/** A worker of the closed loop: its client, instance and hold stream. */
export interface LoopWorker {
  client: string;
  instance: number;
  holds: () => number;
}

export type ClientRecord = RequestRecord & { client: string };

export function idealClosedLoop(o: {
  channel: { id: string; max: number };
  clients: readonly SimClient[];
  workers: readonly LoopWorker[];
  /** Workers stop asking at or after this (ms); what waits then is still served. */
  endMs: number;
  policy: ClientPolicy;
}): ClientRecord[] {
  const byId = new Map(o.clients.map((c) => [c.id, c]));
  /** Channel slots held, per client. */
  const held = new Map(o.clients.map((c) => [c.id, 0]));
  /** A limited client's own slots taken (requests waiting for the channel or holding it), and its own waiters. */
  const inFlight = new Map(o.clients.map((c) => [c.id, 0]));
  const clientQueue = new Map(o.clients.map((c) => [c.id, [] as { worker: number; at: number }[]]));
  for (const w of o.workers) if (!byId.has(w.client)) throw new Error(`worker of unknown client ${w.client}`);
  let free = o.channel.max;
  /** The channel's waiters in the order they joined (ties: the order they were pushed in); `at` is the arrival. */
  const waiting: { worker: number; at: number }[] = [];
  /** Holds in progress, by release time then worker. */
  const holding: { until: number; worker: number }[] = [];
  const records: ClientRecord[] = [];

  /** A request arrives: it joins the channel's waiters, or its client's queue when the client is at its limit. */
  const arrive = (worker: number, at: number) => {
    const client = o.workers[worker]!.client;
    const limit = byId.get(client)!.maxConcurrency;
    if (limit && inFlight.get(client)! >= limit) {
      clientQueue.get(client)!.push({ worker, at });
      return;
    }
    inFlight.set(client, inFlight.get(client)! + 1);
    waiting.push({ worker, at });
  };
  /** The index in `waiting` of the request the policy serves next; −1 when nobody waits. */
  const pick = (): number => {
    let best = -1;
    let bestKey = Infinity;
    for (let i = 0; i < waiting.length; i++) {
      const client = o.workers[waiting[i]!.worker]!.client;
      if (o.policy === 'fifo') return i;
      const key = held.get(client)! / byId.get(client)!.weight;
      if (key < bestKey) [best, bestKey] = [i, key]; // strictly fewer: among equals the older one stays
    }
    return best;
  };
  const grant = (t: number) => {
    while (free > 0) {
      const i = pick();
      if (i < 0) return;
      const { worker, at } = waiting.splice(i, 1)[0]!;
      const w = o.workers[worker]!;
      const hold = w.holds();
      free--;
      held.set(w.client, held.get(w.client)! + 1);
      records.push({
        instance: w.instance,
        client: w.client,
        arrival: at,
        outcome: t,
        channel: o.channel.id,
        release: t + hold,
      });
      const until = t + hold;
      let k = holding.length;
      while (
        k > 0 &&
        (holding[k - 1]!.until > until ||
          (holding[k - 1]!.until === until && holding[k - 1]!.worker > worker))
      )
        k--;
      holding.splice(k, 0, { until, worker });
    }
  };

  if (o.endMs > 0) {
    o.workers.forEach((_, worker) => arrive(worker, 0));
    grant(0);
  }
  while (holding.length > 0) {
    const t = holding[0]!.until;
    const back: number[] = [];
    // every slot given back at t first (a client's own slot goes to its oldest waiter, who joins the channel's
    // waiters), then the channel's waiters, then the workers that gave them back ask again
    while (holding.length > 0 && holding[0]!.until === t) {
      const { worker } = holding.shift()!;
      free++;
      const client = o.workers[worker]!.client;
      held.set(client, held.get(client)! - 1);
      inFlight.set(client, inFlight.get(client)! - 1);
      const next = clientQueue.get(client)!.shift();
      if (next) arrive(next.worker, next.at);
      back.push(worker);
    }
    grant(t);
    if (t < o.endMs) {
      for (const worker of back) arrive(worker, t);
      grant(t);
    }
  }
  return records;
}
