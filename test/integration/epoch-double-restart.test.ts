/**
 * Found by the model tests (test/model, seed 1219724586): Redis restarted empty a second time while an instance's
 * epoch check for the first restart was still under way (in its grace). The check that spanned the loss did not
 * verify, and nothing checked again: the holder's leases stayed lost while another instance made a new epoch and,
 * after its grace, admitted into their slots: two in flight on a channel of max 1.
 */
import { describe, expect, it } from 'vitest';
import { LeaseManager, type LeaseEvent } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { RedisServer } from '../helpers/redis-server.js';
import { uniquePrefix } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';
import { answered, until } from '../helpers/until.js';

const cleanups = useCleanups();

function instance(server: RedisServer, prefix: string, id: string) {
  const events: LeaseEvent[] = [];
  const store = new RedisStore({ url: server.url, prefix, timeoutMs: 500, restartGraceMs: 1_500 });
  const leases = new LeaseManager({
    store,
    instanceId: id,
    leaseTtlMs: () => 30_000, // no renewal during the test: only a restore can put the lease back
    onEvent: (e) => events.push(e),
  });
  cleanups.push(() => store.close());
  cleanups.push(() => leases.close(500));
  return { store, leases, events };
}

describe('Redis restarted empty twice, the second time within the first restart’s grace', () => {
  it('the holder registers its lease again before another instance admits on the channel', async () => {
    const server = await RedisServer.start();
    cleanups.push(() => server.stop());
    const prefix = uniquePrefix('twice');
    const a = instance(server, prefix, 'a');
    const b = instance(server, prefix, 'b');
    const target = [{ channelId: 'r', max: 1 }];
    const held = (await a.leases.acquireFirst(target, true)).lease!;
    expect(held).toBeDefined();
    await b.store.ready();

    await server.restart();
    // a finds the new epoch and restores its lease; its check now waits out the grace
    await until(() => a.events.some((e) => e.type === 'leases_restored'), 'a restoring its lease');
    await server.restart();

    const reply = await answered(() => b.leases.acquireFirst(target, true));
    expect(reply.replies).toEqual(['full']);
    expect(held.lost.aborted).toBe(false);
  }, 30_000);
});
