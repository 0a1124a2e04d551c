/**
 * Client limits on MemoryStore and a ManualClock: a limited client's requests in flight stay within its max across
 * two engines (two instances), the client's own 429 (ClientLimitError) is told apart from a channel's, a client slot
 * is taken before the channel slot and given back with it, a client's wait shares the request's wait budget, a lost
 * client slot fires the ticket's `lost`, and a client without a limit costs no store command.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import type { Client } from '../../packages/slotgate/src/core/client.js';
import {
  CapacityError,
  ClientLimitError,
  StoreUnavailableError,
} from '../../packages/slotgate/src/core/errors.js';
import type { LeaseRef } from '../../packages/slotgate/src/store/store.js';
import { closeEngines, engine, memory, setup, totalCommands } from './admission-fixture.js';
import { elapse, flush, track } from './manual-time.js';

afterEach(closeEngines);

const wide: Candidate = { id: 'wide', maxConcurrency: 100 };
const unlimited: Candidate = { id: 'free' };

describe('client limits', () => {
  it('a client of max 2 has at most 2 requests in flight across two instances; the third fails with its own error', async () => {
    const { admission, other } = setup({ wait_enabled: false });
    const client: Client = { id: 'team-a', maxConcurrency: 2 };
    const first = await admission.acquire({ candidates: [wide], client });
    const second = await other.acquire({ candidates: [wide], client });
    const third = await admission.acquire({ candidates: [wide], client }).catch((e: unknown) => e);
    expect(third).toBeInstanceOf(ClientLimitError);
    expect(third).not.toBeInstanceOf(CapacityError);
    const err = third as ClientLimitError;
    expect(err.code).toBe('client_concurrency_exceeded');
    expect(err.reason).toBe('full');
    expect(err.clientId).toBe('team-a');
    expect(err.retryAfterMs).toBeGreaterThan(0);
    expect(err.message).toContain('"team-a"');
    expect(err.message).not.toContain('\u0000');
    // another client is not limited by team-a's slots
    const b = await admission.acquire({ candidates: [wide], client: { id: 'team-b', maxConcurrency: 1 } });
    await Promise.all([first.release(), second.release(), b.release()]);
    expect(admission.stats().outcomes.client_limit).toBe(1);
  });

  it('a released ticket gives the client slot back with the channel slot', async () => {
    const { admission } = setup({ wait_enabled: false });
    const client: Client = { id: 'c', maxConcurrency: 1 };
    for (let i = 0; i < 5; i++) {
      const t = await admission.acquire({ candidates: [wide], client });
      expect(admission.stats().clients).toEqual({ c: { active: 1, waiting: 0 } });
      expect(admission.stats().channels.wide).toEqual({ active: 1, waiting: 0 });
      await t.release();
    }
    expect(admission.stats().clients).toEqual({});
    expect(admission.stats().channels).toEqual({});
  });

  it('a channel refusal gives the client slot back at once, and the channel error stays a CapacityError', async () => {
    const { admission } = setup({ wait_enabled: false });
    const one: Candidate = { id: 'one', maxConcurrency: 1 };
    const client: Client = { id: 'c', maxConcurrency: 5 };
    const held = await admission.acquire({ candidates: [one], client });
    const refused = await admission.acquire({ candidates: [one], client }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(CapacityError);
    await flush();
    expect(admission.stats().clients).toEqual({ c: { active: 1, waiting: 0 } });
    const loads = await admission.readClients([client, { id: 'free-client' }]);
    expect([...loads.keys()]).toEqual(['c']);
    expect(loads.get('c')).toMatchObject({ active: 1 });
    await held.release();
  });

  it('a client at its limit waits for its own slot, in arrival order, within the same wait budget', async () => {
    const { clock, admission, other } = setup({ wait_timeout_ms: 1000 });
    const client: Client = { id: 'c', maxConcurrency: 1 };
    const holder = await admission.acquire({ candidates: [unlimited], client });
    const waiterA = track(clock, other.acquire({ candidates: [wide], client }));
    await elapse(clock, 10);
    const waiterB = track(clock, admission.acquire({ candidates: [wide], client }));
    await elapse(clock, 100);
    expect(waiterA.at).toBeUndefined();
    expect(waiterB.at).toBeUndefined();
    await holder.release();
    await elapse(clock, 5);
    expect(waiterA.value?.channel.id).toBe('wide');
    expect(waiterA.value!.waitedMs).toBeGreaterThanOrEqual(100);
    expect(waiterB.at).toBeUndefined(); // B arrived later: it still waits
    await elapse(clock, 1000);
    expect(waiterB.error).toBeInstanceOf(ClientLimitError);
    expect((waiterB.error as ClientLimitError).reason).toBe('wait_timeout');
    await waiterA.value!.release();
  });

  it("the client's wait counts against wait_timeout_ms: a channel wait after it ends at the same deadline", async () => {
    const { clock, admission } = setup({ wait_timeout_ms: 1000 });
    const one: Candidate = { id: 'one', maxConcurrency: 1 };
    const client: Client = { id: 'c', maxConcurrency: 1 };
    const clientHolder = await admission.acquire({ candidates: [unlimited], client });
    const channelHolder = await admission.acquire({ candidates: [one] });
    const started = clock.now();
    const waiter = track(clock, admission.acquire({ candidates: [one], client }));
    await elapse(clock, 600);
    await clientHolder.release(); // the client slot comes free at +600; the channel stays full
    await elapse(clock, 600);
    expect(waiter.error).toBeInstanceOf(CapacityError);
    expect((waiter.error as CapacityError).reason).toBe('wait_timeout');
    expect(waiter.at! - started).toBeLessThanOrEqual(1000 + 5);
    await flush();
    expect(admission.stats().clients).toEqual({}); // its client slot went back with the refusal
    await channelHolder.release();
  });

  it("a waiter follows its client's limit through configChanged(): raised, it is admitted in its place; removed, it goes on with no client slot", async () => {
    const { clock, admission } = setup({ wait_timeout_ms: 5000 });
    let inForce: Client = { id: 'c', maxConcurrency: 1 };
    const acquire = () =>
      admission.acquire({ candidates: [wide], client: inForce, resolveClient: () => inForce });
    const holder = await acquire();
    const raised = track(clock, acquire());
    await elapse(clock, 50);
    expect(raised.at).toBeUndefined();
    inForce = { id: 'c', maxConcurrency: 2 };
    admission.configChanged();
    await elapse(clock, 5);
    expect(raised.value?.channel.id).toBe('wide');
    expect(admission.stats().clients.c).toEqual({ active: 2, waiting: 0 });

    const removed = track(clock, acquire()); // max 2, both held: it waits
    await elapse(clock, 50);
    expect(removed.at).toBeUndefined();
    inForce = { id: 'c', maxConcurrency: 0 };
    admission.configChanged();
    await elapse(clock, 5);
    expect(removed.value?.channel.id).toBe('wide');
    expect(admission.stats().clients.c).toEqual({ active: 2, waiting: 0 }); // it holds no client slot
    await Promise.all([holder.release(), raised.value!.release(), removed.value!.release()]);
  });

  it('fair share: a light client waiting behind a heavy one is admitted first while the heavy one holds a slot', async () => {
    const { clock, admission, other } = setup({ wait_timeout_ms: 5000 });
    const two: Candidate = { id: 'two', maxConcurrency: 2 };
    const heavy: Client = { id: 'heavy' };
    const light: Client = { id: 'light' };
    const holders = [
      await admission.acquire({ candidates: [two], client: heavy }),
      await admission.acquire({ candidates: [two], client: heavy }),
    ];
    const heavyWaiters = [0, 1, 2].map(() =>
      track(clock, other.acquire({ candidates: [two], client: heavy })),
    );
    await elapse(clock, 10);
    const lightWaiter = track(clock, admission.acquire({ candidates: [two], client: light }));
    await elapse(clock, 10);
    await holders[0]!.release();
    await elapse(clock, 5);
    // heavy still holds one slot, light none: the light waiter goes first, though three heavy ones are older
    expect(lightWaiter.value?.channel.id).toBe('two');
    expect(heavyWaiters.map((w) => w.at)).toEqual([undefined, undefined, undefined]);
    // heavy 1, light 1: equals go oldest first
    await holders[1]!.release();
    await elapse(clock, 5);
    expect(heavyWaiters.map((w) => w.at !== undefined)).toEqual([true, false, false]);
    await lightWaiter.value!.release();
    await heavyWaiters[0]!.value!.release();
    await elapse(clock, 5);
    for (const w of heavyWaiters.slice(1)) await w.value?.release();
  });

  it("a lost client slot fires the ticket's lost signal, on an unlimited channel too", async () => {
    const { clock, store, admission } = setup({ lease_ttl_ms: 6000 });
    const client: Client = { id: 'c', maxConcurrency: 1 };
    const ticket = await admission.acquire({ candidates: [unlimited], client });
    expect(ticket.token).toBeUndefined();
    expect(ticket.lost.aborted).toBe(false);
    // the store answers that it lost the client's lease and that the client is full (another instance took the
    // slot): the renewal finds it missing, the reclaim cannot take it back
    const clientLeases = (refs: readonly LeaseRef[]) => refs.filter((r) => r.channelId.startsWith('\u0000'));
    store.renew = async (refs) => clientLeases(refs);
    store.reclaim = async (refs) => clientLeases(refs);
    await elapse(clock, 2100); // past one renewal (every third of the TTL)
    expect(ticket.lost.aborted).toBe(true);
    expect(ticket.lost.reason).toMatchObject({ code: 'lease_lost' });
    await ticket.release();
  });

  it('a client without a limit costs no store command on an unlimited channel', async () => {
    const m = memory();
    const admission = engine(m);
    const before = totalCommands(m.store);
    for (let i = 0; i < 100; i++) {
      const t = await admission.acquire({ candidates: [unlimited], client: { id: 'c', maxConcurrency: 0 } });
      await t.release();
    }
    expect(totalCommands(m.store)).toBe(before);
  });

  it("a limited client's slot costs one acquire and one release, and no load read", async () => {
    const m = memory();
    const admission = engine(m);
    const client: Client = { id: 'c', maxConcurrency: 3 };
    for (let i = 0; i < 10; i++) {
      const t = await admission.acquire({ candidates: [unlimited], client });
      await t.release();
    }
    expect(m.store.commands.load_read).toBe(0);
    expect(m.store.commands.acquire).toBe(10);
    expect(m.store.commands.release).toBe(10);
    expect(totalCommands(m.store)).toBe(20);
  });

  it("while the store is down a client's limit holds on this instance alone; unlimited channels keep serving it", async () => {
    const m = memory();
    const admission = engine(m, { wait_enabled: false });
    m.store.acquireFirst = async () => {
      throw new StoreUnavailableError('acquire', 'down');
    };
    const client: Client = { id: 'c', maxConcurrency: 2 };
    // a bounded channel still fails closed, and the client's local slot goes back with the refusal
    await expect(admission.acquire({ candidates: [wide], client })).rejects.toBeInstanceOf(
      StoreUnavailableError,
    );
    const held = [
      await admission.acquire({ candidates: [unlimited], client }),
      await admission.acquire({ candidates: [unlimited], client }),
    ];
    const third = await admission.acquire({ candidates: [unlimited], client }).catch((e: unknown) => e);
    expect(third).toBeInstanceOf(ClientLimitError);
    expect((third as ClientLimitError).message).toContain('on this instance');
    await held[0]!.release();
    await held[0]!.release(); // once only
    const again = await admission.acquire({ candidates: [unlimited], client });
    await expect(admission.acquire({ candidates: [unlimited], client })).rejects.toBeInstanceOf(
      ClientLimitError,
    );
    await Promise.all([again.release(), held[1]!.release()]);
  });

  it('bad clients and reserved channel ids are refused with TypeError, changing nothing', async () => {
    const m = memory();
    const admission = engine(m);
    for (const client of [
      { id: '' },
      { id: 'c', maxConcurrency: -1 },
      { id: 'c', maxConcurrency: 1.5 },
      { id: 'c', weight: 0 },
      { id: 'c', maxWaiting: 0 },
    ]) {
      await expect(admission.acquire({ candidates: [wide], client })).rejects.toThrow(TypeError);
    }
    await expect(
      admission.acquire({ candidates: [{ id: '\u0000client:x', maxConcurrency: 1 }] }),
    ).rejects.toThrow(/NUL/);
    expect(totalCommands(m.store)).toBe(0);
  });
});
