/**
 * Admission engines on one MemoryStore and one ManualClock, for the engine's unit tests (admission-memory and
 * admission-waiting). A second engine on the same store plays "another instance": it holds slots this engine's load
 * view does not know about, and its waiters queue in the same store queues.
 */
import { expect } from 'vitest';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import type { Admission, AdmissionOptions, Ticket } from '../../packages/slotgate/src/admission/types.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { ManualClock } from './manual-clock.js';
import { CapacityError } from '../../packages/slotgate/src/core/errors.js';
import type { SettingsUpdate } from '../../packages/slotgate/src/core/settings.js';
import { MemoryStore } from '../../packages/slotgate/src/store/memory/memory-store.js';
import { PURPOSES, type PendingRelease } from '../../packages/slotgate/src/store/store.js';
import type { Settled } from './manual-time.js';

const opened: Admission[] = [];

/** Closes every engine the test opened (an `afterEach` of each test file). */
export async function closeEngines(): Promise<void> {
  await Promise.all(opened.splice(0).map((a) => a.close()));
}

export interface Memory {
  clock: ManualClock;
  store: MemoryStore;
}

/** A MemoryStore on its own ManualClock. */
export function memory(): Memory {
  const clock = new ManualClock();
  return { clock, store: new MemoryStore({ clock }) };
}

export function engine(
  { clock, store }: Memory,
  settings: SettingsUpdate = {},
  extra: Partial<AdmissionOptions> = {},
): Admission {
  const admission = createAdmission({ store, clock, settings, ...extra });
  opened.push(admission);
  return admission;
}

/** A store plus this engine and "another instance" on it, on one ManualClock. */
export function setup(settings: SettingsUpdate = {}, extra: Partial<AdmissionOptions> = {}) {
  const m = memory();
  return { ...m, admission: engine(m, settings, extra), other: engine(m, settings, extra) };
}

export const totalCommands = (store: MemoryStore) => PURPOSES.reduce((n, p) => n + store.commands[p], 0);

export async function capacityError(p: Promise<unknown>): Promise<CapacityError> {
  const err = await p.then(
    () => new Error('expected a CapacityError, the acquire succeeded'),
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(CapacityError);
  return err as CapacityError;
}

/** The CapacityError a tracked acquire failed with. */
export function failedWith(outcome: Settled<unknown>): CapacityError {
  expect(outcome.error).toBeInstanceOf(CapacityError);
  return outcome.error as CapacityError;
}

export async function load(store: MemoryStore, id: string) {
  return (await store.readLoads([id])).get(id)!;
}

/** Takes `n` slots of `channel` through `admission` (for another instance: slots this engine never saw taken). */
export async function hold(admission: Admission, channel: Candidate, n = 1): Promise<Ticket<Candidate>[]> {
  const tickets = [];
  for (let i = 0; i < n; i++) tickets.push(await admission.acquire({ candidates: [channel] }));
  return tickets;
}

/**
 * Holds every release until the end of the event-loop turn, and lets it be withdrawn until then, as RedisStore's
 * pipeline does: the only kind of release a slot handoff can take over.
 */
export function holdReleases(store: MemoryStore): void {
  const send = store.release.bind(store);
  store.release = (lease, ttlMs): PendingRelease => {
    let state: 'held' | 'withdrawn' | 'sent' = 'held';
    let settle!: (removed: boolean | Promise<boolean>) => void;
    const done = new Promise<boolean>((resolve) => (settle = resolve));
    setImmediate(() => {
      if (state !== 'held') return;
      state = 'sent';
      settle(send(lease, ttlMs).done);
    });
    const withdraw = () => {
      if (state !== 'held') return false;
      state = 'withdrawn';
      settle(true);
      return true;
    };
    return { done, withdrawable: true, withdraw };
  };
}
