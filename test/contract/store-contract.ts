/**
 * The store contract: one suite, run against every SlotStore implementation (MemoryStore and RedisStore).
 * `f.sleep` moves the store's time: a ManualClock for MemoryStore, real time for Redis (whose scripts read TIME).
 * Messages (grants, queue news) are awaited on real time for both: MemoryStore sends them on a microtask.
 * On real time, the steps that must happen before a TTL runs out have half a second or more to spare (a busy machine
 * can stall a test for a good part of that); a sleep meant to outlast a TTL is longer than it, so a stall only helps.
 */
import { describe, expect, it, beforeEach, afterEach } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  UNKNOWN_FLOOR,
  type LoadExchange,
  type LeaseRef,
  type AcquireTarget,
  type EnqueueOptions,
  type Listening,
  type SlotStore,
  type WaiterRef,
} from '../../packages/slotgate/src/store/store.js';

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
const w = (channelId: string, token: string, max = 1): WaiterRef => ({ channelId, token, max });
const queueOpts = (maxWaiting: number, ttlMs = 60_000): EnqueueOptions => ({
  maxWaiting,
  ttlMs,
  leaseTtlMs: 60_000,
});
/** The claim deadline the fixtures give their store. */
export const CLAIM_MS = 800;
/** Lets messages in flight arrive (a microtask for MemoryStore, a pub/sub delivery for Redis). */
const settle = () => sleep(50);

async function until(check: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('the expected message did not arrive');
    await sleep(5);
  }
}

