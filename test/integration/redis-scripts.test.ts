/**
 * The Lua scripts, called directly on a plain ioredis client against the real redis-server (no RedisStore in
 * between): edge cases of acquire, renew and registerWaiter, and the key-expiry rule (a key's expiry is set and
 * only ever extended).
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { SCRIPTS, loadLua } from '../../packages/slotgate/src/store/redis/scripts.js';
import { redisMs } from '../../packages/slotgate/src/store/redis/redis-time.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';

let client: Redis;
let keys: KeyBuilder;

beforeAll(async () => {
  client = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
});

afterAll(() => {
  client.disconnect();
});

beforeEach(() => {
  keys = new KeyBuilder(uniquePrefix('scripts'));
});

afterEach(async () => {
  const left = await client.keys(keys.pattern());
  if (left.length) await client.del(...left);
});

/** The Redis clock in ms, the same way the scripts compute it. */
async function redisNow(): Promise<number> {
  return redisMs(await client.time());
}

const CODE = { full: 0, acquired: 1, cooling: 2 } as const;

interface Target {
  id: string;
  max: number;
}

/**
 * Raw acquire of several requests in one call (the store's coalesced form): returns the flat list of numeric codes
 * (1 acquired, 0 full, 2 cooling), each request's codes ending at its first 1 or after its channels. Every channel
 * asks for an extension of its key's expiry unless `extend` is false.
 */
async function acquireMany(
  requests: { token: string; targets: Target[] }[],
  ttlMs: number,
  { check = true, extend = true }: { check?: boolean; extend?: boolean } = {},
): Promise<number[]> {
  const index = new Map<string, number>();
  const k: string[] = [];
  const channelArgs: number[] = [];
  const requestArgs: (string | number)[] = [];
  for (const { token, targets } of requests) {
    requestArgs.push(token);
    targets.forEach((t, i) => {
      if (!index.has(t.id)) {
        index.set(t.id, index.size + 1);
        k.push(keys.slots(t.id), keys.cooldown(t.id));
        channelArgs.push(t.max, extend ? 1 : 0);
      }
      requestArgs.push(i === targets.length - 1 ? -index.get(t.id)! : index.get(t.id)!);
    });
  }
  const codes = await SCRIPTS.acquireSlots.call(client, k, [
    ttlMs,
    check ? 1 : 0,
    index.size,
    ...channelArgs,
    ...requestArgs,
  ]);
  return codes.map((c) => CODE[c]);
}

/** Raw acquire of one request: its codes. */
async function acquire(targets: Target[], token: string, ttlMs: number, check = true): Promise<number[]> {
  return acquireMany([{ token, targets }], ttlMs, { check });
}

/** Raw renew: leases as [channel, token]; returns the 1-based positions reported lost. */
async function renew(leases: [string, string][], ttlMs: number): Promise<number[]> {
  const index = new Map<string, number>();
  const args: (string | number)[] = [ttlMs];
  for (const [id, token] of leases) {
    const key = keys.slots(id);
    if (!index.has(key)) index.set(key, index.size + 1);
    args.push(index.get(key)!, token);
  }
  return SCRIPTS.renewLeases.call(client, [...index.keys()], args);
}

async function registerWaiter(id: string, token: string, max: number, ttlMs: number): Promise<number> {
  return (await SCRIPTS.registerWaiter.call(client, [keys.waiters(id)], [token, max, ttlMs])) ? 1 : 0;
}

async function members(key: string): Promise<string[]> {
  return (await client.zrange(key, 0, -1)).sort();
}

