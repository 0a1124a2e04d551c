/**
 * This instance in the store's instance list: a heartbeat announces it for the dashboard and `slotgate doctor`, and,
 * with local_share, counts the live instances, whose number divides a channel's max while the store is down.
 */
import { hostname } from 'node:os';
import type { FastifyBaseLogger } from 'fastify';
import { HEARTBEAT_PERIOD_MS, OWNER_DEAD_AFTER_MS, type InstanceInfo, type SlotStore } from 'slotgate';

/** The period `slotgate doctor` derives its late and dead thresholds from. */
const HEARTBEAT_MS = HEARTBEAT_PERIOD_MS;
/** An instance not heard of for this long drops out of the instance list (three missed heartbeats, as the doctor's dead). */
const INSTANCE_MAX_AGE_MS = OWNER_DEAD_AFTER_MS;
/** A raw call on a Redis that is down can take seconds to fail (ioredis holds it for a reconnect): not waited for. */
const PRESENCE_WAIT_MS = 1000;

/** `work`'s result, or `fallback` when it fails or takes longer than `ms` (the work goes on, detached). */
function within<T>(work: Promise<T>, ms: number, fallback: T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<T>((resolve) => (timer = setTimeout(() => resolve(fallback), ms)));
  return Promise.race([work.catch(() => fallback), late]).finally(() => clearTimeout(timer));
}

/**
 * The live instances seen (this one included): the most any heartbeat listed within INSTANCE_MAX_AGE_MS, so a list
 * that Redis lost (a restart) and that fills up again never makes each instance's share look larger than it is.
 */
export class FleetSize {
  seen = 0;
  private readonly counts: Array<{ at: number; n: number }> = [];

  count(n: number): void {
    const now = Date.now();
    this.counts.push({ at: now, n });
    while (this.counts.length > 0 && this.counts[0]!.at < now - INSTANCE_MAX_AGE_MS) this.counts.shift();
    this.seen = Math.max(...this.counts.map((c) => c.n));
  }
}

export class Presence {
  readonly startedAt = Date.now();
  private readonly self: InstanceInfo;
  private heartbeat: NodeJS.Timeout | undefined;

  /** `fleet` counts the live instances at each heartbeat; left out, they are not counted. */
  constructor(
    private readonly store: SlotStore,
    instanceId: string,
    private readonly fleet?: FleetSize,
  ) {
    this.self = {
      id: instanceId,
      host: hostname(),
      pid: process.pid,
      started_at: new Date(this.startedAt).toISOString(),
    };
  }

  start(log: FastifyBaseLogger): void {
    const { store, fleet } = this;
    const beat = () =>
      void store.presence
        .announce(this.self)
        .then(async () => {
          if (fleet) fleet.count((await store.presence.list(INSTANCE_MAX_AGE_MS)).length);
        })
        .catch((err: Error) => log.warn({ err: err.message }, 'instance heartbeat failed'));
    beat();
    this.heartbeat = setInterval(beat, HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  /** The live instances; none when the store does not answer in time. */
  list(): Promise<InstanceInfo[]> {
    return within(this.store.presence.list(INSTANCE_MAX_AGE_MS), PRESENCE_WAIT_MS, []);
  }

  async leave(): Promise<void> {
    clearInterval(this.heartbeat);
    await within(this.store.presence.leave(this.self.id), PRESENCE_WAIT_MS, undefined);
  }
}
