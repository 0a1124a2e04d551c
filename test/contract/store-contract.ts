/**
 * The store contract: one suite, run against every SlotStore implementation (MemoryStore and RedisStore).
 * `sleep` moves the store's time: a ManualClock for MemoryStore, real time for Redis (whose scripts read TIME).
 * On real time, the steps that must happen before a TTL runs out have half a second or more to spare (a busy machine
 * can stall a test for a good part of that); a sleep meant to outlast a TTL is longer than it, so a stall only helps.
 */
import { describe, expect, it, beforeEach, afterEach } from 'vitest';
import type { AcquireTarget, SlotStore } from '../../packages/slotgate/src/store/store.js';

export interface StoreFixture {
  store: SlotStore;
  sleep(ms: number): Promise<void>;
  close(): Promise<void>;
}

const opts = (token: string, leaseTtlMs = 60_000, checkCooldown = true) => ({
  token,
  leaseTtlMs,
  checkCooldown,
});
const one = (channelId: string, max: number): AcquireTarget[] => [{ channelId, max }];

export function runStoreContract(name: string, make: () => Promise<StoreFixture>): void {
  describe(`SlotStore contract: ${name}`, () => {
    let f: StoreFixture;
    let store: SlotStore;
    beforeEach(async () => {
      f = await make();
      store = f.store;
    });
    afterEach(async () => {
      await f.close();
    });

    it('acquires up to max and replies full beyond it', async () => {
      const replies = [];
      for (let i = 0; i < 4; i++) replies.push(await store.acquireFirst(one('a', 3), opts(`i:${i}`)));
      expect(replies).toEqual([['acquired'], ['acquired'], ['acquired'], ['full']]);
      expect((await store.readLoads(['a'])).get('a')).toMatchObject({
        active: 3,
        waiting: 0,
        coolingDown: false,
      });
    });

    it('max 1 admits exactly one of many concurrent acquires', async () => {
      const replies = await Promise.all(
        Array.from({ length: 30 }, (_, i) => store.acquireFirst(one('solo', 1), opts(`c:${i}`))),
      );
      expect(replies.filter((r) => r[0] === 'acquired')).toHaveLength(1);
      expect(replies.filter((r) => r[0] === 'full')).toHaveLength(29);
    });

    it('50 concurrent acquires on max 5 admit exactly 5', async () => {
      const replies = await Promise.all(
        Array.from({ length: 50 }, (_, i) => store.acquireFirst(one('five', 5), opts(`c:${i}`))),
      );
      expect(replies.filter((r) => r[0] === 'acquired')).toHaveLength(5);
      expect((await store.readLoads(['five'])).get('five')!.active).toBe(5);
    });

    it('release frees the slot for a new acquire; a second release is a no-op', async () => {
      expect(await store.acquireFirst(one('a', 1), opts('x:1'))).toEqual(['acquired']);
      expect(await store.acquireFirst(one('a', 1), opts('x:2'))).toEqual(['full']);
      expect(await store.release({ channelId: 'a', token: 'x:1' })).toBe(true);
      expect(await store.release({ channelId: 'a', token: 'x:1' })).toBe(false);
      expect(await store.acquireFirst(one('a', 1), opts('x:2'))).toEqual(['acquired']);
      expect((await store.readLoads(['a'])).get('a')!.active).toBe(1);
    });

    it('releasing a token that never held a slot changes nothing', async () => {
      await store.acquireFirst(one('a', 2), opts('x:1'));
      expect(await store.release({ channelId: 'a', token: 'nobody:1' })).toBe(false);
      expect(await store.release({ channelId: 'never-used', token: 'x:1' })).toBe(false);
      expect((await store.readLoads(['a'])).get('a')!.active).toBe(1);
    });

    it('an unrenewed lease expires: it stops counting and its slot can be taken again', async () => {
      expect(await store.acquireFirst(one('e', 1), opts('old:1', 800))).toEqual(['acquired']);
      expect(await store.acquireFirst(one('e', 1), opts('new:1', 800))).toEqual(['full']);
      await f.sleep(900);
      expect((await store.readLoads(['e'])).get('e')!.active).toBe(0);
      expect(await store.acquireFirst(one('e', 1), opts('new:1', 60_000))).toEqual(['acquired']);
      // the expired lease was dropped, so it cannot be renewed back to life
      expect(await store.renew([{ channelId: 'e', token: 'old:1' }], 60_000)).toEqual([
        { channelId: 'e', token: 'old:1' },
      ]);
    });

    it('renewal keeps a lease alive past its TTL and reports missing leases as lost', async () => {
      await store.acquireFirst(one('r', 1), opts('keep:1', 800));
      for (let i = 0; i < 4; i++) {
        await f.sleep(300);
        expect(await store.renew([{ channelId: 'r', token: 'keep:1' }], 800)).toEqual([]);
      }
      // at least 1.2 s after acquire, half as long again as its TTL: still held
      expect((await store.readLoads(['r'])).get('r')!.active).toBe(1);
      expect(await store.acquireFirst(one('r', 1), opts('other:1'))).toEqual(['full']);
      const lost = await store.renew(
        [
          { channelId: 'r', token: 'keep:1' },
          { channelId: 'r', token: 'ghost:1' },
          { channelId: 'nothing', token: 'ghost:2' },
        ],
        800,
      );
      expect(lost).toEqual([
        { channelId: 'r', token: 'ghost:1' },
        { channelId: 'nothing', token: 'ghost:2' },
      ]);
    });

    it('renews more than 50 leases across channels in one call', async () => {
      const leases = Array.from({ length: 120 }, (_, i) => ({ channelId: `m${i % 7}`, token: `bulk:${i}` }));
      const replies = await Promise.all(
        leases.map(({ channelId, token }) => store.acquireFirst(one(channelId, 100), opts(token, 1500))),
      );
      expect(replies).toEqual(leases.map(() => ['acquired']));
      // renewed 0.8 s or more after the acquires, counted 1.6 s or more after them: past the acquires' TTL
      await f.sleep(800);
      expect(await store.renew(leases, 1500)).toEqual([]);
      await f.sleep(800);
      const loads = await store.readLoads(['m0', 'm1', 'm2', 'm3', 'm4', 'm5', 'm6']);
      expect([...loads.values()].reduce((n, l) => n + l.active, 0)).toBe(120);
    });

    it('a cooling channel replies cooling; with the check off it admits; clearing ends it', async () => {
      await store.setCooldown('c', 30_000, 'upstream 429');
      expect(await store.acquireFirst(one('c', 5), opts('t:1'))).toEqual(['cooling']);
      expect(await store.acquireFirst(one('c', 5), opts('t:2', 60_000, false))).toEqual(['acquired']);
      const cd = await store.readCooldown('c');
      expect(cd?.reason).toBe('upstream 429');
      expect(cd!.remainingMs).toBeGreaterThan(25_000);
      expect(cd!.remainingMs).toBeLessThanOrEqual(30_000);
      const load = (await store.readLoads(['c'])).get('c')!;
      expect(load.coolingDown).toBe(true);
      expect(load.cooldownRemainingMs).toBeGreaterThan(25_000);
      await store.clearCooldown('c');
      expect(await store.readCooldown('c')).toBeNull();
      expect(await store.acquireFirst(one('c', 5), opts('t:3'))).toEqual(['acquired']);
    });

    it('a cooldown ends by itself after its length', async () => {
      await store.setCooldown('short', 800, 'brief');
      expect(await store.acquireFirst(one('short', 1), opts('t:1'))).toEqual(['cooling']);
      await f.sleep(900);
      expect(await store.readCooldown('short')).toBeNull();
      expect((await store.readLoads(['short'])).get('short')!.coolingDown).toBe(false);
      expect(await store.acquireFirst(one('short', 1), opts('t:1'))).toEqual(['acquired']);
    });

    it('acquireFirst walks channels in order and stops at the first admission', async () => {
      await store.acquireFirst(one('full', 1), opts('pre:1'));
      await store.setCooldown('cool', 30_000, 'x');
      const targets = [
        { channelId: 'full', max: 1 },
        { channelId: 'cool', max: 3 },
        { channelId: 'free', max: 2 },
        { channelId: 'never', max: 2 },
      ];
      expect(await store.acquireFirst(targets, opts('walk:1'))).toEqual(['full', 'cooling', 'acquired']);
      const loads = await store.readLoads(['full', 'cool', 'free', 'never']);
      expect([...loads.values()].map((l) => l.active)).toEqual([1, 0, 1, 0]);
      expect(await store.acquireFirst([{ channelId: 'full', max: 1 }], opts('walk:2'))).toEqual(['full']);
      expect(await store.acquireFirst([], opts('walk:3'))).toEqual([]);
    });

    it('the waiter guard admits up to max waiting; unregister frees a place; registrations expire', async () => {
      expect(await store.registerWaiter('w', 'w:1', 2, 60_000)).toBe(true);
      expect(await store.registerWaiter('w', 'w:2', 2, 800)).toBe(true);
      expect(await store.registerWaiter('w', 'w:3', 2, 60_000)).toBe(false);
      expect((await store.readLoads(['w'])).get('w')!.waiting).toBe(2);
      await store.unregisterWaiter('w', 'w:1');
      await store.unregisterWaiter('w', 'w:1');
      expect(await store.registerWaiter('w', 'w:3', 2, 60_000)).toBe(true);
      expect(await store.registerWaiter('w', 'w:4', 2, 60_000)).toBe(false);
      await f.sleep(900); // w:2 expired
      expect((await store.readLoads(['w'])).get('w')!.waiting).toBe(1);
      expect(await store.registerWaiter('w', 'w:4', 2, 60_000)).toBe(true);
    });

    it('20 concurrent waiter registrations against max waiting 3 register exactly 3', async () => {
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => store.registerWaiter('burst', `b:${i}`, 3, 60_000)),
      );
      expect(results.filter(Boolean)).toHaveLength(3);
      expect((await store.readLoads(['burst'])).get('burst')!.waiting).toBe(3);
    });

    it('readLoads returns one load per distinct channel, zeros for unknown channels', async () => {
      await store.acquireFirst(one('l1', 4), opts('a:1'));
      await store.acquireFirst(one('l1', 4), opts('a:2'));
      await store.registerWaiter('l1', 'w:1', 5, 60_000);
      const loads = await store.readLoads(['l1', 'unknown', 'l1']);
      expect(loads.size).toBe(2);
      expect(loads.get('l1')).toEqual({ active: 2, waiting: 1, coolingDown: false, cooldownRemainingMs: 0 });
      expect(loads.get('unknown')).toEqual({
        active: 0,
        waiting: 0,
        coolingDown: false,
        cooldownRemainingMs: 0,
      });
      expect((await store.readLoads([])).size).toBe(0);
    });

    it('readLoads of 125 channels returns all 125 loads', async () => {
      const ids = Array.from({ length: 125 }, (_, i) => `ch-${i}`);
      await store.acquireFirst(one('ch-124', 2), opts('late:1'));
      const loads = await store.readLoads(ids);
      expect(loads.size).toBe(125);
      expect(loads.get('ch-124')!.active).toBe(1);
      expect(loads.get('ch-0')!.active).toBe(0);
    });

    it('channel ids with braces, colons and spaces stay separate', async () => {
      const ids = ['a{b}', 'a', 'x:y', 'with space', '%7B'];
      for (const id of ids)
        expect(await store.acquireFirst(one(id, 1), opts(`id:${id}`))).toEqual(['acquired']);
      for (const id of ids)
        expect(await store.acquireFirst(one(id, 1), opts(`again:${id}`))).toEqual(['full']);
      const loads = await store.readLoads(ids);
      expect([...loads.values()].map((l) => l.active)).toEqual([1, 1, 1, 1, 1]);
    });

    it('counts commands by purpose', async () => {
      const before = { ...store.commands };
      await store.acquireFirst(one('k', 1), opts('k:1'));
      await store.release({ channelId: 'k', token: 'k:1' });
      await store.registerWaiter('k', 'w', 1, 1000);
      await store.unregisterWaiter('k', 'w');
      await store.setCooldown('k', 1000, 'r');
      await store.readLoads(['k', 'j']);
      const after = store.commands;
      expect(after.acquire - before.acquire).toBe(1);
      expect(after.release - before.release).toBe(1);
      expect(after.wait - before.wait).toBe(2);
      expect(after.cooldown - before.cooldown).toBe(1);
      expect(after.load_read - before.load_read).toBe(1 + 3 * 2);
    });
  });
}