describe('acquire script', () => {
  it('max 1 admits one token, then replies full without adding the second', async () => {
    expect(await acquire([{ id: 'a', max: 1 }], 'x:1', 60_000)).toEqual([1]);
    expect(await acquire([{ id: 'a', max: 1 }], 'x:2', 60_000)).toEqual([0]);
    expect(await members(keys.slots('a'))).toEqual(['x:1']);
  });

  it('scores the lease at Redis TIME + ttl', async () => {
    const before = await redisNow();
    await acquire([{ id: 'a', max: 3 }], 'x:1', 45_000);
    const after = await redisNow();
    const score = Number(await client.zscore(keys.slots('a'), 'x:1'));
    expect(score).toBeGreaterThanOrEqual(before + 45_000);
    expect(score).toBeLessThanOrEqual(after + 45_000);
  });

  it('on missing keys creates the slots set with an expiry and never creates the cooldown key', async () => {
    expect(await client.exists(keys.slots('new'), keys.cooldown('new'))).toBe(0);
    expect(await acquire([{ id: 'new', max: 2 }], 'x:1', 30_000)).toEqual([1]);
    expect(await client.exists(keys.cooldown('new'))).toBe(0);
    const pttl = await client.pttl(keys.slots('new'));
    expect(pttl).toBeGreaterThan(25_000);
    expect(pttl).toBeLessThanOrEqual(30_000);
  });

  it('drops expired members when the set looks full and admits into the freed place', async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('e'), now - 5_000, 'dead:1', now - 1, 'dead:2', now + 60_000, 'live:1');
    expect(await acquire([{ id: 'e', max: 3 }], 'x:1', 60_000)).toEqual([1]);
    // the two expired members are gone, the live one and the new one remain
    expect(await members(keys.slots('e'))).toEqual(['live:1', 'x:1']);
  });

  it('replies full when every member is live, removing nothing', async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('f'), now + 60_000, 'live:1', now + 60_000, 'live:2');
    expect(await acquire([{ id: 'f', max: 2 }], 'x:1', 60_000)).toEqual([0]);
    expect(await members(keys.slots('f'))).toEqual(['live:1', 'live:2']);
  });

  it('leaves expired members alone while the set is not full (they are dropped lazily)', async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('lazy'), now - 5_000, 'dead:1');
    expect(await acquire([{ id: 'lazy', max: 5 }], 'x:1', 60_000)).toEqual([1]);
    expect(await members(keys.slots('lazy'))).toEqual(['dead:1', 'x:1']);
    // and an expired member still counts toward "looks full", which triggers the sweep
    await client.zadd(keys.slots('lazy2'), now - 5_000, 'dead:1');
    expect(await acquire([{ id: 'lazy2', max: 1 }], 'x:1', 60_000)).toEqual([1]);
    expect(await members(keys.slots('lazy2'))).toEqual(['x:1']);
  });

  it('with the cooldown check on, a cooling channel replies cooling and its slots key is not touched', async () => {
    await client.set(keys.cooldown('c'), 'upstream 429', 'PX', 30_000);
    expect(await acquire([{ id: 'c', max: 5 }], 'x:1', 60_000, true)).toEqual([2]);
    expect(await client.exists(keys.slots('c'))).toBe(0);
  });

  it('with the cooldown check off, a cooling channel admits', async () => {
    await client.set(keys.cooldown('c'), 'upstream 429', 'PX', 30_000);
    expect(await acquire([{ id: 'c', max: 5 }], 'x:1', 60_000, false)).toEqual([1]);
    expect(await members(keys.slots('c'))).toEqual(['x:1']);
    // the cooldown itself is left as it was
    expect(await client.get(keys.cooldown('c'))).toBe('upstream 429');
  });

  it('multi-channel acquire walks in order and stops at the first admission', async () => {
    await acquire([{ id: 'full', max: 1 }], 'pre:1', 60_000);
    await client.set(keys.cooldown('cool'), 'x', 'PX', 30_000);
    const targets = [
      { id: 'full', max: 1 },
      { id: 'cool', max: 4 },
      { id: 'free', max: 2 },
      { id: 'after', max: 2 },
    ];
    expect(await acquire(targets, 'walk:1', 60_000)).toEqual([0, 2, 1]);
    expect(await members(keys.slots('full'))).toEqual(['pre:1']);
    expect(await members(keys.slots('free'))).toEqual(['walk:1']);
    // channels after the admitting one are never touched
    expect(await client.exists(keys.slots('after'), keys.slots('cool'))).toBe(0);
  });

  it('multi-channel acquire replies one code per channel when none admits', async () => {
    await acquire([{ id: 'p', max: 1 }], 'pre:1', 60_000);
    await acquire([{ id: 'q', max: 1 }], 'pre:2', 60_000);
    await client.set(keys.cooldown('r'), 'x', 'PX', 30_000);
    const targets = [
      { id: 'p', max: 1 },
      { id: 'r', max: 1 },
      { id: 'q', max: 1 },
    ];
    expect(await acquire(targets, 'walk:1', 60_000)).toEqual([0, 2, 0]);
    expect(await members(keys.slots('p'))).toEqual(['pre:1']);
    expect(await members(keys.slots('q'))).toEqual(['pre:2']);
  });

  it('several requests in one call share the count: max 2 admits the first two, the third finds it full', async () => {
    const one = (token: string) => ({ token, targets: [{ id: 'shared', max: 2 }] });
    expect(await acquireMany([one('r:1'), one('r:2'), one('r:3')], 60_000)).toEqual([1, 1, 0]);
    expect(await members(keys.slots('shared'))).toEqual(['r:1', 'r:2']);
  });

  it('several multi-channel requests in one call: each walks its own channels, replies are concatenated', async () => {
    await client.set(keys.cooldown('hot'), 'x', 'PX', 30_000);
    const codes = await acquireMany(
      [
        {
          token: 'a:1',
          targets: [
            { id: 'm', max: 1 },
            { id: 'n', max: 1 },
          ],
        },
        {
          token: 'a:2',
          targets: [
            { id: 'm', max: 1 },
            { id: 'hot', max: 1 },
            { id: 'n', max: 1 },
          ],
        },
        {
          token: 'a:3',
          targets: [
            { id: 'hot', max: 1 },
            { id: 'n', max: 1 },
          ],
        },
        { token: 'a:4', targets: [{ id: 'o', max: 1 }] },
      ],
      60_000,
    );
    // a:1 takes m; a:2 finds m full, hot cooling, takes n; a:3 finds hot cooling and n full; a:4 takes o
    expect(codes).toEqual([1, 0, 2, 1, 2, 0, 1]);
    expect(await members(keys.slots('m'))).toEqual(['a:1']);
    expect(await members(keys.slots('n'))).toEqual(['a:2']);
    expect(await members(keys.slots('o'))).toEqual(['a:4']);
    expect(await client.exists(keys.slots('hot'))).toBe(0);
  });

  it('a channel full before the call is swept once and admits into the expired places only', async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('sw'), now - 1, 'dead:1', now + 60_000, 'live:1');
    const one = (token: string) => ({ token, targets: [{ id: 'sw', max: 2 }] });
    expect(await acquireMany([one('s:1'), one('s:2')], 60_000)).toEqual([1, 0]);
    expect(await members(keys.slots('sw'))).toEqual(['live:1', 's:1']);
  });
});