/** `loadSummary`: the store has `exchangeLoads` (Redis), and the summary's part of the contract runs. */
export function runStoreContract(
  name: string,
  make: () => Promise<StoreFixture>,
  { loadSummary = false } = {},
): void {
  describe(`SlotStore contract: ${name}`, () => {
    let f: StoreFixture;
    let store: SlotStore;
    beforeEach(async () => {
      f = await make();
      store = f.store;
    });
    const listening: Listening[] = [];
    afterEach(async () => {
      for (const l of listening.splice(0)) await l.stop();
      await f.close();
    });

    /** A release sent at once (its answer). */
    const release = (lease: LeaseRef, ttlMs = 60_000) => store.release(lease, ttlMs).done;
    /** A claim of a grant: one renewal of its token; true when the grant was still there. */
    const claim = async (lease: LeaseRef, ttlMs: number) => (await store.renew([lease], ttlMs)).length === 0;

    /** What one instance hears: its grants and the channels where a queue formed. */
    function listen(instanceId: string) {
      const heard = { grants: [] as [string, string][], queued: [] as string[] };
      const l = store.listen(instanceId, {
        grant: ({ channelId, token }) => void heard.grants.push([channelId, token]),
        queued: (channelId) => heard.queued.push(channelId),
        resync: () => {},
      });
      listening.push(l);
      return { ...heard, ready: l.ready, grants: heard.grants, queued: heard.queued };
    }

    let filled = 0;
    /** Takes `n` slots of the channel (max `max`) under tokens of instance `owner`; returns the tokens. */
    async function fill(channelId: string, n: number, max = n, owner = 'holder'): Promise<string[]> {
      const tokens: string[] = [];
      for (let i = 0; i < n; i++) {
        const token = `${owner}:${++filled}`;
        expect(await store.acquireFirst(one(channelId, max), opts(token))).toEqual(['acquired']);
        tokens.push(token);
      }
      return tokens;
    }

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
      expect(await release({ channelId: 'a', token: 'x:1' })).toBe(true);
      expect(await release({ channelId: 'a', token: 'x:1' })).toBe(false);
      expect(await store.acquireFirst(one('a', 1), opts('x:2'))).toEqual(['acquired']);
      expect((await store.readLoads(['a'])).get('a')!.active).toBe(1);
    });

    it('releasing a token that never held a slot changes nothing', async () => {
      await store.acquireFirst(one('a', 2), opts('x:1'));
      expect(await release({ channelId: 'a', token: 'nobody:1' })).toBe(false);
      expect(await release({ channelId: 'never-used', token: 'x:1' })).toBe(false);
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
      const load = (await store.readLoads(['c'])).get('c')!;
      expect(load.coolingDown).toBe(true);
      expect(load.cooldownRemainingMs).toBeGreaterThan(25_000);
      await store.clearCooldown('c');
      expect((await store.readLoads(['c'])).get('c')!.coolingDown).toBe(false);
      expect(await store.acquireFirst(one('c', 5), opts('t:3'))).toEqual(['acquired']);
    });

    it('a cooldown ends by itself after its length', async () => {
      await store.setCooldown('short', 800, 'brief');
      expect(await store.acquireFirst(one('short', 1), opts('t:1'))).toEqual(['cooling']);
      await f.sleep(900);
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
      // as the admission pass calls it: at most maxChannelsPerAcquire channels per call (1 on Cluster)
      const codes: string[] = [];
      for (let i = 0; i < targets.length && codes.at(-1) !== 'acquired'; i += store.maxChannelsPerAcquire) {
        codes.push(
          ...(await store.acquireFirst(targets.slice(i, i + store.maxChannelsPerAcquire), opts('walk:1'))),
        );
      }
      expect(codes).toEqual(['full', 'cooling', 'acquired']);
      if (store.maxChannelsPerAcquire < targets.length) {
        await expect(store.acquireFirst(targets, opts('walk:x'))).rejects.toThrow(RangeError);
      }
      const loads = await store.readLoads(['full', 'cool', 'free', 'never']);
      expect([...loads.values()].map((l) => l.active)).toEqual([1, 0, 1, 0]);
      expect(await store.acquireFirst([{ channelId: 'full', max: 1 }], opts('walk:2'))).toEqual(['full']);
      expect(await store.acquireFirst([], opts('walk:3'))).toEqual([]);
    });

    it('a registration runs out after its own TTL, whatever the TTLs of those around it', async () => {
      await fill('x', 1);
      expect(await store.enqueue(w('x', 'x:1'), queueOpts(5, 800))).toBe('queued');
      expect(await store.enqueue(w('x', 'x:2'), queueOpts(5))).toBe('queued');
      expect(await store.enqueue(w('x', 'x:3'), queueOpts(5, 800))).toBe('queued');
      await f.sleep(900); // x:1's and x:3's registrations ran out, x:2's did not
      expect(await store.pollWaiter(w('x', 'x:3'), 60_000)).toBe('gone'); // behind a live one
      expect(await store.pollWaiter(w('x', 'x:2'), 60_000)).toBe('queued');
      expect(await store.pollWaiter(w('x', 'x:1'), 60_000)).toBe('gone');
    });

    it('the queue admits up to max waiting; leaving frees a place; registrations expire', async () => {
      // the engine gives every registration of a store the same lifetime (keyTtlMs: wait timeout + margin); a Redis
      // store counts the live registrations of a queue by the lifetime of the one that asks (and the loads by its
      // latest), exact when they share one, as here
      const short = queueOpts(2, 800);
      await fill('w', 1);
      expect(await store.enqueue(w('w', 'w:1'), short)).toBe('queued');
      expect(await store.enqueue(w('w', 'w:2'), short)).toBe('queued');
      expect(await store.enqueue(w('w', 'w:3'), short)).toBe('queue_full');
      expect((await store.readLoads(['w'])).get('w')!.waiting).toBe(2);
      expect(await store.leaveQueue(w('w', 'w:1'), 60_000)).toBe(false);
      expect(await store.leaveQueue(w('w', 'w:1'), 60_000)).toBe(false);
      expect(await store.enqueue(w('w', 'w:3'), short)).toBe('queued');
      expect(await store.enqueue(w('w', 'w:4'), short)).toBe('queue_full');
      await f.sleep(900); // w:2's and w:3's registrations expired
      expect((await store.readLoads(['w'])).get('w')!.waiting).toBe(0);
      expect(await store.enqueue(w('w', 'w:4'), short)).toBe('queued');
      expect(await store.enqueue(w('w', 'w:5'), short)).toBe('queued');
      expect(await store.enqueue(w('w', 'w:6'), short)).toBe('queue_full');
    });

    it('20 concurrent enqueues against max waiting 3 register exactly 3', async () => {
      await fill('burst', 1);
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => store.enqueue(w('burst', `b:${i}`), queueOpts(3))),
      );
      expect(results.filter((r) => r === 'queued')).toHaveLength(3);
      expect(results.filter((r) => r === 'queue_full')).toHaveLength(17);
      expect((await store.readLoads(['burst'])).get('burst')!.waiting).toBe(3);
    });

    it('a waiter with nobody ahead and a slot free holds it at once, with no message', async () => {
      const heard = listen('gi');
      await heard.ready;
      expect(await store.enqueue(w('g0', 'gi:1'), queueOpts(2))).toBe('granted');
      expect((await store.readLoads(['g0'])).get('g0')).toMatchObject({ active: 1, waiting: 0 });
      // the grant is claimed like a lease: renewed, then released
      expect(await store.renew([{ channelId: 'g0', token: 'gi:1' }], 60_000)).toEqual([]);
      expect(await release({ channelId: 'g0', token: 'gi:1' })).toBe(true);
      await settle();
      expect(heard.grants).toEqual([]);
    });

    it('releases grant the slots to the waiters in arrival order, each told on its instance', async () => {
      const a = listen('ia');
      const b = listen('ib');
      await Promise.all([a.ready, b.ready]);
      const [h1, h2] = await fill('fifo', 2);
      expect(await store.enqueue(w('fifo', 'ib:1', 2), queueOpts(5))).toBe('queued');
      expect(await store.enqueue(w('fifo', 'ia:1', 2), queueOpts(5))).toBe('queued');
      expect(await store.enqueue(w('fifo', 'ib:2', 2), queueOpts(5))).toBe('queued');
      await release({ channelId: 'fifo', token: h1! }, 60_000);
      await until(() => b.grants.length === 1);
      expect(b.grants).toEqual([['fifo', 'ib:1']]);
      expect(a.grants).toEqual([]);
      await release({ channelId: 'fifo', token: h2! }, 60_000);
      await until(() => a.grants.length === 1);
      expect(a.grants).toEqual([['fifo', 'ia:1']]);
      expect(b.grants).toEqual([['fifo', 'ib:1']]);
      // each grant holds a slot until it is claimed or its deadline passes; the third waiter still waits
      expect((await store.readLoads(['fifo'])).get('fifo')).toMatchObject({ active: 2, waiting: 1 });
      expect(await store.pollWaiter(w('fifo', 'ib:1', 2), 60_000)).toBe('granted');
      expect(await store.pollWaiter(w('fifo', 'ib:2', 2), 60_000)).toBe('queued');
      expect(await store.pollWaiter(w('fifo', 'ib:9', 2), 60_000)).toBe('gone');
    });

    it('a waiter stands as of when its request arrived, up to 50 ms before its registration', async () => {
      const a = listen('ar');
      await a.ready;
      const [h] = await fill('arrive', 1, 1);
      expect(await store.enqueue(w('arrive', 'ar:first', 1), queueOpts(10))).toBe('queued');
      await f.sleep(100);
      // arrived 10 s ago: it stands 50 ms back, still behind the one registered 100 ms before
      expect(
        await store.enqueue(w('arrive', 'ar:capped', 1), { ...queueOpts(10), arrivedMsAgo: 10_000 }),
      ).toBe('queued');
      expect(await store.enqueue(w('arrive', 'ar:late', 1), queueOpts(10))).toBe('queued');
      // arrived 30 ms ago: ahead of the one registered just before it, which arrived then
      expect(await store.enqueue(w('arrive', 'ar:early', 1), { ...queueOpts(10), arrivedMsAgo: 30 })).toBe(
        'queued',
      );
      let holder = h!;
      for (let i = 0; i < 4; i++) {
        await release({ channelId: 'arrive', token: holder }, 60_000);
        await until(() => a.grants.length === i + 1);
        holder = a.grants[i]![1];
      }
      expect(a.grants.map(([, t]) => t)).toEqual(['ar:first', 'ar:capped', 'ar:early', 'ar:late']);
    });

    it('fair share: a freed slot goes to the waiter whose client holds the fewest slots for its weight, oldest first among equals', async () => {
      const a = listen('fs');
      await a.ready;
      // tokens carry their client and weight (core/ids.ts): heavy holds both slots and queues three more
      const heavy = (n: number) => `fs:h${n}~1~heavy`;
      const light = (n: number) => `fs:l${n}~1~light`;
      for (const t of [heavy(1), heavy(2)]) {
        expect(await store.acquireFirst(one('fair', 2), opts(t))).toEqual(['acquired']);
      }
      for (const t of [heavy(3), heavy(4), heavy(5), light(1), light(2)]) {
        expect(await store.enqueue(w('fair', t, 2), queueOpts(10))).toBe('queued');
      }
      // heavy holds 2, light 0: the light waiter goes first although three heavy ones are older
      await release({ channelId: 'fair', token: heavy(1) }, 60_000);
      await until(() => a.grants.length === 1);
      expect(a.grants.map(([, t]) => t)).toEqual([light(1)]);
      // heavy 1, light 1: equals, the oldest (heavy) goes
      await release({ channelId: 'fair', token: heavy(2) }, 60_000);
      await until(() => a.grants.length === 2);
      expect(a.grants.map(([, t]) => t)).toEqual([light(1), heavy(3)]);
      // heavy 1 (h3), light 1 (l1): the light grant ends, light 0 → the second light waiter
      await release({ channelId: 'fair', token: light(1) }, 60_000);
      await until(() => a.grants.length === 3);
      expect(a.grants.map(([, t]) => t)).toEqual([light(1), heavy(3), light(2)]);
    });

    it('fair share by weight: a client of weight 3 holding 2 slots goes before an older waiter of weight 1 holding 1', async () => {
      const a = listen('fw');
      await a.ready;
      const big = (n: number) => `fw:b${n}~3~big`;
      const small = (n: number) => `fw:s${n}~1~small`;
      for (const t of [big(1), big(2), small(1), big(9)]) {
        expect(await store.acquireFirst(one('weighted', 4), opts(t))).toEqual(['acquired']);
      }
      expect(await store.enqueue(w('weighted', small(2), 4), queueOpts(10))).toBe('queued');
      expect(await store.enqueue(w('weighted', big(3), 4), queueOpts(10))).toBe('queued');
      // after big(9) goes: big 2/3, small 1/1 → big's waiter, though small's is older
      await release({ channelId: 'weighted', token: big(9) }, 60_000);
      await until(() => a.grants.length === 1);
      expect(a.grants.map(([, t]) => t)).toEqual([big(3)]);
    });

    it('no barging: while someone waits, an acquire is answered queued, and a slot freed by expiry goes to the oldest', async () => {
      const a = listen('nb');
      await a.ready;
      // a slot held by a lease that ends by expiry (its holder died): nobody released it
      expect(await store.acquireFirst(one('nb', 1), opts('dead:1', 800))).toEqual(['acquired']);
      expect(await store.enqueue(w('nb', 'nb:1', 1), queueOpts(5))).toBe('queued');
      expect(await store.enqueue(w('nb', 'nb:2', 1), queueOpts(5))).toBe('queued');
      await f.sleep(900);
      // the newcomer finds the slot free by expiry, grants it to the oldest waiter, and queues behind the other
      expect(await store.acquireFirst(one('nb', 1), opts('late:1'))).toEqual(['queued']);
      await until(() => a.grants.length === 1);
      expect(a.grants).toEqual([['nb', 'nb:1']]);
      expect((await store.readLoads(['nb'])).get('nb')).toMatchObject({ active: 1, waiting: 1 });
      expect(store.queued('nb')).toBe(true);
    });

    it('a waiter waits under its own max: a head waiting under max 1 is not granted past one slot in use', async () => {
      const a = listen('om');
      await a.ready;
      await fill('om', 1, 2); // one slot of 2 in use
      expect(await store.enqueue(w('om', 'om:1', 1), queueOpts(5))).toBe('queued');
      expect(await store.acquireFirst(one('om', 2), opts('om-late:1'))).toEqual(['queued']);
      await settle();
      expect(a.grants).toEqual([]);
    });

    it('a grant nobody claims passes to the next waiter after the claim deadline', async () => {
      const a = listen('cl');
      await a.ready;
      const [held] = await fill('cl', 1);
      await store.enqueue(w('cl', 'cl:1', 1), queueOpts(5));
      await store.enqueue(w('cl', 'cl:2', 1), queueOpts(5));
      await release({ channelId: 'cl', token: held! }, 60_000);
      await until(() => a.grants.length === 1);
      await f.sleep(CLAIM_MS + 300); // cl:1's instance never claims
      expect(await store.pollWaiter(w('cl', 'cl:2', 1), 60_000)).toBe('granted');
      expect(await store.renew([{ channelId: 'cl', token: 'cl:1' }], 60_000)).toHaveLength(1); // too late
      expect((await store.readLoads(['cl'])).get('cl')).toMatchObject({ active: 1, waiting: 0 });
    });

    it('a claimed grant outlives its claim deadline; once its slot went to another, a late claim gets nothing', async () => {
      const a = listen('ck');
      await a.ready;
      const [h1, h2] = await fill('ck', 2);
      expect(await store.enqueue(w('ck', 'ck:1', 2), queueOpts(5))).toBe('queued');
      expect(await store.enqueue(w('ck', 'ck:2', 2), queueOpts(5))).toBe('queued');
      await release({ channelId: 'ck', token: h1! }, 60_000);
      await release({ channelId: 'ck', token: h2! }, 60_000);
      await until(() => a.grants.length === 2);
      expect(await claim({ channelId: 'ck', token: 'ck:1' }, 60_000)).toBe(true);
      await f.sleep(CLAIM_MS + 300); // ck:2 was never claimed: its deadline passed
      // a newcomer finds the channel full, sweeps the unclaimed grant and takes its slot
      expect(await store.acquireFirst(one('ck', 2), opts('ck-late:1'))).toEqual(['acquired']);
      expect(await claim({ channelId: 'ck', token: 'ck:2' }, 60_000)).toBe(false);
      expect(await claim({ channelId: 'ck', token: 'ck:never' }, 60_000)).toBe(false);
      expect((await store.readLoads(['ck'])).get('ck')).toMatchObject({ active: 2, waiting: 0 });
      expect(await release({ channelId: 'ck', token: 'ck:1' })).toBe(true);
    });

    it('a waiter that leaves gives its grant back, and it passes on at once', async () => {
      const a = listen('lv');
      await a.ready;
      const [held] = await fill('lv', 1);
      await store.enqueue(w('lv', 'lv:1', 1), queueOpts(5));
      await store.enqueue(w('lv', 'lv:2', 1), queueOpts(5));
      await release({ channelId: 'lv', token: held! }, 60_000);
      await until(() => a.grants.length === 1);
      expect(await store.leaveQueue(w('lv', 'lv:1', 1), 60_000)).toBe(true);
      await until(() => a.grants.length === 2);
      expect(a.grants).toEqual([
        ['lv', 'lv:1'],
        ['lv', 'lv:2'],
      ]);
      expect((await store.readLoads(['lv'])).get('lv')).toMatchObject({ active: 1, waiting: 0 });
    });

    it('requeue keeps the place: a waiter moved to a new token and a lower max is granted in its turn, under the new max', async () => {
      const a = listen('rq');
      await a.ready;
      const held = await fill('rq', 3);
      for (const n of [1, 2, 3])
        expect(await store.enqueue(w('rq', `rq:${n}`, 3), queueOpts(5))).toBe('queued');
      // the second waiter's channel went from max 3 to max 1: the moved registration keeps its place, behind rq:1
      expect(await store.requeue(w('rq', 'rq:2', 3), w('rq', 'rq:2b', 1), queueOpts(5))).toBe('queued');
      expect(await store.pollWaiter(w('rq', 'rq:2', 3), 60_000)).toBe('gone');
      expect((await store.readLoads(['rq'])).get('rq')).toMatchObject({ active: 3, waiting: 3 });
      await release({ channelId: 'rq', token: held[0]! }, 60_000);
      await until(() => a.grants.length === 1);
      expect(a.grants).toEqual([['rq', 'rq:1']]); // rq:1 still waits under max 3
      await claim({ channelId: 'rq', token: 'rq:1' }, 60_000);
      // three in use: the head now waits under max 1, and rq:3 (max 3) behind it waits too
      await release({ channelId: 'rq', token: held[1]! }, 60_000);
      await release({ channelId: 'rq', token: held[2]! }, 60_000);
      await settle();
      expect(a.grants).toEqual([['rq', 'rq:1']]);
      expect((await store.readLoads(['rq'])).get('rq')).toMatchObject({ active: 1, waiting: 2 });
      await release({ channelId: 'rq', token: 'rq:1' }, 60_000);
      await until(() => a.grants.length === 3);
      expect(a.grants.slice(1)).toEqual([
        ['rq', 'rq:2b'],
        ['rq', 'rq:3'],
      ]);
    });

    it('requeue gives back a grant not yet claimed: the old token can no longer claim it, the new one waits at the head', async () => {
      const a = listen('rg');
      await a.ready;
      const held = await fill('rg', 2);
      expect(await store.enqueue(w('rg', 'rg:1', 2), queueOpts(5))).toBe('queued');
      expect(await store.enqueue(w('rg', 'rg:2', 2), queueOpts(5))).toBe('queued');
      await release({ channelId: 'rg', token: held[0]! }, 60_000);
      await until(() => a.grants.length === 1); // rg:1 granted under max 2, not claimed yet
      expect(await store.requeue(w('rg', 'rg:1', 2), w('rg', 'rg:1b', 1), queueOpts(5))).toBe('queued');
      expect(await claim({ channelId: 'rg', token: 'rg:1' }, 60_000)).toBe(false);
      expect((await store.readLoads(['rg'])).get('rg')).toMatchObject({ active: 1, waiting: 2 });
      await release({ channelId: 'rg', token: held[1]! }, 60_000);
      await until(() => a.grants.length === 3);
      expect(a.grants).toEqual([
        ['rg', 'rg:1'],
        ['rg', 'rg:1b'],
        ['rg', 'rg:2'],
      ]);
    });

    it('requeue of a waiter the queue lost joins at the tail, bounded by max waiting; a raised max is granted at once', async () => {
      await fill('rl', 1);
      expect(await store.enqueue(w('rl', 'rl:1', 1), queueOpts(2))).toBe('queued');
      expect(await store.requeue(w('rl', 'rl:lost', 1), w('rl', 'rl:2', 1), queueOpts(2))).toBe('queued');
      expect(await store.requeue(w('rl', 'rl:lost', 1), w('rl', 'rl:3', 1), queueOpts(2))).toBe('queue_full');
      expect(await store.pollWaiter(w('rl', 'rl:3', 1), 60_000)).toBe('gone');
      // rl:1's channel went from max 1 to 2: moved, it takes the slot now free under the new max
      expect(await store.requeue(w('rl', 'rl:1', 1), w('rl', 'rl:1b', 2), queueOpts(2))).toBe('granted');
      expect((await store.readLoads(['rl'])).get('rl')).toMatchObject({ active: 2, waiting: 1 });
    });

    it('when a queue forms, each instance holding a slot of the channel is told once', async () => {
      const h = listen('hq');
      const o = listen('oq');
      await Promise.all([h.ready, o.ready]);
      await fill('qf', 2, 2, 'hq');
      expect(await store.enqueue(w('qf', 'oq:1', 2), queueOpts(5))).toBe('queued');
      expect(await store.enqueue(w('qf', 'oq:2', 2), queueOpts(5))).toBe('queued');
      await until(() => h.queued.length > 0);
      await settle();
      expect(h.queued).toEqual(['qf']);
      expect(o.queued).toEqual([]);
      expect(store.queued('qf')).toBe(true);
    });

    it('readLoads returns one load per distinct channel, zeros for unknown channels', async () => {
      await fill('l1', 4, 4);
      await store.enqueue(w('l1', 'w:1', 4), queueOpts(5));
      const loads = await store.readLoads(['l1', 'unknown', 'l1']);
      expect(loads.size).toBe(2);
      expect(loads.get('l1')).toEqual({ active: 4, waiting: 1, coolingDown: false, cooldownRemainingMs: 0 });
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

    it("readHolders counts each channel's live slots by the instance of their tokens, grants included", async () => {
      // a lease that expires drops out
      expect(await store.acquireFirst(one('hd', 5), opts('inst-c:1', 300))).toEqual(['acquired']);
      await f.sleep(600);
      await fill('hd', 2, 5, 'inst-a');
      await fill('hd', 1, 5, 'inst:b'); // an instance id may hold a colon: the token's last one splits it
      // a grant not yet claimed counts for its waiter's instance
      const [held] = await fill('hg', 1, 1, 'inst-a');
      expect(await store.enqueue(w('hg', 'inst-w:1', 1), queueOpts(3))).toBe('queued');
      await release({ channelId: 'hg', token: held! }, 60_000);
      const holders = await store.readHolders(['hd', 'hg', 'none', 'hd']);
      expect([...holders.keys()]).toEqual(['hd', 'hg', 'none']);
      expect(Object.fromEntries(holders.get('hd')!)).toEqual({ 'inst-a': 2, 'inst:b': 1 });
      expect(Object.fromEntries(holders.get('hg')!)).toEqual({ 'inst-w': 1 });
      expect(holders.get('none')!.size).toBe(0);
      expect((await store.readHolders([])).size).toBe(0);
      // one read per channel, under load_read
      const before = store.commands.load_read;
      await store.readHolders(['hd', 'hg', 'none']);
      expect(store.commands.load_read - before).toBe(3);
    });

    it('the high-water mark: the most slots held at once, after admissions, grants and restores, over the last minute or two', async () => {
      const a = listen('pk');
      await a.ready;
      // three admissions on max 4, two released: the mark keeps the three
      const [t1, t2] = await fill('pk', 3, 4);
      await release({ channelId: 'pk', token: t1! });
      await release({ channelId: 'pk', token: t2! });
      // a waiter with nobody ahead, under a max of 3, is granted the slot at once: a grant is noted too
      const pg = await fill('pg', 2, 2);
      expect(await store.enqueue(w('pg', 'pk:w', 3), queueOpts(5))).toBe('granted');
      // a restore takes leases back whatever the load: the mark shows the channel above its max of 1
      const [pr] = await fill('pr', 1, 1);
      expect(await store.reclaim([{ channelId: 'pr', token: 'back:1', max: 1 }], 60_000, true)).toEqual([]);
      // all released: what the mark says, it noted (a read never reports less than the live slots)
      for (const token of [...pg, 'pk:w']) await release({ channelId: 'pg', token });
      for (const token of [pr!, 'back:1']) await release({ channelId: 'pr', token });
      const peaks = await store.readPeaks(['pk', 'pg', 'pr', 'idle', 'pk']);
      expect([...peaks.keys()]).toEqual(['pk', 'pg', 'pr', 'idle']);
      expect([...peaks.values()].map((p) => p.peak)).toEqual([3, 3, 2, 0]);
      for (const { windowMs } of peaks.values()) {
        expect(windowMs).toBeGreaterThanOrEqual(60_000);
        expect(windowMs).toBeLessThanOrEqual(120_000);
      }
      expect((await store.readLoads(['pk'])).get('pk')!.active).toBe(1);
      // a refused acquire and a renewal add nothing: the mark stays
      const [held] = await fill('pf', 1, 1);
      expect(await store.acquireFirst(one('pf', 1), opts('pf:x'))).toEqual(['full']);
      expect(await store.renew([{ channelId: 'pf', token: held! }], 60_000)).toEqual([]);
      expect((await store.readPeaks(['pf'])).get('pf')!.peak).toBe(1);
      // one read-only call per batch of channels (per channel on Cluster), under load_read
      const before = store.commands.load_read;
      await store.readPeaks(['pk', 'pg']);
      expect(store.commands.load_read - before).toBe(store.maxChannelsPerAcquire === 1 ? 2 : 1);
    });

    it('channel ids with braces, colons and spaces stay separate', async () => {
      const ids = ['a{b}', 'a', 'x:y', 'with space', '%7B'];
      for (const id of ids)
        expect(await store.acquireFirst(one(id, 1), opts(`id:${id}`))).toEqual(['acquired']);
      for (const id of ids)
        expect(await store.acquireFirst(one(id, 1), opts(`again:${id}`))).toEqual(['full']);
      const loads = await store.readLoads(ids);
      expect([...loads.values()].map((l) => l.active)).toEqual([1, 1, 1, 1, 1]);
      const holders = await store.readHolders(ids);
      expect(ids.map((id) => [...holders.get(id)!.values()])).toEqual(ids.map(() => [1]));
      const peaks = await store.readPeaks(ids);
      expect(ids.map((id) => peaks.get(id)!.peak)).toEqual([1, 1, 1, 1, 1]);
    });

    it('counts commands by purpose', async () => {
      // the first admitting command of a Redis connection checks the store's epoch first (redis.md)
      await store.acquireFirst(one('warm', 1), opts('warm:1'));
      const before = { ...store.commands };
      await store.acquireFirst(one('k', 1), opts('k:1'));
      await release({ channelId: 'k', token: 'k:1' });
      await store.enqueue(w('k', 'k:w'), queueOpts(1, 1000));
      await store.leaveQueue(w('k', 'k:w'), 60_000);
      await store.setCooldown('k', 1000, 'r');
      await store.readLoads(['k', 'j']);
      const after = store.commands;
      expect(after.acquire - before.acquire).toBe(1);
      expect(after.release - before.release).toBe(1);
      // the enqueue is granted at once (the slot is free): on Redis the leave's ZREM finds no member, and the script
      // gives the grant back
      expect(after.wait - before.wait).toBe(store.kind === 'redis' ? 3 : 2);
      // Redis also notes the cooldown's end in the load summary (HSET + PEXPIRE), for the summary's readers
      expect(after.cooldown - before.cooldown).toBe(store.kind === 'redis' ? 3 : 1);
      // one read-only script call per batch of channels (per channel on Cluster), and on Redis the load summary's
      // first read of the Redis clock (for the cooldown's end)
      const batches = store.maxChannelsPerAcquire === 1 ? 2 : 1;
      expect(after.load_read - before.load_read).toBe(batches + (store.kind === 'redis' ? 1 : 0));
    });
  });

  describe(`adaptive limits: ${name}`, () => {
    let f: StoreFixture;
    let store: SlotStore;
    beforeEach(async () => {
      f = await make();
      store = f.store;
    });
    afterEach(() => f.close());

    const law = { floor: 1, ceiling: 4, probeAfter: 30, tolerance: 2 };
    const adaptive = (channelId: string): AcquireTarget[] => [{ channelId, max: 4, floor: 1 }];
    const over = { signal: { kind: 'overloaded' as const }, law, heldMs: 10 };
    /** Fills the channel with `n` slots under its adaptive limit. */
    async function take(channelId: string, n: number, from = 0): Promise<string[]> {
      const tokens = Array.from({ length: n }, (_, i) => `ad:${from + i}`);
      for (const t of tokens)
        expect(await store.acquireFirst(adaptive(channelId), opts(t))).toEqual(['acquired']);
      return tokens;
    }

    it('an overload lowers the limit, and the acquire admits under it; without a floor the max applies', async () => {
      expect(store.limitOf('ad')).toBeUndefined();
      const [first] = await take('ad', 4);
      // refused with 4 in flight: 3
      expect(
        await store.release({ channelId: 'ad', token: first! }, 60_000, { floor: 1, report: over }).done,
      ).toBe(true);
      expect(store.limitOf('ad')).toBe(3);
      expect((await store.readLimits(['ad', 'other'])).get('ad')).toBe(3);
      expect((await store.readLimits(['ad', 'other'])).has('other')).toBe(false);
      expect(await store.acquireFirst(adaptive('ad'), opts('ad:x'))).toEqual(['full']);
      // a caller that does not enforce the limit admits up to the max
      expect(await store.acquireFirst(one('ad', 4), opts('ad:y'))).toEqual(['acquired']);
    });

    it('grants follow the limit too: a waiter is granted only below it', async () => {
      const tokens = await take('gr', 4);
      const waiter = { channelId: 'gr', token: 'gw:1', max: 4, floor: 1 };
      expect(await store.enqueue(waiter, queueOpts(5))).toBe('queued');
      // 4 in flight, one refused: the limit is 3, and the 3 left fill it: nothing to grant
      await store.release({ channelId: 'gr', token: tokens[0]! }, 60_000, { floor: 1, report: over }).done;
      expect(await store.pollWaiter(waiter, 60_000)).toBe('queued');
      // one more back, with nothing to report: a slot under the limit, granted
      await store.release({ channelId: 'gr', token: tokens[1]! }, 60_000, { floor: 1 }).done;
      expect(await store.pollWaiter(waiter, 60_000)).toBe('granted');
    });

    it('a grant passed on by a call that cannot tell the limit (a waiter gone) stays under the stored limit', async () => {
      const tokens = await take('gone', 4);
      await store.release({ channelId: 'gone', token: tokens[0]! }, 60_000, { floor: 1, report: over }).done;
      expect(store.limitOf('gone')).toBe(3);
      const waiters = ['gw:1', 'gw:2', 'gw:3'].map((token) => ({
        channelId: 'gone',
        token,
        max: 4,
        floor: 1,
      }));
      for (const waiter of waiters) expect(await store.enqueue(waiter, queueOpts(5))).toBe('queued');
      // a slot back under the limit: granted to the oldest waiter, 3 held again
      await store.release({ channelId: 'gone', token: tokens[1]! }, 60_000, { floor: 1 }).done;
      expect(await store.pollWaiter(waiters[0]!, 60_000)).toBe('granted');
      // its waiter is gone: the grant passes on, to one waiter only
      const gone = { channelId: 'gone', token: 'gw:1', max: 0, floor: UNKNOWN_FLOOR };
      expect(await store.leaveQueue(gone, 60_000)).toBe(true);
      expect(await store.pollWaiter(waiters[1]!, 60_000)).toBe('granted');
      expect(await store.pollWaiter(waiters[2]!, 60_000)).toBe('queued');
      expect((await store.readLoads(['gone'])).get('gone')!.active).toBe(3);
    });

    it('a report of a slot not held changes nothing', async () => {
      const [t] = await take('nh', 1);
      await store.release({ channelId: 'nh', token: t! }, 60_000).done;
      await store.release({ channelId: 'nh', token: t! }, 60_000, { floor: 1, report: over }).done;
      expect((await store.readLimits(['nh'])).has('nh')).toBe(false);
    });

    it('successes at full use with requests waiting raise it again, never past the max', async () => {
      const tokens = await take('up', 4);
      await store.release({ channelId: 'up', token: tokens[0]! }, 60_000, { floor: 1, report: over }).done;
      expect(store.limitOf('up')).toBe(3);
      const ok = { signal: { kind: 'ok' as const }, law: { ...law, probeAfter: 1 }, heldMs: 10 };
      const waiter = { channelId: 'up', token: 'uw:1', max: 4, floor: 1 };
      expect(await store.enqueue(waiter, queueOpts(5))).toBe('queued');
      // 3 in flight at a limit of 3 with a waiter: +1/3 each, and the level that failed is tried after one success
      for (const t of tokens.slice(1)) {
        await store.release({ channelId: 'up', token: t }, 60_000, { floor: 1, report: ok }).done;
      }
      expect(store.limitOf('up')).toBe(3);
      expect((await store.readLimits(['up'])).get('up')).toBeGreaterThan(3);
    });
  });

  // a store without a summary: the load view reads readLoads instead (covered above)
  if (!loadSummary) return;
  describe(`load summary: ${name}`, () => {
    let f: StoreFixture;
    let store: SlotStore;
    let exchange: SlotStore['exchangeLoads'];
    beforeEach(async () => {
      f = await make();
      store = f.store;
      exchange = store.exchangeLoads.bind(store);
    });
    afterEach(async () => {
      await f.close();
    });

    const counts = (entries: Record<string, [number, number]>) =>
      new Map(Object.entries(entries).map(([id, [active, waiting]]) => [id, { active, waiting }]));
    const shown = (loads: Map<string, { active: number; waiting: number }>) =>
      Object.fromEntries([...loads].map(([id, l]) => [id, [l.active, l.waiting]]));

    it('sums what every instance reports, per channel, and reads any channel (0 for none) in one exchange', async () => {
      await exchange({
        instanceId: 'A',
        mode: 'changes',
        counts: counts({ x: [2, 1], y: [1, 0] }),
        keepMs: 60_000,
        read: [],
      });
      const b = await exchange({
        instanceId: 'B',
        mode: 'changes',
        counts: counts({ x: [3, 0] }),
        keepMs: 60_000,
        read: ['x', 'y', 'z'],
      });
      expect(shown(b)).toEqual({ x: [5, 1], y: [1, 0], z: [0, 0] });
      expect(b.get('x')!.coolingDown).toBe(false);
    });

    it("a change replaces the instance's earlier count (absolute, so an exchange sent twice changes nothing)", async () => {
      await exchange({
        instanceId: 'A',
        mode: 'changes',
        counts: counts({ x: [2, 0] }),
        keepMs: 60_000,
        read: [],
      });
      await exchange({
        instanceId: 'B',
        mode: 'changes',
        counts: counts({ x: [1, 0] }),
        keepMs: 60_000,
        read: [],
      });
      const change = {
        instanceId: 'A',
        mode: 'changes' as const,
        counts: counts({ x: [4, 2] }),
        read: ['x'],
      };
      expect(shown(await exchange(change))).toEqual({ x: [5, 2] });
      expect(shown(await exchange(change))).toEqual({ x: [5, 2] });
      const none = await exchange({
        instanceId: 'A',
        mode: 'changes',
        counts: counts({ x: [0, 0] }),
        read: ['x'],
      });
      expect(shown(none)).toEqual({ x: [1, 0] });
    });

    it('a count of zero takes the channel out; leaving takes everything out', async () => {
      await exchange({
        instanceId: 'A',
        mode: 'changes',
        counts: counts({ x: [2, 0], y: [1, 1] }),
        keepMs: 60_000,
        read: [],
      });
      await exchange({
        instanceId: 'B',
        mode: 'changes',
        counts: counts({ y: [1, 0] }),
        keepMs: 60_000,
        read: [],
      });
      const zeroed = await exchange({
        instanceId: 'A',
        mode: 'changes',
        counts: counts({ x: [1, 0], y: [0, 0] }),
        read: ['x', 'y'],
      });
      expect(shown(zeroed)).toEqual({ x: [1, 0], y: [1, 0] });
      const left = await exchange({ instanceId: 'A', mode: 'leave', counts: new Map(), read: ['x', 'y'] });
      expect(shown(left)).toEqual({ x: [0, 0], y: [1, 0] });
    });

    it('an instance that stops exchanging lapses: reads leave its counts out; its next exchange puts them all back', async () => {
      await exchange({
        instanceId: 'dead',
        mode: 'changes',
        counts: counts({ x: [3, 1], y: [1, 0] }),
        keepMs: 300,
        read: [],
      });
      await exchange({
        instanceId: 'live',
        mode: 'changes',
        counts: counts({ x: [1, 0] }),
        keepMs: 60_000,
        read: [],
      });
      const early = await exchange({
        instanceId: 'live',
        mode: 'changes',
        counts: new Map(),
        read: ['x', 'y'],
      });
      expect(shown(early)).toEqual({ x: [4, 1], y: [1, 0] });
      await f.sleep(600);
      const lapsed = await exchange({
        instanceId: 'live',
        mode: 'changes',
        counts: new Map(),
        read: ['x', 'y'],
      });
      expect(shown(lapsed)).toEqual({ x: [1, 0], y: [0, 0] });
      // the lapsed instance comes back: a change of one channel puts all of its counts in again (no resync needed)
      await exchange({
        instanceId: 'dead',
        mode: 'changes',
        counts: counts({ x: [2, 0] }),
        keepMs: 60_000,
        read: ['x'],
      });
      const seen = await exchange({
        instanceId: 'live',
        mode: 'changes',
        counts: new Map(),
        read: ['x', 'y'],
      });
      expect(shown(seen)).toEqual({ x: [3, 0], y: [1, 0] });
    });

    it("shows a channel's cooldown with its remaining time until it ends or is cleared", async () => {
      await store.setCooldown('hot', 5_000, 'upstream 429');
      const cooling = await exchange({
        instanceId: 'A',
        mode: 'changes',
        counts: new Map(),
        read: ['hot', 'cold'],
      });
      expect(cooling.get('hot')!.coolingDown).toBe(true);
      expect(cooling.get('hot')!.cooldownRemainingMs).toBeGreaterThan(0);
      expect(cooling.get('hot')!.cooldownRemainingMs).toBeLessThanOrEqual(5_000);
      expect(cooling.get('cold')!.coolingDown).toBe(false);
      await store.clearCooldown('hot');
      const cleared = await exchange({ instanceId: 'A', mode: 'changes', counts: new Map(), read: ['hot'] });
      expect(cleared.get('hot')).toMatchObject({ coolingDown: false, cooldownRemainingMs: 0 });
    });

    it('a change sent while a read waits to build a missing snapshot goes out after it: the read never holds it', async () => {
      await exchange({ instanceId: 'Z', mode: 'changes', counts: counts({ x: [1, 0] }), read: [] });
      // A's read finds no snapshot (a max age never asked before) and builds it with a second call; A's change of x,
      // sent meanwhile, must not be in what that read returns (A's view adds it from its own counters)
      const [read] = await Promise.all([
        exchange({ instanceId: 'A', mode: 'changes', counts: new Map(), read: ['x'], maxAgeMs: 60_000 }),
        exchange({ instanceId: 'A', mode: 'changes', counts: counts({ x: [3, 0] }), read: [] }),
      ]);
      expect(shown(read)).toEqual({ x: [1, 0] });
      const now = await exchange({ instanceId: 'A', mode: 'changes', counts: new Map(), read: ['x'] });
      expect(shown(now)).toEqual({ x: [4, 0] });
    });

    it('a snapshot carries the cooldown ends as they were when it was built', async () => {
      const through = async (maxAgeMs: number) =>
        (
          await exchange({ instanceId: 'A', mode: 'changes', counts: new Map(), read: ['hot'], maxAgeMs })
        ).get('hot')!;
      expect((await through(800)).coolingDown).toBe(false); // a snapshot built before the cooldown
      await store.setCooldown('hot', 30_000, 'upstream 429');
      // this store's own cooldown shows at once, over any snapshot that may predate it
      expect((await through(800)).coolingDown).toBe(true);
      // once this store's note of it is over (a second, or the greatest max age asked for), so is any such snapshot:
      // a snapshot built now carries the cooldown's end
      await f.sleep(1100);
      const built = await through(800);
      expect(built.coolingDown).toBe(true);
      expect(built.cooldownRemainingMs).toBeGreaterThan(20_000);
      expect(built.cooldownRemainingMs).toBeLessThanOrEqual(30_000);
    });

    it('costs one command per exchange, whatever the number of channels read', async () => {
      const ids = Array.from({ length: 300 }, (_, i) => `c${i}`);
      await exchange({
        instanceId: 'A',
        mode: 'changes',
        counts: counts({ c1: [1, 0] }),
        keepMs: 60_000,
        read: [],
      });
      const before = store.commands.load_read;
      await exchange({ instanceId: 'A', mode: 'changes', counts: counts({ c2: [1, 0] }), read: ids });
      await exchange({ instanceId: 'A', mode: 'changes', counts: new Map(), read: ids });
      // a change and a read: one script call; a read of the fleet's counts as they are now (no max age): one script
      // call (a TIME rides along at most once every 5 s)
      expect(store.commands.load_read - before).toBeGreaterThanOrEqual(2);
      expect(store.commands.load_read - before).toBeLessThanOrEqual(3);
      // through a snapshot: the read that finds none is a GET and the script call that builds it, the next a GET
      const shared = {
        instanceId: 'B',
        mode: 'changes',
        counts: new Map(),
        read: ids,
        maxAgeMs: 60_000,
      } as const;
      const atShared = store.commands.load_read;
      expect(shown(await exchange(shared))).toMatchObject({ c1: [1, 0], c2: [1, 0], c3: [0, 0] });
      expect(shown(await exchange(shared))).toMatchObject({ c1: [1, 0], c2: [1, 0], c3: [0, 0] });
      expect(store.commands.load_read - atShared).toBeGreaterThanOrEqual(3);
      expect(store.commands.load_read - atShared).toBeLessThanOrEqual(4);
    });

    it('readers share a snapshot up to maxAgeMs old; what the reader itself changed since is read exactly', async () => {
      const long = 60_000;
      await exchange({ instanceId: 'A', mode: 'changes', counts: counts({ x: [2, 0] }), read: [] });
      await exchange({ instanceId: 'C', mode: 'changes', counts: counts({ z: [1, 0] }), read: [] });
      const read = (instanceId: string, maxAgeMs: number, more: Partial<LoadExchange> = {}) =>
        exchange({
          instanceId,
          mode: 'changes',
          counts: new Map(),
          read: ['x', 'y', 'z'],
          maxAgeMs,
          ...more,
        }).then(shown);
      // B's read builds the snapshot; A and C change x, y and z after it
      expect(await read('B', long)).toEqual({ x: [2, 0], y: [0, 0], z: [1, 0] });
      await exchange({ instanceId: 'A', mode: 'changes', counts: counts({ x: [5, 1] }), read: [] });
      await exchange({
        instanceId: 'C',
        mode: 'changes',
        counts: counts({ y: [1, 0], z: [0, 0] }),
        read: [],
      });
      // B sees the snapshot; A sees its own change of x exactly and C's changes as of the snapshot
      expect(await read('B', long)).toEqual({ x: [2, 0], y: [0, 0], z: [1, 0] });
      expect(await read('A', long)).toEqual({ x: [5, 1], y: [0, 0], z: [1, 0] });
      // a change and a read in one exchange: its own part is exact at once, the others' as of the snapshot (C's y
      // came after it)
      expect(await read('A', long, { counts: counts({ y: [3, 0] }) })).toEqual({
        x: [5, 1],
        y: [3, 0],
        z: [1, 0],
      });
      // no max age reads the summary itself
      expect(await read('B', 0)).toEqual({ x: [5, 1], y: [4, 0], z: [0, 0] });
      expect(await read('B', long)).toEqual({ x: [2, 0], y: [0, 0], z: [1, 0] }); // the snapshot is still there
      // a reader that allows less never gets an older snapshot; once its own is that old, its read builds a new one
      expect(await read('B', 10)).toEqual({ x: [5, 1], y: [4, 0], z: [0, 0] });
      await exchange({ instanceId: 'C', mode: 'changes', counts: counts({ z: [2, 0] }), read: [] });
      await f.sleep(30);
      expect(await read('B', 10)).toEqual({ x: [5, 1], y: [4, 0], z: [2, 0] });
      // after a report that zeroes a channel, the reporter's own part is exact too
      await exchange({
        instanceId: 'A',
        mode: 'changes',
        counts: counts({ x: [0, 0], y: [1, 0] }),
        read: [],
      });
      expect(await read('A', long)).toEqual({ x: [0, 0], y: [1, 0], z: [1, 0] });
      expect(await read('B', long)).toEqual({ x: [2, 0], y: [0, 0], z: [1, 0] });
    });
  });
}
