/**
 * Client limits and the fair share on Redis Cluster, through admission engines on real RedisStores: a client's own
 * slots live under their own hash tag (`{%00client:<id>}`), usually on another master than the channel's, and the two
 * are taken one after the other (docs/redis.md, "Client limits"). A limited client stays within its max across two
 * instances, its waiter is granted by the other instance's release, and a light client's waiter goes before older
 * waiters of a client holding the channel.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import type { Admission, Ticket } from '../../packages/slotgate/src/admission/types.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { ClientLimitError } from '../../packages/slotgate/src/core/errors.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { useCleanups } from '../helpers/cleanups.js';
import { clearCluster, clusterClient, clusterNodes, uniquePrefix } from '../helpers/redis.js';

const cleanups = useCleanups();
const prefix = uniquePrefix('cl-clients');

function instance(settings: Record<string, unknown> = {}): { store: RedisStore; admission: Admission } {
  const store = new RedisStore({ cluster: { nodes: clusterNodes() }, prefix });
  const admission = createAdmission({
    store,
    settings: { wait_timeout_ms: 20_000, max_waiting_per_channel: 50, ...settings },
  });
  cleanups.push(async () => {
    await admission.close();
    await store.close();
  });
  return { store, admission };
}

/** Resolves once `p` settles, or says it is still pending after `ms`. */
async function pendingAfter(p: Promise<unknown>, ms: number): Promise<boolean> {
  let done = false;
  void p.then(
    () => (done = true),
    () => (done = true),
  );
  await new Promise((r) => setTimeout(r, ms));
  return !done;
}

describe('clients on a Redis Cluster', () => {
  const admin = clusterClient();
  afterAll(async () => {
    admin.disconnect();
    await clearCluster(`${prefix}:*`);
  });

  it("a client's limit holds across two instances, and its waiter is granted by the other's release", async () => {
    const x = instance({ wait_enabled: true });
    const y = instance({ wait_enabled: false });
    const wide: Candidate = { id: 'wide', maxConcurrency: 50 };
    const client = { id: 'team', maxConcurrency: 2 };
    // the client's keys and the channel's hash to different slots
    const slotOf = async (key: string) => Number(await admin.cluster('KEYSLOT', key));
    expect(await slotOf(x.store.keys.slots('\u0000client:team'))).not.toBe(
      await slotOf(x.store.keys.slots('wide')),
    );
    const held = [
      await x.admission.acquire({ candidates: [wide], client }),
      await y.admission.acquire({ candidates: [wide], client }),
    ];
    await expect(y.admission.acquire({ candidates: [wide], client })).rejects.toBeInstanceOf(
      ClientLimitError,
    );
    expect((await x.admission.readClients([client])).get('team')).toMatchObject({ active: 2 });
    const waiting = x.admission.acquire({ candidates: [wide], client });
    expect(await pendingAfter(waiting, 300)).toBe(true);
    await held[1]!.release(); // y's release grants the client's slot to x's waiter
    const admitted = await waiting;
    expect(admitted.channel.id).toBe('wide');
    expect((await x.admission.readClients([client])).get('team')).toMatchObject({ active: 2, waiting: 0 });
    await Promise.all([held[0]!.release(), admitted.release()]);
    expect((await x.admission.readClients([client])).get('team')).toMatchObject({ active: 0 });
  });

  it('fair share: a light waiter goes before older waiters of the client holding the channel', async () => {
    const x = instance();
    const y = instance();
    const two: Candidate = { id: 'fair-two', maxConcurrency: 2 };
    const heavy = { id: 'heavy' };
    const light = { id: 'light' };
    const holders = [
      await x.admission.acquire({ candidates: [two], client: heavy }),
      await x.admission.acquire({ candidates: [two], client: heavy }),
    ];
    const order: string[] = [];
    const track = (p: Promise<Ticket<Candidate>>, name: string) =>
      p.then((t) => {
        order.push(name);
        return t;
      });
    const queued = async (n: number) => {
      while ((await x.admission.readLoads([two])).get('fair-two')!.waiting < n) {
        await new Promise((r) => setTimeout(r, 20));
      }
    };
    // the heavy waiters queue one after the other (their order is theirs, not a race of requests microseconds apart),
    // all before the light one arrives
    const heavyWaiters: Promise<Ticket<Candidate>>[] = [];
    for (const n of [1, 2, 3]) {
      heavyWaiters.push(track(y.admission.acquire({ candidates: [two], client: heavy }), `h${n}`));
      await queued(n);
    }
    const lightWaiter = track(x.admission.acquire({ candidates: [two], client: light }), 'light');
    await queued(4);
    await holders[0]!.release(); // heavy still holds one slot, light none
    const first = await lightWaiter;
    expect(order).toEqual(['light']);
    await holders[1]!.release(); // heavy 0, light 1: the oldest heavy waiter
    const next = await Promise.race(heavyWaiters);
    expect(order).toEqual(['light', 'h1']);
    await Promise.all([first.release(), next.release()]);
    for (const t of await Promise.all(heavyWaiters)) await t.release();
  });
});