describe('acquire script: key expiry requests', () => {
  it('without the extension flag an existing key keeps its expiry; with it the key is extended to TTL', async () => {
    await acquire([{ id: 'x', max: 9 }], 'x:1', 60_000);
    await client.pexpire(keys.slots('x'), 10_000);
    expect(
      await acquireMany([{ token: 'x:2', targets: [{ id: 'x', max: 9 }] }], 60_000, { extend: false }),
    ).toEqual([1]);
    expect(await client.pttl(keys.slots('x'))).toBeLessThanOrEqual(10_000);
    expect(await acquireMany([{ token: 'x:3', targets: [{ id: 'x', max: 9 }] }], 60_000)).toEqual([1]);
    expect(await client.pttl(keys.slots('x'))).toBeGreaterThan(50_000);
  });

  it('an empty key always gets an expiry with its first lease, whatever the flag', async () => {
    expect(
      await acquireMany([{ token: 'e:1', targets: [{ id: 'e', max: 2 }] }], 30_000, { extend: false }),
    ).toEqual([1]);
    const pttl = await client.pttl(keys.slots('e'));
    expect(pttl).toBeGreaterThan(25_000);
    expect(pttl).toBeLessThanOrEqual(30_000);
  });
});

describe('renew script', () => {
  it('extends existing leases to Redis TIME + ttl and reports none lost', async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('r'), now + 1_000, 'a:1', now + 2_000, 'a:2');
    await client.zadd(keys.slots('s'), now + 1_000, 'b:1');
    const before = await redisNow();
    expect(
      await renew(
        [
          ['r', 'a:1'],
          ['s', 'b:1'],
          ['r', 'a:2'],
        ],
        50_000,
      ),
    ).toEqual([]);
    const after = await redisNow();
    for (const [id, token] of [
      ['r', 'a:1'],
      ['r', 'a:2'],
      ['s', 'b:1'],
    ] as const) {
      const score = Number(await client.zscore(keys.slots(id), token));
      expect(score).toBeGreaterThanOrEqual(before + 50_000);
      expect(score).toBeLessThanOrEqual(after + 50_000);
    }
  });

  it('reports missing tokens and missing keys as lost and never recreates them', async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('r'), now + 60_000, 'a:1');
    const lost = await renew(
      [
        ['r', 'a:1'],
        ['r', 'ghost:1'],
        ['gone', 'ghost:2'],
        ['r', 'ghost:3'],
      ],
      60_000,
    );
    expect(lost).toEqual([2, 3, 4]);
    expect(await members(keys.slots('r'))).toEqual(['a:1']);
    expect(await client.exists(keys.slots('gone'))).toBe(0);
  });

  it('a lease renewed twice in one batch (score unchanged the second time) is not reported lost', async () => {
    await acquire([{ id: 'r', max: 2 }], 'a:1', 60_000);
    // the second ZADD XX CH in the same script run sets the same score and returns 0; ZSCORE must rescue it
    expect(
      await renew(
        [
          ['r', 'a:1'],
          ['r', 'a:1'],
        ],
        60_000,
      ),
    ).toEqual([]);
  });

  it('an expired member that was already swept cannot be renewed back to life', async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('x'), now - 1_000, 'old:1');
    // a full channel sweeps it
    expect(await acquire([{ id: 'x', max: 1 }], 'new:1', 60_000)).toEqual([1]);
    expect(await renew([['x', 'old:1']], 60_000)).toEqual([1]);
    expect(await members(keys.slots('x'))).toEqual(['new:1']);
  });

  it('renews a batch of 50 leases over several keys in one call', async () => {
    const now = await redisNow();
    const leases: [string, string][] = [];
    for (let i = 0; i < 50; i++) {
      const id = `m${i % 6}`;
      await client.zadd(keys.slots(id), now + 1_000, `bulk:${i}`);
      leases.push([id, `bulk:${i}`]);
    }
    leases.splice(10, 0, ['m0', 'missing:1']);
    expect(await renew(leases, 60_000)).toEqual([11]);
    for (let i = 0; i < 6; i++) expect(await client.pttl(keys.slots(`m${i}`))).toBeGreaterThan(55_000);
  });
});

