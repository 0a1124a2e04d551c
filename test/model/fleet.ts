/**
 * The simulated instances of one schedule: `createAdmission` engines in this process, each on a store of its own
 * (a RedisStore with its own connections, named for CLIENT LIST/KILL) or all on one MemoryStore (the model). An
 * instance can crash: its store's connections close, its clock dies (every timer and sleep ends at once, its time
 * jumps past every deadline) so the engine winds down without a single further command reaching Redis, as a killed
 * process would.
 */
import { systemClock, type Clock, type Timer } from '../../packages/slotgate/src/core/clock.js';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import type { Admission } from '../../packages/slotgate/src/admission/types.js';
import type { LeaseEvent } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import type { SlotStore } from '../../packages/slotgate/src/store/store.js';

/** Where the instances keep their slots; `redis` is undefined on the memory model. */
export interface Backend {
  readonly name: string;
  /** A store for one instance, whose Redis connections carry `connectionName`. */
  store(connectionName: string): SlotStore;
  /** Closes a store `store()` made (the memory model's is shared and stays open). */
  closeStore(store: SlotStore): Promise<void>;
  /** Read-only loads for the checks, never through an instance. */
  readonly observer: SlotStore;
  /**
   * The max each registration in the channel's queue waits under, where the store shows it (Redis): a reload has
   * reached the store once every waiter moved to the new max.
   */
  queuedMaxes?(channelId: string): Promise<number[]>;
}

/** How long a dead instance's clock jumps ahead: past every lease, registration and retry deadline. */
const DEAD_JUMP_MS = 10 * 86_400_000;

/** The system clock until `die()`; then a clock on which nothing waits. */
export class MortalClock implements Clock {
  private dead = false;

  die(): void {
    this.dead = true;
  }

  now(): number {
    return Date.now() + (this.dead ? DEAD_JUMP_MS : 0);
  }

  precise(): number {
    return performance.now() + (this.dead ? DEAD_JUMP_MS : 0);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return systemClock.sleep(this.dead ? 0 : ms, signal);
  }

  setTimer(fn: () => void, ms: number): Timer {
    return systemClock.setTimer(fn, this.dead ? 0 : ms);
  }
}

/**
 * Counts the admitting store calls (acquire and enqueue: either can put a lease in the store) in flight per channel,
 * for the resend bound at an empty restart (docs/redis.md, "Failure bounds").
 */
export class InFlightCalls {
  private readonly byChannel = new Map<string, number>();

  of(channelId: string): number {
    return this.byChannel.get(channelId) ?? 0;
  }

  wrap(store: SlotStore): SlotStore {
    const track = <T>(ids: string[], call: Promise<T>): Promise<T> => {
      for (const id of ids) this.byChannel.set(id, this.of(id) + 1);
      const done = () => ids.forEach((id) => this.byChannel.set(id, this.of(id) - 1));
      call.then(done, done);
      return call;
    };
    return new Proxy(store, {
      get: (target, prop) => {
        if (prop === 'acquireFirst') {
          return (
            targets: Parameters<SlotStore['acquireFirst']>[0],
            opts: Parameters<SlotStore['acquireFirst']>[1],
          ) =>
            track(
              targets.map((t) => t.channelId),
              target.acquireFirst(targets, opts),
            );
        }
        if (prop === 'enqueue' || prop === 'requeue') {
          return (...args: [{ channelId: string }, ...unknown[]]) =>
            track([args[0].channelId], (target[prop] as (...a: unknown[]) => Promise<unknown>)(...args));
        }
        const value: unknown = Reflect.get(target, prop, target);
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
  }
}

export interface InstanceSettings {
  lease_ttl_ms: number;
  wait_timeout_ms: number;
  safety_poll_ms: number;
  load_cache_enabled: boolean;
}

/** One simulated instance: its engine, store and clock, and the lease events it reported. */
export class Instance {
  readonly admission: Admission;
  readonly clock = new MortalClock();
  readonly calls = new InFlightCalls();
  readonly events: (LeaseEvent & { at: number })[] = [];
  /** When its store's connection came back, each time. */
  readonly reconnects: number[] = [];
  private readonly store: SlotStore;
  dead = false;

  constructor(
    private readonly backend: Backend,
    /** Also its connection name: `<run tag>i<index>g<generation>`. */
    readonly id: string,
    settings: InstanceSettings,
  ) {
    this.store = backend.store(id);
    this.store.onReconnect(() => this.reconnects.push(Date.now()));
    this.admission = createAdmission({
      store: this.calls.wrap(this.store),
      instanceId: id,
      clock: this.clock,
      settings,
      onEvent: (e) => {
        if ('type' in e && !e.type.startsWith('settings'))
          this.events.push({ ...(e as LeaseEvent), at: Date.now() });
      },
    });
  }

  /** Killed: the store's connections close first (nothing more is sent), then the engine winds down on a dead clock. */
  async crash(): Promise<void> {
    this.dead = true;
    await this.backend.closeStore(this.store);
    this.clock.die();
    await this.admission.close();
  }

  /** A graceful stop: every lease is given back. */
  async close(): Promise<void> {
    if (this.dead) return;
    this.dead = true;
    await this.admission.close();
    await this.backend.closeStore(this.store);
  }
}