describe('registerWaiter script', () => {
  it('registers up to max waiting, then replies queue full without adding', async () => {
    expect(await registerWaiter('w', 'w:1', 2, 60_000)).toBe(1);
    expect(await registerWaiter('w', 'w:2', 2, 60_000)).toBe(1);
    expect(await registerWaiter('w', 'w:3', 2, 60_000)).toBe(0);
    expect(await members(keys.waiters('w'))).toEqual(['w:1', 'w:2']);
  });

  it('drops expired registrations when the queue looks full and registers into the freed place', async () => {
    const now = await redisNow();
    await client.zadd(keys.waiters('w'), now - 2_000, 'dead:1', now - 1, 'dead:2');
    expect(await registerWaiter('w', 'w:1', 2, 60_000)).toBe(1);
    expect(await members(keys.waiters('w'))).toEqual(['w:1']);
  });

  it('replies queue full when the expired ones do not free enough places', async () => {
    const now = await redisNow();
    await client.zadd(
      keys.waiters('w'),
      now - 2_000,
      'dead:1',
      now + 60_000,
      'live:1',
      now + 60_000,
      'live:2',
    );
    expect(await registerWaiter('w', 'w:1', 2, 60_000)).toBe(0);
    // the sweep still happened, the new waiter was not added
    expect(await members(keys.waiters('w'))).toEqual(['live:1', 'live:2']);
  });

  it('on a missing key creates the waiters set with its registration expiry', async () => {
    expect(await registerWaiter('fresh', 'w:1', 1, 8_000)).toBe(1);
    const pttl = await client.pttl(keys.waiters('fresh'));
    expect(pttl).toBeGreaterThan(5_000);
    expect(pttl).toBeLessThanOrEqual(8_000);
  });
});

describe('key expiry: set, and only ever extended', () => {
  it('acquire with a long TTL then a short TTL does not shorten the slots key', async () => {
    await acquire([{ id: 'k', max: 5 }], 'long:1', 600_000);
    await acquire([{ id: 'k', max: 5 }], 'short:1', 1_000);
    expect(await client.pttl(keys.slots('k'))).toBeGreaterThan(590_000);
  });

  it('acquire with a short TTL then a long TTL extends the slots key', async () => {
    await acquire([{ id: 'k', max: 5 }], 'short:1', 1_000);
    expect(await client.pttl(keys.slots('k'))).toBeLessThanOrEqual(1_000);
    await acquire([{ id: 'k', max: 5 }], 'long:1', 600_000);
    expect(await client.pttl(keys.slots('k'))).toBeGreaterThan(590_000);
  });

  it('acquire puts an expiry on a slots key that had none', async () => {
    await client.zadd(keys.slots('k'), '+inf', 'planted');
    expect(await client.pttl(keys.slots('k'))).toBe(-1);
    await acquire([{ id: 'k', max: 5 }], 'x:1', 20_000);
    const pttl = await client.pttl(keys.slots('k'));
    expect(pttl).toBeGreaterThan(15_000);
    expect(pttl).toBeLessThanOrEqual(20_000);
  });

  it('a full or cooling acquire does not touch the expiry', async () => {
    await acquire([{ id: 'k', max: 1 }], 'x:1', 5_000);
    await client.pexpire(keys.slots('k'), 3_000);
    expect(await acquire([{ id: 'k', max: 1 }], 'x:2', 600_000)).toEqual([0]);
    expect(await client.pttl(keys.slots('k'))).toBeLessThanOrEqual(3_000);
    await client.set(keys.cooldown('k'), 'x', 'PX', 30_000);
    expect(await acquire([{ id: 'k', max: 9 }], 'x:3', 600_000)).toEqual([2]);
    expect(await client.pttl(keys.slots('k'))).toBeLessThanOrEqual(3_000);
  });

  it('renew extends the key to the renewed TTL and a shorter renewal does not shorten it', async () => {
    await acquire([{ id: 'k', max: 5 }], 'x:1', 2_000);
    expect(await renew([['k', 'x:1']], 600_000)).toEqual([]);
    expect(await client.pttl(keys.slots('k'))).toBeGreaterThan(590_000);
    expect(await renew([['k', 'x:1']], 1_000)).toEqual([]);
    expect(await client.pttl(keys.slots('k'))).toBeGreaterThan(590_000);
  });

  it('renew with only lost leases leaves the key expiry alone', async () => {
    await acquire([{ id: 'k', max: 5 }], 'x:1', 2_000);
    expect(await renew([['k', 'ghost:1']], 600_000)).toEqual([1]);
    expect(await client.pttl(keys.slots('k'))).toBeLessThanOrEqual(2_000);
  });

  it('registerWaiter with a long TTL then a short TTL does not shorten the waiters key', async () => {
    expect(await registerWaiter('k', 'w:1', 5, 600_000)).toBe(1);
    expect(await registerWaiter('k', 'w:2', 5, 1_000)).toBe(1);
    expect(await client.pttl(keys.waiters('k'))).toBeGreaterThan(590_000);
    expect(await registerWaiter('k2', 'w:1', 5, 1_000)).toBe(1);
    expect(await registerWaiter('k2', 'w:2', 5, 600_000)).toBe(1);
    expect(await client.pttl(keys.waiters('k2'))).toBeGreaterThan(590_000);
  });

  it('a short-lived slots key disappears by itself once its newest lease has expired', async () => {
    // long enough to see the key right after the call on a busy machine, short enough to wait for
    await acquire([{ id: 'gone', max: 5 }], 'x:1', 600);
    expect(await client.exists(keys.slots('gone'))).toBe(1);
    await expect.poll(() => client.exists(keys.slots('gone')), { timeout: 5_000 }).toBe(0);
  });
});

describe('script sources', () => {
  it('splice the shared Redis-clock helper in place of their include line, once', () => {
    for (const script of Object.values(SCRIPTS)) {
      const source = loadLua(script.file);
      expect(source).not.toMatch(/@include/);
      expect(source.match(/local function redisNow\(\)/g)).toHaveLength(1);
      expect(source.match(/redis\.call\('TIME'\)/g)).toHaveLength(1);
    }
  });
});
