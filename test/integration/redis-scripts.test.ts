/**
 * The Lua scripts, called directly on a plain ioredis client against the real redis-server (no RedisStore in
 * between): edge cases of acquire, renew and the wait queue (enqueue, grants, poll, leave, and the messages they
 * publish), the key-expiry rule (a key's expiry is set and only ever extended), and that every call stays within one
 * channel's hash slot on Cluster.
 */
import { createHash } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { fixFindings } from '../../packages/slotgate/src/store/redis/doctor/fix.js';
import { KeyBuilder, encodeChannelId } from '../../packages/slotgate/src/store/redis/keys.js';
import { MAX_REGISTRATION_LIVE_MS } from '../../packages/slotgate/src/store/redis/queues/members.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { SCRIPTS, loadLua } from '../../packages/slotgate/src/store/redis/scripts.js';
import { PEAK_MINUTE_MS } from '../../packages/slotgate/src/store/peak.js';
import { redisMs } from '../../packages/slotgate/src/store/redis/loads/redis-offset.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
let client: Redis;
let prefix: string;
let keys: KeyBuilder;

beforeAll(async () => {
  client = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
});

afterAll(() => {
  client.disconnect();
});

beforeEach(() => {
  prefix = uniquePrefix('scripts');
  keys = new KeyBuilder(prefix);
});

afterEach(async () => {
  const left = await client.keys(keys.pattern());
  if (left.length) await client.del(...left);
});

/** The Redis clock in ms, the same way the scripts compute it. */
async function redisNow(): Promise<number> {
  return redisMs(await client.time());
}

/** The Redis clock in µs (the unit of a queue's arrival scores). */
async function redisNowUs(): Promise<number> {
  const [s, us] = await client.time();
  return Number(s) * 1_000_000 + Number(us);
}

/** Waits until the Redis clock has passed `ms` (an order of events, not a time window). */
async function untilRedisPasses(ms: number): Promise<void> {
  await expect.poll(redisNow, { timeout: 10_000, interval: 20 }).toBeGreaterThan(ms);
}

const CODE = { full: 0, acquired: 1, cooling: 2, queued: 3 } as const;
/** The claim deadline and lease TTL the scripts get unless a test passes its own. */
const CLAIM_MS = 5_000;
const LEASE_TTL_MS = 60_000;
/**
 * How long a test waiter's registration lives past its arrival in the queue unless the test names its own: its member
 * says it ("<max>|<live>|<token>"), and every script reads it from there.
 */
const LIVE_MS = 60_000;
/** The longest a registration lives (includes/queue.lua MAX_LIVE_MS): every member older goes in one ZREMRANGEBYSCORE. */
const MAX_LIVE_MS = MAX_REGISTRATION_LIVE_MS;

interface Target {
  id: string;
  max: number;
}

/**
 * Raw acquire of several requests in one call (the store's coalesced form): returns the flat list of numeric codes
 * (1 acquired, 0 full, 2 cooling, 3 queued), each request's codes ending at its first 1 or after its channels.
 */
async function acquireMany(
  requests: { token: string; targets: Target[] }[],
  ttlMs: number,
  { check = true, claimMs = CLAIM_MS }: { check?: boolean; claimMs?: number } = {},
): Promise<number[]> {
  const index = new Map<string, number>();
  const k: string[] = [];
  const channelArgs: (string | number)[] = [];
  const requestArgs: (string | number)[] = [];
  for (const { token, targets } of requests) {
    requestArgs.push(token);
    targets.forEach((t, i) => {
      if (!index.has(t.id)) {
        index.set(t.id, index.size + 1);
        k.push(keys.slots(t.id), keys.cooldown(t.id), keys.queue(t.id), keys.peak(t.id), keys.limit(t.id));
        channelArgs.push(t.max, t.id, '');
      }
      requestArgs.push(i === targets.length - 1 ? -index.get(t.id)! : index.get(t.id)!);
    });
  }
  const codes = await SCRIPTS.acquireSlots.call(client, k, [
    ttlMs,
    check ? 1 : 0,
    index.size,
    claimMs,
    keys.grants(),
    ...channelArgs,
    ...requestArgs,
  ]);
  return codes.map((c) => CODE[c]);
}

/** Raw acquire of one request: its codes. */
async function acquire(targets: Target[], token: string, ttlMs: number, check = true): Promise<number[]> {
  return acquireMany([{ token, targets }], ttlMs, { check });
}

/** Fills the channel (max = the number of tokens) with live leases. */
async function hold(id: string, ...tokens: string[]): Promise<void> {
  for (const token of tokens)
    expect(await acquire([{ id, max: tokens.length }], token, LEASE_TTL_MS)).toEqual([1]);
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

interface QueueOptions {
  claimMs?: number;
  leaseTtlMs?: number;
  /** The lifetime the waiter's member names: how long its registration lives past its arrival (LIVE_MS unless told). */
  liveMs?: number;
}

/** A waiter's member in a queue: the max it waits under, how long its registration lives, and its token. */
const member = (token: string, max: number, live = LIVE_MS) => `${max}|${live}|${token}`;
/** The lifetime a member names. */
const liveOfMember = (m: string) => Number(m.split('|')[1]);
const queueKeys = (id: string) => [keys.slots(id), keys.queue(id), keys.peak(id), keys.limit(id)];
/** The member or token first, then the grant arguments (no adaptive floor). */
const queueArgs = (id: string, first: string, o: Omit<QueueOptions, 'liveMs'>) => [
  first,
  o.claimMs ?? CLAIM_MS,
  o.leaseTtlMs ?? LEASE_TTL_MS,
  keys.grants(),
  id,
  '',
];

/** Registers a waiter under the member `max|liveMs|token`. */
function enqueue(
  id: string,
  token: string,
  max: number,
  { maxWaiting = 10, ...o }: QueueOptions & { maxWaiting?: number } = {},
) {
  return SCRIPTS.enqueueWaiter.call(client, queueKeys(id), [
    ...queueArgs(id, member(token, max, o.liveMs), o),
    maxWaiting,
    0,
  ]);
}

/** releaseSlot as another instance's release (none of the waiters is the releaser's): whether the slot was held. */
async function releaseSlot(id: string, token: string, o: Omit<QueueOptions, 'liveMs'> = {}) {
  const reply = await SCRIPTS.releaseSlot.call(client, queueKeys(id), [...queueArgs(id, token, o), '', '']);
  expect(reply.local).toEqual([]);
  return reply.removed;
}

function pollWaiter(id: string, token: string, max: number, o: QueueOptions = {}) {
  return SCRIPTS.pollWaiter.call(client, queueKeys(id), queueArgs(id, member(token, max, o.liveMs), o));
}

/**
 * Moves `from`'s registration to `to` (both as [token, max], or [token, max, lifetime]): `from`'s member names
 * `liveMs` (LIVE_MS unless told), and `to`'s names `from`'s lifetime unless given its own, as the engine does.
 */
function requeue(
  id: string,
  from: [string, number, number?],
  to: [string, number, number?],
  { maxWaiting = 10, ...o }: QueueOptions & { maxWaiting?: number } = {},
) {
  const fromLive = from[2] ?? o.liveMs ?? LIVE_MS;
  return SCRIPTS.requeueWaiter.call(client, queueKeys(id), [
    member(from[0], from[1], fromLive),
    ...queueArgs(id, member(to[0], to[1], to[2] ?? fromLive), o),
    maxWaiting,
  ]);
}

/** A waiter leaves; `sweep` (default) as one giving up, which also sweeps expired leases; false for a plain leave. */
function leaveQueue(id: string, token: string, max: number, o: QueueOptions = {}) {
  return SCRIPTS.leaveQueue.call(client, queueKeys(id), queueArgs(id, member(token, max, o.liveMs), o));
}

/** The arrival score (µs) of a registration that arrived `ms` ago on the Redis clock. */
async function arrivedAgo(ms: number): Promise<number> {
  return (await redisNowUs()) - ms * 1000;
}

/**
 * Puts a waiter whose registration has run out at the head of the channel's queue: it arrived just over the lifetime
 * its member names ago, so it is dead (arrival <= (now - lifetime) in µs) and older than any waiter that registered
 * since; younger than the longest lifetime (62 s) when it names LIVE_MS, so only a grant loop reaching it drops it.
 */
async function plantExpiredWaiter(id: string, queued: string): Promise<void> {
  await client.zadd(keys.queue(id), ((await redisNow()) - liveOfMember(queued) - 1) * 1000, queued);
}

/** Sets the arrival of a registration already queued under `queued` to `ms` ago on the Redis clock. */
async function arrive(id: string, queued: string, ms: number): Promise<void> {
  expect(await client.zadd(keys.queue(id), 'XX', 'CH', await arrivedAgo(ms), queued)).toBe(1);
}

/**
 * A dead registration that is not the oldest: long:1 (arrived 30 s ago, lives 60 s: live), then short:1 (arrived 6 s
 * ago, lives 5 s: run out), then next:1 (arrived just now, lives 60 s), all under `max`. Returns their members in
 * queue order.
 */
async function deadBehindLive(id: string, max: number): Promise<[string, string, string]> {
  const queued = [member('long:1', max), member('short:1', max, 5_000), member('next:1', max)] as const;
  expect(await enqueue(id, 'long:1', max)).toBe('queued');
  expect(await enqueue(id, 'short:1', max, { liveMs: 5_000 })).toBe('queued');
  expect(await enqueue(id, 'next:1', max)).toBe('queued');
  await arrive(id, queued[0], 30_000);
  await arrive(id, queued[1], 6_000);
  expect(await client.zrange(keys.queue(id), 0, -1)).toEqual(queued);
  return [...queued];
}

/**
 * The commands the scripts run on the channel's queue key while `run` runs, as "<command> <arguments after the key>"
 * with the command in lower case, from MONITOR (a script's commands are shown too). A marker command after `run` says
 * everything before it was seen.
 */
async function queueCommands(id: string, run: () => Promise<unknown>): Promise<string[]> {
  const monitor = await client.monitor();
  cleanups.push(() => monitor.disconnect());
  const key = keys.queue(id);
  const marker = `${prefix}:monitor-marker`;
  const seen: string[][] = [];
  let done = false;
  monitor.on('monitor', (_time: string, args: string[]) => {
    if (args[1] === marker) done = true;
    else if (args[1] === key) seen.push(args);
  });
  // MONITOR shows what runs after it was set up: a first marker says it is
  await client.exists(marker);
  await expect.poll(() => done, { timeout: 10_000, interval: 10 }).toBe(true);
  seen.length = 0;
  done = false;
  await run();
  await client.exists(marker);
  await expect.poll(() => done, { timeout: 10_000, interval: 10 }).toBe(true);
  monitor.disconnect();
  return seen.map(([name, ...rest]) => [name!.toLowerCase(), ...rest.slice(1)].join(' '));
}

/** Every key of the channel's hash tag, whatever its suffix (a script writes its slots and queue keys only). */
async function channelKeys(id: string): Promise<string[]> {
  const tag = keys.slots(id).slice(0, -':slots'.length);
  return (await client.keys(`${tag.replace(/[*?[\]\\]/g, '\\$&')}:*`)).sort();
}

/**
 * Every message published on this test's grants channels, as "<instance> <kind> <token/channel…>", in order; a grant
 * with the default claim deadline reads "<instance> g <token> <channel>", another "<instance> c <ms> <token> …".
 * `settle` publishes a marker after everything the test ran and returns the messages once the marker is back: Redis
 * delivers a connection's messages in publish order, so none published before it is missing.
 */
async function grantsFeed(): Promise<{ settle(): Promise<string[]> }> {
  const sub = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
  cleanups.push(() => sub.disconnect());
  const channelPrefix = keys.grants();
  const seen: string[] = [];
  sub.on('pmessage', (_pattern: string, channel: string, message: string) => {
    const text = message.replace(new RegExp(`^c\n${CLAIM_MS}\n`), 'g\n');
    seen.push(`${channel.slice(channelPrefix.length)} ${text.split('\n').join(' ')}`);
  });
  await sub.psubscribe(`${channelPrefix}*`);
  let markers = 0;
  return {
    async settle() {
      const marker = `~ marker ${++markers}`;
      await client.publish(`${channelPrefix}~`, `marker ${markers}`);
      await expect.poll(() => seen.includes(marker), { timeout: 10_000, interval: 10 }).toBe(true);
      return seen.filter((m) => !m.startsWith('~ marker'));
    },
  };
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
    expect(pttl).toBeGreaterThan(30_000);
    expect(pttl).toBeLessThanOrEqual(37_500);
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

describe('acquire script: key expiry', () => {
  it('an admission extends a key with less than a TTL left to 1.25 TTL, and leaves one with more', async () => {
    await acquire([{ id: 'x', max: 9 }], 'x:1', 60_000);
    await client.pexpire(keys.slots('x'), 10_000);
    expect(await acquire([{ id: 'x', max: 9 }], 'x:2', 60_000)).toEqual([1]);
    const extended = await client.pttl(keys.slots('x'));
    expect(extended).toBeGreaterThan(70_000);
    expect(extended).toBeLessThanOrEqual(75_000);
    await client.pexpire(keys.slots('x'), 65_000);
    expect(await acquire([{ id: 'x', max: 9 }], 'x:3', 60_000)).toEqual([1]);
    expect(await client.pttl(keys.slots('x'))).toBeLessThanOrEqual(65_000);
  });

  it('an empty key gets an expiry with its first lease', async () => {
    expect(await acquire([{ id: 'e', max: 2 }], 'e:1', 30_000)).toEqual([1]);
    const pttl = await client.pttl(keys.slots('e'));
    expect(pttl).toBeGreaterThan(30_000);
    expect(pttl).toBeLessThanOrEqual(37_500);
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

describe('enqueueWaiter script', () => {
  it('a registration behind live waiters sweeps a lease that ran out and grants its slot to the oldest waiter', async () => {
    const feed = await grantsFeed();
    await hold('lx', 'h:1');
    expect(await enqueue('lx', 'a:1', 1)).toBe('queued');
    // the holder died (or was cut off): its lease expired, nobody released it, and a timed out before any poll
    await client.zadd(keys.slots('lx'), 1, 'h:1');
    expect(await enqueue('lx', 'b:1', 1)).toBe('queued');
    expect(await members(keys.slots('lx'))).toEqual(['a:1']);
    expect(await members(keys.queue('lx'))).toEqual([member('b:1', 1)]);
    // b now heads the queue: a, holding the slot, is told a queue formed
    expect(await feed.settle()).toEqual(['h q lx', 'a g a:1 lx', 'a q lx']);
  });

  it('behind live waiters, the registration granted by its own sweep is told so in the reply, not by a message', async () => {
    const feed = await grantsFeed();
    await hold('lz', 'h:1', 'h:2');
    expect(await enqueue('lz', 'a:1', 2)).toBe('queued');
    await client.zadd(keys.slots('lz'), 1, 'h:1', 1, 'h:2');
    expect(await enqueue('lz', 'b:1', 2)).toBe('granted');
    expect((await members(keys.slots('lz'))).sort()).toEqual(['a:1', 'b:1']);
    expect(await feed.settle()).toEqual(['h q lz', 'a g a:1 lz']);
  });

  it('queues behind a full channel up to max waiting, then replies queue full without adding', async () => {
    await hold('w', 'h:1');
    expect(await enqueue('w', 'w:1', 1, { maxWaiting: 2 })).toBe('queued');
    expect(await enqueue('w', 'w:2', 1, { maxWaiting: 2 })).toBe('queued');
    expect(await enqueue('w', 'w:3', 1, { maxWaiting: 2 })).toBe('queue_full');
    expect(await members(keys.queue('w'))).toEqual([member('w:1', 1), member('w:2', 1)]);
    expect(await members(keys.slots('w'))).toEqual(['h:1']);
    // the queue is one key: no other is written for the registrations
    expect(await channelKeys('w')).toEqual([keys.queue('w'), keys.slots('w')].sort());
  });

  it('20 concurrent enqueues with max waiting 3 register exactly 3', async () => {
    await hold('burst', 'h:1');
    const replies = await Promise.all(
      Array.from({ length: 20 }, (_, i) => enqueue('burst', `b:${i}`, 1, { maxWaiting: 3 })),
    );
    expect(replies.filter((r) => r === 'queued')).toHaveLength(3);
    expect(replies.filter((r) => r === 'queue_full')).toHaveLength(17);
    expect(await client.zcard(keys.queue('burst'))).toBe(3);
    expect(await channelKeys('burst')).toEqual([keys.queue('burst'), keys.slots('burst')].sort());
  });

  it('scores a waiter by arrival (µs) in the queue; its registration lives the lifetime its member names past that arrival', async () => {
    await hold('s', 'h:1');
    const beforeUs = await redisNowUs();
    expect(await enqueue('s', 'w:1', 1, { liveMs: 45_000 })).toBe('queued');
    const afterUs = await redisNowUs();
    expect(await members(keys.queue('s'))).toEqual(['1|45000|w:1']);
    const arrival = Number(await client.zscore(keys.queue('s'), member('w:1', 1, 45_000)));
    expect(arrival).toBeGreaterThanOrEqual(beforeUs);
    expect(arrival).toBeLessThanOrEqual(afterUs);
    // arrived 44 s ago: live under a 45 s lifetime
    await client.zadd(keys.queue('s'), await arrivedAgo(44_000), member('w:1', 1, 45_000));
    expect(await pollWaiter('s', 'w:1', 1, { liveMs: 45_000 })).toBe('queued');
    expect(await members(keys.queue('s'))).toEqual([member('w:1', 1, 45_000)]);
    // arrived just over 45 s ago: run out, dropped from the queue
    await client.zadd(keys.queue('s'), ((await redisNow()) - 45_000 - 1) * 1000, member('w:1', 1, 45_000));
    expect(await pollWaiter('s', 'w:1', 1, { liveMs: 45_000 })).toBe('gone');
    expect(await client.exists(keys.queue('s'))).toBe(0);
  });

  it('drops expired registrations when the queue looks full and registers into the freed place', async () => {
    await hold('w', 'h:1');
    const now = await redisNow();
    // both arrived more than their lifetime ago: dead:1 also more than the longest lifetime (dropped before the new
    // one is added), dead:2 within it (dropped when the grant loop reaches it)
    await client.zadd(
      keys.queue('w'),
      (now - MAX_LIVE_MS - 1) * 1000,
      member('dead:1', 1),
      (now - LIVE_MS - 1) * 1000,
      member('dead:2', 1),
    );
    expect(await enqueue('w', 'w:1', 1, { maxWaiting: 2 })).toBe('queued');
    expect(await members(keys.queue('w'))).toEqual([member('w:1', 1)]);
  });

  it('replies queue full when the expired ones do not free enough places', async () => {
    await hold('w', 'h:1');
    const [now, nowUs] = [await redisNow(), await redisNowUs()];
    await client.zadd(
      keys.queue('w'),
      (now - LIVE_MS - 1) * 1000,
      member('dead:1', 1),
      nowUs - 2,
      member('live:1', 1),
      nowUs - 1,
      member('live:2', 1),
    );
    expect(await enqueue('w', 'w:1', 1, { maxWaiting: 2 })).toBe('queue_full');
    // the bound counts live registrations only; the new waiter was not added (the dead one goes when a grant reaches
    // it, or when the queue forms anew)
    expect(await members(keys.queue('w'))).toEqual([
      member('dead:1', 1),
      member('live:1', 1),
      member('live:2', 1),
    ]);
    // a third live place: the dead registration does not take it
    expect(await enqueue('w', 'w:1', 1, { maxWaiting: 3 })).toBe('queued');
  });

  it('a registration expires by itself: the queue then no longer holds it (poll answers gone)', async () => {
    await hold('x', 'h:1');
    expect(await enqueue('x', 'w:1', 1, { liveMs: 100 })).toBe('queued');
    // its end: a lifetime past its arrival
    const arrival = Number(await client.zscore(keys.queue('x'), member('w:1', 1, 100)));
    await untilRedisPasses(Math.ceil(arrival / 1000) + 100);
    expect(await pollWaiter('x', 'w:1', 1, { liveMs: 100 })).toBe('gone');
    expect(await client.exists(keys.queue('x'))).toBe(0);
    // and it no longer takes a place: max waiting 1 admits the next
    expect(await enqueue('x', 'w:2', 1, { maxWaiting: 1, liveMs: 100 })).toBe('queued');
  });

  it('granted at once when a slot is free and nobody waits: the slot is its own until the claim deadline, quietly', async () => {
    const feed = await grantsFeed();
    await hold('g', 'h:1');
    await client.zrem(keys.slots('g'), 'h:1'); // a slot is free; the key is gone with its last member
    const before = await redisNow();
    expect(await enqueue('g', 'w:1', 1, { claimMs: 3_000 })).toBe('granted');
    const after = await redisNow();
    const score = Number(await client.zscore(keys.slots('g'), 'w:1'));
    expect(score).toBeGreaterThanOrEqual(before + 3_000);
    expect(score).toBeLessThanOrEqual(after + 3_000);
    // no queue is left, so nobody is told anything: not the waiter (it has the reply), not the holders
    expect(await client.exists(keys.queue('g'))).toBe(0);
    expect(await feed.settle()).toEqual([]);
  });

  it('a newcomer behind a live waiter queues and takes nothing, even with a slot free; the next look grants the waiter ahead', async () => {
    await hold('n', 'h:1', 'h:2');
    expect(await enqueue('n', 'w:1', 2)).toBe('queued');
    await client.zrem(keys.slots('n'), 'h:1'); // freed without a grant (a release by a store that did not know)
    // behind a live waiter the enqueue checks nothing (a slot freed is granted when it frees): cheap under overload
    expect(await enqueue('n', 'w:2', 2)).toBe('queued');
    expect(await members(keys.slots('n'))).toEqual(['h:2']);
    expect(await members(keys.queue('n'))).toEqual([member('w:1', 2), member('w:2', 2)]);
    // the waiter ahead's safety poll finds the free slot and takes it; the newcomer still waits
    expect(await pollWaiter('n', 'w:1', 2)).toBe('granted');
    expect(await members(keys.slots('n'))).toEqual(['h:2', 'w:1']);
    expect(await members(keys.queue('n'))).toEqual([member('w:2', 2)]);
  });
});

describe('grants: a freed slot goes to the oldest live waiter', () => {
  it('releases grant in arrival order, each told on its own instance channel, exactly once', async () => {
    const feed = await grantsFeed();
    await hold('f', 'h:1');
    for (const token of ['a:1', 'b:1', 'c:1']) expect(await enqueue('f', token, 1)).toBe('queued');
    expect(await releaseSlot('f', 'h:1')).toBe(true);
    expect(await members(keys.slots('f'))).toEqual(['a:1']);
    expect(await releaseSlot('f', 'h:1')).toBe(false); // released before: changes nothing
    expect(await members(keys.slots('f'))).toEqual(['a:1']);
    expect(await releaseSlot('f', 'a:1')).toBe(true);
    expect(await members(keys.slots('f'))).toEqual(['b:1']);
    expect(await releaseSlot('f', 'b:1')).toBe(true);
    expect(await members(keys.slots('f'))).toEqual(['c:1']);
    expect(await client.exists(keys.queue('f'))).toBe(0);
    expect(await releaseSlot('f', 'c:1')).toBe(true);
    expect(await client.exists(keys.slots('f'))).toBe(0);
    expect(await feed.settle()).toEqual(['h q f', 'a g a:1 f', 'b g b:1 f', 'c g c:1 f']);
  });

  it('a grant is a lease until the claim deadline; the instance is the token before its last colon', async () => {
    const feed = await grantsFeed();
    await hold('d', 'h:1');
    expect(await enqueue('d', 'gw-1:host:7', 1)).toBe('queued');
    const before = await redisNow();
    expect(await releaseSlot('d', 'h:1', { claimMs: 2_500 })).toBe(true);
    const after = await redisNow();
    const score = Number(await client.zscore(keys.slots('d'), 'gw-1:host:7'));
    expect(score).toBeGreaterThanOrEqual(before + 2_500);
    expect(score).toBeLessThanOrEqual(after + 2_500);
    // the message names the claim deadline the grant was scored with
    expect(await feed.settle()).toEqual(['h q d', 'gw-1:host c 2500 gw-1:host:7 d']);
  });

  it("a release by a waiter's own instance grants it a full lease, named in the reply, with no message", async () => {
    const feed = await grantsFeed();
    await hold('own', 'gw:1');
    expect(await enqueue('own', 'gw:2', 1)).toBe('queued'); // the releasing instance's own waiter
    expect(await enqueue('own', 'other:1', 1)).toBe('queued');
    const before = await redisNow();
    const reply = await SCRIPTS.releaseSlot.call(client, queueKeys('own'), [
      ...queueArgs('own', 'gw:1', {}),
      'gw',
      '',
    ]);
    const after = await redisNow();
    expect(reply).toEqual({ removed: true, waiting: true, limit: undefined, local: ['gw:2'] }); // other:1 waits
    const score = Number(await client.zscore(keys.slots('own'), 'gw:2'));
    expect(score).toBeGreaterThanOrEqual(before + LEASE_TTL_MS); // a full lease: no claim needed
    expect(score).toBeLessThanOrEqual(after + LEASE_TTL_MS);
    // another instance's waiter still gets a claim deadline and a message
    const next = await SCRIPTS.releaseSlot.call(client, queueKeys('own'), [
      ...queueArgs('own', 'gw:2', {}),
      'gw',
      '',
    ]);
    expect(next).toEqual({ removed: true, waiting: false, limit: undefined, local: [] }); // no live waiter left
    expect(Number(await client.zscore(keys.slots('own'), 'other:1'))).toBeLessThanOrEqual(
      (await redisNow()) + CLAIM_MS,
    );
    expect(await feed.settle()).toEqual(['gw q own', 'other g other:1 own']);
  });

  it('several slots freed at once go to as many waiters, oldest first', async () => {
    const feed = await grantsFeed();
    await hold('m', 'h:1', 'h:2', 'h:3');
    for (const token of ['a:1', 'b:1', 'c:1']) expect(await enqueue('m', token, 3)).toBe('queued');
    await client.zrem(keys.slots('m'), 'h:1', 'h:2'); // two slots freed without a grant
    expect(await releaseSlot('m', 'ghost:1')).toBe(false); // a release that finds nothing still grants what is free
    expect(await members(keys.slots('m'))).toEqual(['a:1', 'b:1', 'h:3']);
    expect(await members(keys.queue('m'))).toEqual([member('c:1', 3)]);
    expect(await feed.settle()).toEqual(['h q m', 'a g a:1 m', 'b g b:1 m']);
  });

  it("respects each waiter's own max; a head that cannot be granted keeps everyone behind it waiting", async () => {
    const feed = await grantsFeed();
    await hold('o', 'h:1', 'h:2', 'h:3');
    expect(await enqueue('o', 'low:1', 2)).toBe('queued'); // waits under a max lowered to 2
    expect(await enqueue('o', 'high:1', 3)).toBe('queued');
    // 2 in use: too many for the head's max 2, and high:1 (max 3) may not pass it
    expect(await releaseSlot('o', 'h:3')).toBe(true);
    expect(await members(keys.slots('o'))).toEqual(['h:1', 'h:2']);
    expect(await members(keys.queue('o'))).toEqual([member('low:1', 2), member('high:1', 3)]);
    // 1 in use: low:1 gets the second slot, high:1 the third (its max allows it)
    expect(await releaseSlot('o', 'h:2')).toBe(true);
    expect(await members(keys.slots('o'))).toEqual(['h:1', 'high:1', 'low:1']);
    expect(await feed.settle()).toEqual(['h q o', 'low g low:1 o', 'high g high:1 o']);
  });

  it('an expired lease is swept for a later waiter under a lower max', async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('sw'), now - 1_000, 'dead:1');
    const nowUs = await redisNowUs();
    await client.zadd(keys.queue('sw'), nowUs - 2, member('a:1', 3), nowUs - 1, member('b:1', 2));
    // a:1 (max 3) fits beside the expired lease; b:1 (max 2) only once it is swept
    expect(await releaseSlot('sw', 'ghost:1')).toBe(false);
    expect(await members(keys.slots('sw'))).toEqual(['a:1', 'b:1']);
    expect(await client.exists(keys.queue('sw'))).toBe(0);
  });

  it("a release that granted its slot under the next waiter's max does not sweep again (a poll does)", async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('sn'), now - 1_000, 'dead:1', now + 60_000, 'h:1');
    const nowUs = await redisNowUs();
    await client.zadd(keys.queue('sn'), nowUs - 2, member('a:1', 2), nowUs - 1, member('b:1', 2));
    // h:1's slot goes to a:1; the channel looks full again (the expired lease counts until swept): b:1 waits
    expect(await releaseSlot('sn', 'h:1')).toBe(true);
    expect(await members(keys.slots('sn'))).toEqual(['a:1', 'dead:1']);
    expect(await members(keys.queue('sn'))).toEqual([member('b:1', 2)]);
    // its safety poll sweeps the expired lease and grants it
    expect(await pollWaiter('sn', 'b:1', 2)).toBe('granted');
    expect(await members(keys.slots('sn'))).toEqual(['a:1', 'b:1']);
  });

  it('an acquire on a full channel whose only queued waiter expired is full, not queued behind the dead one', async () => {
    await hold('ef', 'h:1');
    await plantExpiredWaiter('ef', member('dead:1', 1));
    expect(await acquire([{ id: 'ef', max: 1 }], 'n:1', LEASE_TTL_MS)).toEqual([0]);
    expect(await client.exists(keys.queue('ef'))).toBe(0);
    // a raised max is served at once past it
    await plantExpiredWaiter('ef', member('dead:2', 1));
    expect(await acquire([{ id: 'ef', max: 2 }], 'n:2', LEASE_TTL_MS)).toEqual([1]);
  });

  it('an expired waiter is skipped (and dropped); the next live one is granted', async () => {
    const feed = await grantsFeed();
    await hold('e', 'h:1');
    expect(await enqueue('e', 'live:1', 1)).toBe('queued');
    await plantExpiredWaiter('e', member('dead:1', 1));
    expect(await members(keys.queue('e'))).toEqual([member('dead:1', 1), member('live:1', 1)]);
    expect(await releaseSlot('e', 'h:1')).toBe(true);
    expect(await members(keys.slots('e'))).toEqual(['live:1']);
    expect(await client.exists(keys.queue('e'))).toBe(0);
    expect(await feed.settle()).toEqual(['h q e', 'live g live:1 e']);
  });

  it('a short-lived registration that ran out behind a live long-lived one is not granted when the grant loop reaches it: it is dropped (one ZREM), the next live one granted', async () => {
    const feed = await grantsFeed();
    await hold('ds', 'h:1', 'h:2');
    const [long, short, next] = await deadBehindLive('ds', 2);
    // two slots come free in one call: the loop grants long:1, reaches short:1 with a slot still free, and grants next:1
    await client.zrem(keys.slots('ds'), 'h:2');
    const commands = await queueCommands('ds', async () => expect(await releaseSlot('ds', 'h:1')).toBe(true));
    expect(await members(keys.slots('ds'))).toEqual(['long:1', 'next:1']);
    expect(await client.exists(keys.queue('ds'))).toBe(0);
    // each grant takes its member out, and the dead one goes with a ZREM of its own: the oldest (long:1) is younger
    // than the longest lifetime, so no ZREMRANGEBYSCORE
    expect(commands.filter((c) => c.startsWith('zrem '))).toEqual([
      `zrem ${long}`,
      `zrem ${short}`,
      `zrem ${next}`,
    ]);
    expect(commands.filter((c) => c.startsWith('zremrangebyscore '))).toEqual([]);
    // short:1 was never told of a grant, nor holds one; its poll answers gone
    expect(await feed.settle()).toEqual(['h q ds', 'long g long:1 ds', 'next g next:1 ds']);
    expect(await pollWaiter('ds', 'short:1', 2, { liveMs: 5_000 })).toBe('gone');
    expect(await members(keys.slots('ds'))).toEqual(['long:1', 'next:1']);
  });

  it('a dead registration behind a live head is dropped when the grant loop stops at it as the next head: the live one behind it is left at the head', async () => {
    const feed = await grantsFeed();
    await hold('dh', 'h:1');
    const [, , next] = await deadBehindLive('dh', 1);
    // the freed slot goes to long:1; the channel is full again, and the head the loop would return is short:1: dead
    expect(await releaseSlot('dh', 'h:1')).toBe(true);
    expect(await members(keys.slots('dh'))).toEqual(['long:1']);
    expect(await client.zrange(keys.queue('dh'), 0, -1)).toEqual([next]);
    expect(await releaseSlot('dh', 'long:1')).toBe(true);
    expect(await members(keys.slots('dh'))).toEqual(['next:1']);
    expect(await client.exists(keys.queue('dh'))).toBe(0);
    expect(await feed.settle()).toEqual(['h q dh', 'long g long:1 dh', 'next g next:1 dh']);
  });

  it('a dead registration behind a live head stays in the queue until a grant loop reaches it; its own poll answers gone and takes it out', async () => {
    await hold('dp', 'h:1');
    const [long, short, next] = await deadBehindLive('dp', 1);
    // a poll of the live one behind it: the loop stops at the live head, so short:1 is not reached
    expect(await pollWaiter('dp', 'next:1', 1)).toBe('queued');
    expect(await pollWaiter('dp', 'long:1', 1)).toBe('queued');
    expect(await client.zrange(keys.queue('dp'), 0, -1)).toEqual([long, short, next]);
    // its own poll: gone (enqueue again), and its member goes
    expect(await pollWaiter('dp', 'short:1', 1, { liveMs: 5_000 })).toBe('gone');
    expect(await client.zrange(keys.queue('dp'), 0, -1)).toEqual([long, next]);
    expect(await members(keys.slots('dp'))).toEqual(['h:1']);
    // the same arrival under its member's own lifetime only: the 60 s member of the same token would be live
    await client.zadd(keys.queue('dp'), await arrivedAgo(6_000), member('short:1', 1));
    expect(await pollWaiter('dp', 'short:1', 1)).toBe('queued');
  });

  it.each(['releaseSlot', 'pollWaiter', 'acquireSlots'] as const)(
    'registrations older than the longest lifetime (62 s) go in one ZREMRANGEBYSCORE at the start of the grant loop (%s); a younger dead one goes with a ZREM when reached',
    async (touch) => {
      const feed = await grantsFeed();
      await hold('ob', 'h:1');
      expect(await enqueue('ob', 'live:1', 1)).toBe('queued');
      // dead, older than 62 s, whatever lifetime their member names (the longest included)
      const old = [member('old:1', 1), member('old:2', 1, 5_000), member('old:3', 1, MAX_LIVE_MS)];
      const short = member('short:1', 1, 5_000); // dead, 10 s old
      await client.zadd(
        keys.queue('ob'),
        await arrivedAgo(MAX_LIVE_MS + 8_000),
        old[0]!,
        await arrivedAgo(MAX_LIVE_MS + 1_000),
        old[1]!,
        await arrivedAgo(MAX_LIVE_MS + 500),
        old[2]!,
        await arrivedAgo(10_000),
        short,
      );
      expect(await client.zrange(keys.queue('ob'), 0, -1)).toEqual([...old, short, member('live:1', 1)]);
      if (touch !== 'releaseSlot') await client.zrem(keys.slots('ob'), 'h:1'); // freed unseen: the next look grants it
      const before = await redisNow();
      const commands = await queueCommands('ob', async () => {
        if (touch === 'releaseSlot') expect(await releaseSlot('ob', 'h:1')).toBe(true);
        if (touch === 'pollWaiter') expect(await pollWaiter('ob', 'live:1', 1)).toBe('granted');
        if (touch === 'acquireSlots')
          expect(await acquire([{ id: 'ob', max: 1 }], 'n:1', LEASE_TTL_MS)).toEqual([0]);
      });
      const after = await redisNow();
      expect(await members(keys.slots('ob'))).toEqual(['live:1']);
      expect(await client.exists(keys.queue('ob'))).toBe(0);
      // one ZREMRANGEBYSCORE of the arrivals up to 62 s ago, before any ZREM
      const ranges = commands.filter((c) => c.startsWith('zremrangebyscore '));
      expect(ranges).toHaveLength(1);
      const [, min, max] = ranges[0]!.split(' ');
      expect(min).toBe('-inf');
      expect(Number(max)).toBeGreaterThanOrEqual((before - MAX_LIVE_MS) * 1000);
      expect(Number(max)).toBeLessThanOrEqual((after - MAX_LIVE_MS) * 1000);
      expect(commands.findIndex((c) => c.startsWith('zrem '))).toBeGreaterThan(commands.indexOf(ranges[0]!));
      // then only the younger dead one and the grant, one ZREM each
      expect(commands.filter((c) => c.startsWith('zrem '))).toEqual([
        `zrem ${short}`,
        `zrem ${member('live:1', 1)}`,
      ]);
      expect(await feed.settle()).toEqual([
        'h q ob',
        ...(touch === 'pollWaiter' ? [] : ['live g live:1 ob']),
      ]);
    },
  );

  // (not an enqueue behind live waiters: it checks nothing, see above)
  it.each(['acquireSlots', 'pollWaiter', 'releaseSlot'] as const)(
    'a grant never claimed expires at its claim deadline; the next script touching the channel (%s) grants the slot on',
    async (touch) => {
      const feed = await grantsFeed();
      await hold('u', 'h:1');
      expect(await enqueue('u', 'a:1', 1)).toBe('queued');
      expect(await enqueue('u', 'b:1', 1)).toBe('queued');
      const before = await redisNow();
      expect(await releaseSlot('u', 'h:1', { claimMs: 150 })).toBe(true);
      const after = await redisNow();
      expect(await members(keys.slots('u'))).toEqual(['a:1']);
      const deadline = Number(await client.zscore(keys.slots('u'), 'a:1'));
      expect(deadline).toBeGreaterThanOrEqual(before + 150);
      expect(deadline).toBeLessThanOrEqual(after + 150);
      // a:1 never claims
      await untilRedisPasses(deadline);
      if (touch === 'acquireSlots') expect(await acquire([{ id: 'u', max: 1 }], 'n:1', 60_000)).toEqual([0]);
      if (touch === 'pollWaiter') expect(await pollWaiter('u', 'b:1', 1)).toBe('granted');
      if (touch === 'releaseSlot') expect(await releaseSlot('u', 'ghost:1')).toBe(false);
      expect(await members(keys.slots('u'))).toEqual(['b:1']);
      // the poller learns of its grant from the reply
      const told = {
        acquireSlots: ['b g b:1 u'],
        pollWaiter: [],
        releaseSlot: ['b g b:1 u'],
      };
      expect(await feed.settle()).toEqual(['h q u', 'a c 150 a:1 u', ...told[touch]]);
      // a late claim of the expired grant finds it gone
      expect(await renew([['u', 'a:1']], 60_000)).toEqual([1]);
    },
  );
});

describe('acquireSlots with a queue: no barging', () => {
  it('answers 3 while a live waiter is queued, even with a slot free; the free slot goes to the oldest waiter in that call', async () => {
    const feed = await grantsFeed();
    await hold('nb', 'h:1', 'h:2');
    expect(await enqueue('nb', 'w:1', 2)).toBe('queued');
    expect(await enqueue('nb', 'w:2', 2)).toBe('queued');
    await client.zrem(keys.slots('nb'), 'h:1'); // freed without a grant
    expect(await acquire([{ id: 'nb', max: 2 }], 'n:1', 60_000)).toEqual([3]);
    expect(await members(keys.slots('nb'))).toEqual(['h:2', 'w:1']);
    expect(await members(keys.queue('nb'))).toEqual([member('w:2', 2)]);
    // the next request finds the channel full; it waits in the queue, it does not take the next slot
    expect(await acquire([{ id: 'nb', max: 9 }], 'n:2', 60_000)).toEqual([3]);
    expect(await members(keys.slots('nb'))).toEqual(['h:2', 'w:1']);
    expect(await feed.settle()).toEqual(['h q nb', 'w g w:1 nb']);
  });

  it("a channel full under the request's max is answered from its oldest waiter: nobody is granted, even a waiter under a higher max (the next release grants it)", async () => {
    await hold('fm', 'h:1', 'h:2', 'h:3');
    expect(await enqueue('fm', 'w:1', 3)).toBe('queued');
    await client.zrem(keys.slots('fm'), 'h:3'); // freed without a grant
    expect(await acquire([{ id: 'fm', max: 2 }], 'n:1', 60_000)).toEqual([3]);
    expect(await members(keys.slots('fm'))).toEqual(['h:1', 'h:2']);
    expect(await releaseSlot('fm', 'h:1')).toBe(true);
    expect(await members(keys.slots('fm'))).toEqual(['h:2', 'w:1']);
  });

  it('a channel that looks full but holds an expired lease sweeps it and grants it to the oldest waiter first', async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('fx'), now - 1_000, 'dead:1', now + 60_000, 'h:1');
    const nowUs = await redisNowUs();
    await client.zadd(keys.queue('fx'), nowUs, member('w:1', 2));
    expect(await acquire([{ id: 'fx', max: 2 }], 'n:1', 60_000)).toEqual([0]);
    expect(await members(keys.slots('fx'))).toEqual(['h:1', 'w:1']);
    expect(await client.exists(keys.queue('fx'))).toBe(0);
  });

  it('when the grants empty the queue, the request is answered as the channel now stands', async () => {
    await hold('one', 'h:1');
    expect(await enqueue('one', 'w:1', 1)).toBe('queued');
    await client.zrem(keys.slots('one'), 'h:1');
    expect(await acquire([{ id: 'one', max: 1 }], 'n:1', 60_000)).toEqual([0]); // the slot went to w:1
    expect(await members(keys.slots('one'))).toEqual(['w:1']);
    expect(await acquire([{ id: 'one', max: 2 }], 'n:2', 60_000)).toEqual([1]); // no queue left: room under max 2
  });

  it('every request of a call for a queued channel answers 3 and moves on to its next channel', async () => {
    await hold('qd', 'h:1');
    expect(await enqueue('qd', 'w:1', 1)).toBe('queued');
    const codes = await acquireMany(
      [
        { token: 'r:1', targets: [{ id: 'qd', max: 5 }] },
        {
          token: 'r:2',
          targets: [
            { id: 'qd', max: 5 },
            { id: 'free', max: 1 },
          ],
        },
        { token: 'r:3', targets: [{ id: 'free', max: 1 }] },
      ],
      60_000,
    );
    expect(codes).toEqual([3, 3, 1, 0]);
    expect(await members(keys.slots('qd'))).toEqual(['h:1']);
    expect(await members(keys.slots('free'))).toEqual(['r:2']);
  });

  it('a queue of expired waiters only is dropped and the request admitted', async () => {
    await hold('old', 'h:1');
    expect(await enqueue('old', 'w:1', 1, { liveMs: 100 })).toBe('queued');
    // its end: the lifetime its member names past its arrival
    const arrival = Number(await client.zscore(keys.queue('old'), member('w:1', 1, 100)));
    await untilRedisPasses(Math.ceil(arrival / 1000) + 100);
    const old = { token: 'n:1', targets: [{ id: 'old', max: 2 }] };
    expect(await acquireMany([old], 60_000)).toEqual([1]);
    expect(await members(keys.slots('old'))).toEqual(['h:1', 'n:1']);
    expect(await client.exists(keys.queue('old'))).toBe(0);
  });
});

describe('pollWaiter and leaveQueue scripts', () => {
  it('pollWaiter answers 1 while queued, 2 once granted, 0 when the queue no longer holds the waiter', async () => {
    await hold('p', 'h:1');
    expect(await enqueue('p', 'w:1', 1)).toBe('queued');
    expect(await pollWaiter('p', 'w:1', 1)).toBe('queued');
    expect(await releaseSlot('p', 'h:1')).toBe(true);
    expect(await pollWaiter('p', 'w:1', 1)).toBe('granted');
    expect(await pollWaiter('p', 'never:1', 1)).toBe('gone');
    expect(await leaveQueue('p', 'w:1', 1)).toBe(true);
    expect(await pollWaiter('p', 'w:1', 1)).toBe('gone');
  });

  it('pollWaiter grants what is free, its own grant quietly (the reply says it)', async () => {
    const feed = await grantsFeed();
    await hold('pg', 'h:1', 'h:2');
    expect(await enqueue('pg', 'a:1', 2)).toBe('queued');
    expect(await enqueue('pg', 'b:1', 2)).toBe('queued');
    await client.zrem(keys.slots('pg'), 'h:1', 'h:2'); // freed without a grant: only a poll finds out
    expect(await pollWaiter('pg', 'b:1', 2)).toBe('granted');
    expect(await members(keys.slots('pg'))).toEqual(['a:1', 'b:1']);
    expect(await feed.settle()).toEqual(['h q pg', 'a g a:1 pg']);
  });

  it('leaveQueue takes a queued waiter out of the queue and grants nothing', async () => {
    const feed = await grantsFeed();
    await hold('l', 'h:1');
    expect(await enqueue('l', 'w:1', 1)).toBe('queued');
    expect(await enqueue('l', 'w:2', 1)).toBe('queued');
    expect(await leaveQueue('l', 'w:1', 1)).toBe(false);
    expect(await leaveQueue('l', 'w:1', 1)).toBe(false); // twice: a no-op
    expect(await members(keys.queue('l'))).toEqual([member('w:2', 1)]);
    expect(await members(keys.slots('l'))).toEqual(['h:1']);
    expect(await leaveQueue('l', 'w:2', 1)).toBe(false);
    expect(await client.exists(keys.queue('l'))).toBe(0);
    expect(await feed.settle()).toEqual(['h q l']);
  });

  it('leaveQueue gives back a grant it holds, and the slot passes on to the next waiter', async () => {
    const feed = await grantsFeed();
    await hold('lg', 'h:1');
    expect(await enqueue('lg', 'a:1', 1)).toBe('queued');
    expect(await enqueue('lg', 'b:1', 1)).toBe('queued');
    expect(await releaseSlot('lg', 'h:1')).toBe(true);
    expect(await members(keys.slots('lg'))).toEqual(['a:1']);
    expect(await leaveQueue('lg', 'a:1', 1)).toBe(true);
    expect(await members(keys.slots('lg'))).toEqual(['b:1']);
    expect(await feed.settle()).toEqual(['h q lg', 'a g a:1 lg', 'b g b:1 lg']);
  });

  it('a leave of a member still queued only takes it out, even when a lease ran out: a registration or a poll sweeps', async () => {
    await hold('ly', 'h:1');
    expect(await enqueue('ly', 'a:1', 1)).toBe('queued');
    expect(await enqueue('ly', 'b:1', 1)).toBe('queued');
    await client.zadd(keys.slots('ly'), 1, 'h:1');
    expect(await leaveQueue('ly', 'a:1', 1)).toBe(false);
    expect(await members(keys.slots('ly'))).toEqual(['h:1']);
    expect(await members(keys.queue('ly'))).toEqual([member('b:1', 1)]);
    // b's safety poll sweeps it and finds itself granted
    expect(await pollWaiter('ly', 'b:1', 1)).toBe('granted');
    expect(await members(keys.slots('ly'))).toEqual(['b:1']);
  });
});

describe('requeueWaiter script', () => {
  it('the moved member takes the arrival of the old one (same µs score), so it lives as long as the old one would have', async () => {
    await hold('rq', 'h:1', 'h:2', 'h:3');
    for (const t of ['a:1', 'b:1', 'c:1'])
      expect(await enqueue('rq', t, 3, { liveMs: 45_000 })).toBe('queued');
    const arrival = await client.zscore(keys.queue('rq'), member('b:1', 3, 45_000));
    expect(await requeue('rq', ['b:1', 3], ['b:2', 1], { liveMs: 45_000 })).toBe('queued');
    expect(await client.zscore(keys.queue('rq'), member('b:2', 1, 45_000))).toBe(arrival);
    expect(await client.zrange(keys.queue('rq'), 0, -1)).toEqual([
      member('a:1', 3, 45_000),
      '1|45000|b:2',
      member('c:1', 3, 45_000),
    ]);
    // no fresh lifetime: a registration with 1 s left still has 1 s left once moved, and then it runs out
    await hold('ro', 'h:1');
    const old = await arrivedAgo(44_000);
    await client.zadd(keys.queue('ro'), old, member('a:1', 1, 45_000));
    expect(await requeue('ro', ['a:1', 1], ['a:2', 1], { liveMs: 45_000 })).toBe('queued');
    expect(Number(await client.zscore(keys.queue('ro'), member('a:2', 1, 45_000)))).toBe(old);
    expect(await members(keys.queue('ro'))).toEqual([member('a:2', 1, 45_000)]);
    await untilRedisPasses(Math.ceil(old / 1000) + 45_000);
    expect(await pollWaiter('ro', 'a:2', 1, { liveMs: 45_000 })).toBe('gone');
    expect(await client.exists(keys.queue('ro'))).toBe(0);
  });

  it('a grant the old member holds is given back; the new member stands first and is granted under its own max', async () => {
    const feed = await grantsFeed();
    await hold('rg', 'h:1', 'h:2');
    expect(await enqueue('rg', 'a:1', 2)).toBe('queued');
    expect(await enqueue('rg', 'b:1', 2)).toBe('queued');
    expect(await releaseSlot('rg', 'h:1')).toBe(true); // a:1 granted under max 2
    expect(await requeue('rg', ['a:1', 2], ['a:2', 1])).toBe('queued'); // one slot in use: max 1 is reached
    expect(await members(keys.slots('rg'))).toEqual(['h:2']);
    expect(await client.zrange(keys.queue('rg'), 0, -1)).toEqual([member('a:2', 1), member('b:1', 2)]);
    expect(await releaseSlot('rg', 'h:2')).toBe(true);
    expect(await members(keys.slots('rg'))).toEqual(['a:2', 'b:1']);
    expect(await feed.settle()).toEqual(['h q rg', 'a g a:1 rg', 'h q rg', 'a g a:2 rg', 'b g b:1 rg']);
  });

  it('a grant given back puts the new member ahead of the oldest live waiter, not of one that ran out', async () => {
    await hold('rd', 'h:1');
    for (const t of ['a:1', 'b:1', 'c:1']) expect(await enqueue('rd', t, 1)).toBe('queued');
    expect(await releaseSlot('rd', 'h:1')).toBe(true); // a:1 granted
    // b:1, now at the head, runs out (its instance died): a:2 must not take an arrival just ahead of it
    await client.zadd(keys.queue('rd'), 'XX', ((await redisNow()) - LIVE_MS - 1) * 1000, member('b:1', 1));
    expect(await requeue('rd', ['a:1', 1], ['a:2', 1])).toBe('granted');
    expect(await members(keys.slots('rd'))).toEqual(['a:2']);
    expect(await client.zrange(keys.queue('rd'), 0, -1)).toEqual([member('c:1', 1)]);
  });

  it('a moved member whose own lifetime has run out since the old arrival stays the oldest live waiter, ahead of the next', async () => {
    // `to` names a shorter lifetime than the 30 s since `from` arrived (registered under a longer one)
    await hold('rw', 'h:1');
    await client.zadd(keys.queue('rw'), await arrivedAgo(30_000), member('a:1', 1, 60_000));
    expect(await enqueue('rw', 'b:1', 1)).toBe('queued');
    const b = Number(await client.zscore(keys.queue('rw'), member('b:1', 1)));
    expect(await requeue('rw', ['a:1', 1, 60_000], ['a:2', 1, 20_000])).toBe('queued');
    expect(await client.zrange(keys.queue('rw'), 0, -1)).toEqual([
      member('a:2', 1, 20_000),
      member('b:1', 1),
    ]);
    expect(Number(await client.zscore(keys.queue('rw'), member('a:2', 1, 20_000)))).toBe(b - 1);
    expect(await pollWaiter('rw', 'a:2', 1, { liveMs: 20_000 })).toBe('queued');
    // the engine's case: `to` names `from`'s lifetime, which has run out since its arrival (no grant loop reached it)
    await hold('rx', 'h:1');
    await client.zadd(keys.queue('rx'), await arrivedAgo(6_000), member('a:1', 1, 5_000));
    expect(await enqueue('rx', 'b:1', 1)).toBe('queued');
    expect(await requeue('rx', ['a:1', 1], ['a:2', 1], { liveMs: 5_000 })).toBe('queued');
    expect(await client.zrange(keys.queue('rx'), 0, -1)).toEqual([member('a:2', 1, 5_000), member('b:1', 1)]);
    expect(await pollWaiter('rx', 'a:2', 1, { liveMs: 5_000 })).toBe('queued');
    // and it is the one granted first
    expect(await releaseSlot('rx', 'h:1')).toBe(true);
    expect(await members(keys.slots('rx'))).toEqual(['a:2']);
  });

  it('a member the queue lost joins at the tail, or is turned away from a full queue', async () => {
    await hold('rl', 'h:1');
    expect(await enqueue('rl', 'a:1', 1)).toBe('queued');
    expect(await requeue('rl', ['lost:1', 1], ['b:1', 1], { maxWaiting: 2 })).toBe('queued');
    expect(await requeue('rl', ['lost:2', 1], ['c:1', 1], { maxWaiting: 2 })).toBe('queue_full');
    expect(await client.zrange(keys.queue('rl'), 0, -1)).toEqual([member('a:1', 1), member('b:1', 1)]);
    expect(await requeue('rl', ['a:1', 1], ['a:2', 2], { maxWaiting: 2 })).toBe('granted'); // a raised max
    expect(await members(keys.slots('rl'))).toEqual(['a:2', 'h:1']);
  });
});

describe('queue news: the "q" message', () => {
  it('reaches each instance holding a slot once, when the queue forms, and again when it forms anew', async () => {
    const feed = await grantsFeed();
    await hold('qn', 'a:1', 'a:2', 'b:1');
    expect(await enqueue('qn', 'w:1', 3)).toBe('queued');
    expect(await feed.settle()).toEqual(['a q qn', 'b q qn']);
    expect(await enqueue('qn', 'w:2', 3)).toBe('queued'); // the queue was there: nobody is told again
    expect(await feed.settle()).toEqual(['a q qn', 'b q qn']);
    expect(await leaveQueue('qn', 'w:1', 3)).toBe(false);
    expect(await leaveQueue('qn', 'w:2', 3)).toBe(false);
    expect(await enqueue('qn', 'w:3', 3)).toBe('queued');
    expect(await feed.settle()).toEqual(['a q qn', 'b q qn', 'a q qn', 'b q qn']);
  });

  it('a queue of expired waiters only counts as none: the next waiter forms it', async () => {
    const feed = await grantsFeed();
    await hold('qe', 'a:1');
    // a waiter came and went, and one whose registration expired is left: the keys outlive it
    expect(await enqueue('qe', 'gone:1', 1)).toBe('queued');
    await plantExpiredWaiter('qe', member('dead:1', 1));
    expect(await leaveQueue('qe', 'gone:1', 1)).toBe(false);
    expect(await members(keys.queue('qe'))).toEqual([member('dead:1', 1)]);
    expect(await enqueue('qe', 'w:1', 1)).toBe('queued');
    expect(await feed.settle()).toEqual(['a q qe', 'a q qe']);
    expect(await members(keys.queue('qe'))).toEqual([member('w:1', 1)]);
  });

  it('a member of another shape (no lifetime) counts as run out: dropped when reached, never granted', async () => {
    await hold('qs', 'h:1');
    await client.zadd(keys.queue('qs'), await arrivedAgo(1_000), '1|odd:1'); // "<max>|<token>": no lifetime
    expect(await enqueue('qs', 'w:1', 1)).toBe('queued');
    expect(await releaseSlot('qs', 'h:1')).toBe(true);
    expect(await members(keys.slots('qs'))).toEqual(['w:1']);
    expect(await client.exists(keys.queue('qs'))).toBe(0);
  });

  it('a waiter granted at once forms no queue: the holders are not told', async () => {
    const feed = await grantsFeed();
    await hold('qg', 'a:1');
    expect(await enqueue('qg', 'w:1', 2)).toBe('granted');
    expect(await feed.settle()).toEqual([]);
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
    expect(await client.pttl(keys.slots('k'))).toBeLessThanOrEqual(1_250);
    await acquire([{ id: 'k', max: 5 }], 'long:1', 600_000);
    expect(await client.pttl(keys.slots('k'))).toBeGreaterThan(590_000);
  });

  it('acquire puts an expiry on a slots key that had none', async () => {
    await client.zadd(keys.slots('k'), '+inf', 'planted');
    expect(await client.pttl(keys.slots('k'))).toBe(-1);
    await acquire([{ id: 'k', max: 5 }], 'x:1', 20_000);
    const pttl = await client.pttl(keys.slots('k'));
    expect(pttl).toBeGreaterThan(20_000);
    expect(pttl).toBeLessThanOrEqual(25_000);
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
    expect(await client.pttl(keys.slots('k'))).toBeLessThanOrEqual(2_500);
  });

  it('enqueue extends the queue key to twice the registration lifetime when below 1.5 of it, never shortening it', async () => {
    await hold('k', 'h:1');
    expect(await enqueue('k', 'w:1', 1, { liveMs: 8_000 })).toBe('queued');
    const pttl = await client.pttl(keys.queue('k'));
    expect(pttl).toBeGreaterThan(13_000);
    expect(pttl).toBeLessThanOrEqual(16_000);
    // at least 1.5 lifetimes left: no extension
    await client.pexpire(keys.queue('k'), 12_500);
    expect(await enqueue('k', 'w:2', 1, { liveMs: 8_000 })).toBe('queued');
    expect(await client.pttl(keys.queue('k'))).toBeLessThanOrEqual(12_500);
    // below 1.5 lifetimes: extended to 2 lifetimes
    await client.pexpire(keys.queue('k'), 11_500);
    expect(await enqueue('k', 'w:2b', 1, { liveMs: 8_000 })).toBe('queued');
    expect(await client.pttl(keys.queue('k'))).toBeGreaterThan(15_000);
    // a member naming the longest lifetime extends it to twice that; a short-lived one after it does not shorten it
    expect(await enqueue('k', 'w:3', 1, { liveMs: MAX_LIVE_MS })).toBe('queued');
    expect(await enqueue('k', 'w:4', 1, { liveMs: 1_000 })).toBe('queued');
    const long = await client.pttl(keys.queue('k'));
    expect(long).toBeGreaterThan(2 * MAX_LIVE_MS - 4_000);
    expect(long).toBeLessThanOrEqual(2 * MAX_LIVE_MS);
  });

  it('a registration is live for the lifetime its member names past its arrival: a release drops one that ran out and grants the next live one', async () => {
    // each channel: one slot held, w:1 at the head (its member naming `live`, arrived `ago` ms ago), w:2 behind it
    // (arrived just now)
    const setUp = async (id: string, ago: number, live: number) => {
      await hold(id, 'h:1');
      expect(await enqueue(id, 'w:1', 1, { liveMs: live })).toBe('queued');
      expect(await enqueue(id, 'w:2', 1)).toBe('queued');
      await arrive(id, member('w:1', 1, live), ago);
      expect(await releaseSlot(id, 'h:1')).toBe(true);
    };
    // arrived within its lifetime: live, granted
    await setUp('lw', 59_000, 60_000);
    expect(await members(keys.slots('lw'))).toEqual(['w:1']);
    expect(await members(keys.queue('lw'))).toEqual([member('w:2', 1)]);
    // arrived longer ago than its lifetime: run out, dropped; the slot goes to w:2
    await setUp('lo', 61_000, 60_000);
    expect(await members(keys.slots('lo'))).toEqual(['w:2']);
    expect(await client.exists(keys.queue('lo'))).toBe(0);
    // the same arrival, its member naming a longer lifetime: still live, granted
    await setUp('ll', 61_000, 62_000);
    expect(await members(keys.slots('ll'))).toEqual(['w:1']);
    expect(await members(keys.queue('ll'))).toEqual([member('w:2', 1)]);
    // a short lifetime run out long before the longest: dropped all the same
    await setUp('ls', 6_000, 5_000);
    expect(await members(keys.slots('ls'))).toEqual(['w:2']);
    expect(await client.exists(keys.queue('ls'))).toBe(0);
  });

  it('a queue-full enqueue leaves the expiries as they were', async () => {
    await hold('kf', 'h:1');
    expect(await enqueue('kf', 'w:1', 1, { liveMs: 5_000, maxWaiting: 1 })).toBe('queued');
    expect(await enqueue('kf', 'w:2', 1, { liveMs: MAX_LIVE_MS, maxWaiting: 1 })).toBe('queue_full');
    expect(await client.pttl(keys.queue('kf'))).toBeLessThanOrEqual(10_000);
    expect(await members(keys.queue('kf'))).toEqual([member('w:1', 1, 5_000)]);
  });

  it('a grant keeps the slots key at least a lease TTL (1.25 TTL when it extends), never shortening it', async () => {
    await hold('kg', 'h:1', 'h:2', 'h:3');
    expect(await enqueue('kg', 'w:1', 3)).toBe('queued');
    expect(await enqueue('kg', 'w:2', 3)).toBe('queued');
    expect(await enqueue('kg', 'w:0', 3)).toBe('queued');
    await client.pexpire(keys.slots('kg'), 1_000);
    expect(await releaseSlot('kg', 'h:3', { leaseTtlMs: 60_000 })).toBe(true);
    expect(await members(keys.slots('kg'))).toEqual(['h:1', 'h:2', 'w:1']);
    const extended = await client.pttl(keys.slots('kg'));
    expect(extended).toBeGreaterThan(70_000);
    expect(extended).toBeLessThanOrEqual(75_000);
    // still above a lease TTL: the next grant does not extend it again
    await client.pexpire(keys.slots('kg'), 65_000);
    expect(await releaseSlot('kg', 'h:1', { leaseTtlMs: 60_000 })).toBe(true);
    expect(await client.pttl(keys.slots('kg'))).toBeLessThanOrEqual(65_000);
    await client.zrem(keys.slots('kg'), 'w:2');
    await client.zadd(keys.slots('kg'), (await redisNow()) + 600_000, 'h:1');
    expect(await members(keys.slots('kg'))).toEqual(['h:1', 'h:2', 'w:1']);
    await client.pexpire(keys.slots('kg'), 600_000);
    expect(await leaveQueue('kg', 'w:1', 3, { leaseTtlMs: 1_000 })).toBe(true); // passes the grant to w:0
    expect(await members(keys.slots('kg'))).toEqual(['h:1', 'h:2', 'w:0']);
    expect(await client.pttl(keys.slots('kg'))).toBeGreaterThan(590_000);
  });

  it('a grant at once on a channel without a slots key creates it with a lease TTL', async () => {
    expect(await enqueue('kn', 'w:1', 1, { leaseTtlMs: 30_000 })).toBe('granted');
    const pttl = await client.pttl(keys.slots('kn'));
    expect(pttl).toBeGreaterThan(32_000);
    expect(pttl).toBeLessThanOrEqual(37_500);
  });

  it('a short-lived slots key disappears by itself once its newest lease has expired', async () => {
    // long enough to see the key right after the call on a busy machine, short enough to wait for
    await acquire([{ id: 'gone', max: 5 }], 'x:1', 600);
    expect(await client.exists(keys.slots('gone'))).toBe(1);
    await expect.poll(() => client.exists(keys.slots('gone')), { timeout: 5_000 }).toBe(0);
  });
});

describe('the high-water mark (includes/peak.lua)', () => {
  const MINUTE = PEAK_MINUTE_MS;
  /** The current minute of the Redis clock, at least 2 s before the next one starts (it waits out a turn). */
  async function steadyMinute(): Promise<number> {
    const now = await redisNow();
    if (now % MINUTE > MINUTE - 2000) await untilRedisPasses(now - (now % MINUTE) + MINUTE);
    return Math.floor((await redisNow()) / MINUTE);
  }
  const readPeak = async (id: string) => {
    const [now, peak, since] = await SCRIPTS.readPeaks.call(client, [keys.slots(id), keys.peak(id)], []);
    return { peak, windowMs: now! - since! };
  };

  it("a new minute moves the last minute's peak back, and a read covers the minute before and this one", async () => {
    const minute = await steadyMinute();
    await client.hset(keys.peak('turn'), 'b', minute - 1, 'p', 5, 'q', 7);
    // read in the next minute: the last minute's peak counts, the one before it no longer
    expect((await readPeak('turn')).peak).toBe(5);
    await hold('turn', 't:1');
    expect(await releaseSlot('turn', 't:1')).toBe(true);
    expect(await client.hgetall(keys.peak('turn'))).toEqual({ b: String(minute), p: '1', q: '5' });
    const read = await readPeak('turn');
    expect(read.peak).toBe(5);
    expect(read.windowMs).toBeGreaterThanOrEqual(MINUTE);
    expect(read.windowMs).toBeLessThan(2 * MINUTE);
    // older than the minute before: forgotten, both by a read and by the next note
    await client.hset(keys.peak('old'), 'b', minute - 2, 'p', 5);
    expect((await readPeak('old')).peak).toBe(0);
    await hold('old', 'o:1');
    expect(await releaseSlot('old', 'o:1')).toBe(true);
    expect(await client.hgetall(keys.peak('old'))).toEqual({ b: String(minute), p: '1', q: '0' });
    // a key that lives two minutes from its minute's first note, so it goes when the channel stays idle
    const pttl = await client.pttl(keys.peak('old'));
    expect(pttl).toBeGreaterThan(MINUTE);
    expect(pttl).toBeLessThanOrEqual(2 * MINUTE);
  });

  it('slots taken long before the window and released within it are counted: the count before each removal is noted', async () => {
    await hold('long', 'l:1', 'l:2');
    // as if they were taken minutes ago: nothing noted in the window
    await client.hset(keys.peak('long'), 'b', 1, 'p', 0);
    expect((await readPeak('long')).peak).toBe(2); // live
    expect(await releaseSlot('long', 'l:1')).toBe(true);
    expect(await releaseSlot('long', 'l:2')).toBe(true);
    expect((await readPeak('long')).peak).toBe(2); // noted by the first release
    // admissions add nothing to the mark: its rises are seen by the next removal, or by a read while they are live
    await client.del(keys.peak('long'));
    expect(await acquire([{ id: 'long', max: 3 }], 'l:3', LEASE_TTL_MS)).toEqual([1]);
    expect(await client.exists(keys.peak('long'))).toBe(0);
    expect((await readPeak('long')).peak).toBe(1);
    expect(await client.exists(keys.peak('long'))).toBe(0); // a read writes nothing
  });

  it('a sweep of expired leases notes the count before it, expired leases included (an upper bound)', async () => {
    const now = await redisNow();
    await client.zadd(keys.slots('sw'), now - 1000, 'dead:1', now - 1000, 'dead:2');
    expect(await acquire([{ id: 'sw', max: 2 }], 'n:1', LEASE_TTL_MS)).toEqual([1]);
    expect(await client.zcard(keys.slots('sw'))).toBe(1);
    expect(await client.hget(keys.peak('sw'), 'p')).toBe('2');
  });
});

describe('exchangeLoads script', () => {
  const snapshot = (maxAge: number, write: string[] = ['', '', ''], build = 1, drop: string[] = []) =>
    SCRIPTS.exchangeLoads.call(
      client,
      [keys.loadCounts(), keys.loadCooling(), keys.loadSnapshot(maxAge)],
      [maxAge, ...write, build, ...drop],
    );
  const field = (version: string, lapseAt: number, ...counts: (string | number)[]) =>
    JSON.stringify([version, lapseAt, ...counts]);

  it('sums the live instances, names the version of each, leaves out and deletes the lapsed and the unreadable', async () => {
    const now = await redisNow();
    await client.hset(keys.loadCounts(), {
      A: field('a.1', now + 60_000, 'x', 2, 'y', 1 + 2 ** 26),
      B: field('b.7', now + 60_000, 'x', 3),
      dead: field('d.2', now - 1, 'x', 100),
      junk: 'not json',
    });
    await client.hset(keys.loadCooling(), 'y', now + 5_000);
    const built = await snapshot(0);
    expect(built.built).toBe(true);
    expect(built.nowMs).toBeGreaterThanOrEqual(now);
    expect(JSON.parse(built.snapshot!)).toEqual({
      l: ['x', '5', 'y', String(1 + 2 ** 26)],
      c: ['y', String(now + 5_000)],
      v: ['A', 'a.1', 'B', 'b.7'],
      n: 3,
    });
    expect((await client.hkeys(keys.loadCounts())).sort()).toEqual(['A', 'B']);
    // age 0 keeps nothing
    expect(await client.exists(keys.loadSnapshot(0))).toBe(0);
  });

  it('keeps what it built for the age asked, and returns it as it is until then', async () => {
    const now = await redisNow();
    await client.hset(keys.loadCounts(), 'A', field('a.1', now + 60_000, 'x', 2));
    const first = await snapshot(60_000);
    expect(first.built).toBe(true);
    const pttl = await client.pttl(keys.loadSnapshot(60_000));
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(60_000);
    await client.hset(keys.loadCounts(), 'A', field('a.2', now + 60_000, 'x', 4));
    const kept = await snapshot(60_000);
    expect(kept).toEqual({ snapshot: first.snapshot, built: false, nowMs: undefined });
    // a reader that allows less builds its own
    expect(JSON.parse((await snapshot(10)).snapshot!).l).toEqual(['x', '4']);
  });

  it("puts an instance's field in (or deletes it) before it reads, and renews the hash's expiry when asked", async () => {
    const now = await redisNow();
    await client.hset(keys.loadCounts(), 'B', field('b.1', now + 60_000, 'x', 1));
    const put = await snapshot(0, ['A', field('a.1', now + 60_000, 'x', 2), '5000']);
    expect(JSON.parse(put.snapshot!).l).toEqual(['x', '3']);
    const pttl = await client.pttl(keys.loadCounts());
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(5000);
    const gone = await snapshot(0, ['A', '', '']);
    expect(JSON.parse(gone.snapshot!)).toMatchObject({ l: ['x', '1'], v: ['B', 'b.1'] });
    expect(await client.hkeys(keys.loadCounts())).toEqual(['B']);
    expect(await client.pttl(keys.loadCounts())).toBeLessThanOrEqual(pttl);
  });

  it('with no instance and no cooldown, an empty snapshot (JSON arrays, not objects)', async () => {
    expect(JSON.parse((await snapshot(0)).snapshot!)).toEqual({ l: [], c: [], v: [], n: 0 });
  });

  it('builds nothing when told not to (the caller builds): a missing snapshot comes back null, a kept one as it is', async () => {
    const now = await redisNow();
    const none = await snapshot(60_000, ['A', field('a.1', now + 60_000, 'x', 2), ''], 0);
    expect(none).toEqual({ snapshot: null, built: false, nowMs: undefined });
    expect(await client.hkeys(keys.loadCounts())).toEqual(['A']); // the write went in all the same
    await client.set(keys.loadSnapshot(60_000), 'kept', 'PX', 60_000);
    expect((await snapshot(60_000, ['', '', ''], 0)).snapshot).toBe('kept');
  });

  it('deletes the instances named whose counts have lapsed, and only those, doing nothing else', async () => {
    const now = await redisNow();
    await client.hset(keys.loadCounts(), {
      gone: field('g.1', now - 1, 'x', 1),
      back: field('b.2', now + 60_000, 'x', 1),
      junk: 'not json',
    });
    const reply = await snapshot(0, ['', '', ''], 1, ['gone', 'back', 'junk', 'never']);
    expect(reply).toEqual({ snapshot: null, built: false, nowMs: undefined });
    expect(await client.hkeys(keys.loadCounts())).toEqual(['back']);
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

  it('splice the queue helpers into every script that grants, once', () => {
    const granting = [SCRIPTS.acquireSlots, SCRIPTS.enqueueWaiter, SCRIPTS.releaseSlot, SCRIPTS.pollWaiter];
    for (const script of [...granting, SCRIPTS.leaveQueue]) {
      expect(loadLua(script.file).match(/local function grantFree\(/g), script.file).toHaveLength(1);
    }
  });

  it("bound a registration's lifetime where the store does: every member older than MAX_REGISTRATION_LIVE_MS has run out", () => {
    for (const script of Object.values(SCRIPTS)) {
      const source = loadLua(script.file);
      if (!source.includes('local function grantFree(')) continue;
      expect(source.match(/^local MAX_LIVE_MS = (\d+)$/m)?.[1], script.file).toBe(
        String(MAX_REGISTRATION_LIVE_MS),
      );
    }
  });
});

/** The hash tag of a key as Redis Cluster reads it: the text between the first `{` and the next `}`, if not empty. */
function hashTag(key: string): string {
  const open = key.indexOf('{');
  const close = key.indexOf('}', open + 1);
  return open >= 0 && close > open + 1 ? key.slice(open + 1, close) : key;
}

describe('Cluster: every script call stays within one hash slot', () => {
  it("the store's calls of every script, in its Cluster mode, carry only keys of one hash tag (a channel's, or the load summary's)", async () => {
    // A single node dressed as a Cluster client: the store takes its Cluster path (one channel per acquire call,
    // releases sent at once, renewals grouped by channel), and every command it sends is recorded.
    const fake = new Redis(redisUrl(), { enableAutoPipelining: false, maxRetriesPerRequest: 1 });
    cleanups.push(() => fake.disconnect());
    // what the store reads of a Cluster client: its node connections (none here) and its slot map (all on this node)
    Object.assign(fake as unknown as Record<string, unknown>, {
      isCluster: true,
      nodes: () => [],
      slots: Array.from({ length: 16384 }, () => [`${fake.options.host}:${fake.options.port}`]),
    });
    const calls: { sha: string; keys: string[] }[] = [];
    const send = fake.sendCommand.bind(fake);
    fake.sendCommand = ((command: { name: string; args: unknown[] }, ...rest: unknown[]) => {
      if (command.name === 'evalsha' || command.name === 'eval') {
        const n = Number(command.args[1]);
        calls.push({ sha: String(command.args[0]), keys: command.args.slice(2, 2 + n).map(String) });
      }
      return (send as (...a: unknown[]) => unknown)(command, ...rest);
    }) as typeof fake.sendCommand;
    const store = new RedisStore({ client: fake, prefix });
    cleanups.push(() => store.close());
    expect(store.maxChannelsPerAcquire).toBe(1);

    const id = 'odd {id}:%'; // braces of its own must not move the tag
    const other = 'other';
    const opts = (token: string) => ({ token, leaseTtlMs: 60_000, checkCooldown: true });
    const waiter = { channelId: id, token: 'w:1', max: 1 };
    const wait = { maxWaiting: 5, ttlMs: 60_000, leaseTtlMs: 60_000 };
    expect(await store.acquireFirst([{ channelId: id, max: 1 }], opts('c:1'))).toEqual(['acquired']);
    expect(await store.acquireFirst([{ channelId: other, max: 1 }], opts('c:2'))).toEqual(['acquired']);
    expect(await store.enqueue(waiter, wait)).toBe('queued');
    expect(await store.acquireFirst([{ channelId: id, max: 1 }], opts('c:3'))).toEqual(['queued']);
    expect(await store.pollWaiter(waiter, 60_000)).toBe('queued');
    const moved = { ...waiter, token: 'w:2' };
    expect(await store.requeue(waiter, moved, wait)).toBe('queued');
    expect(await store.release({ channelId: id, token: 'c:1' }, 60_000).done).toBe(true); // a grant
    expect(await store.leaveQueue(moved, 60_000)).toBe(true);
    expect(
      await store.renew(
        [
          { channelId: id, token: 'c:1' },
          { channelId: other, token: 'c:2' },
        ],
        60_000,
      ),
    ).toEqual([{ channelId: id, token: 'c:1' }]);
    // c:1 is gone and its channel has room again (the grant was given back): taken back; c:2 is renewed
    const reclaim = [
      { channelId: id, token: 'c:1', max: 1 },
      { channelId: other, token: 'c:2', max: 1 },
    ];
    expect(await store.reclaim(reclaim, 60_000, false)).toEqual([]);
    expect(await store.reclaim(reclaim, 60_000, true)).toEqual([]);
    await client.persist(keys.slots(other));
    expect(await fixFindings(fake, [{ key: keys.slots(other), kind: 'no_expiry', detail: '' }])).toBe(1);
    // doctor --fix on a dead owner's slot: c:2's instance last heard from a minute ago
    const seenAt = new Date(Date.now() - 60_000).toISOString();
    await client.hset(keys.instances(), 'c', JSON.stringify({ seen_at: seenAt }));
    const dead = {
      key: keys.slots(other),
      kind: 'dead_owner' as const,
      detail: '',
      owner: 'c',
      channelId: other,
      members: ['c:2'],
      scores: [Number(await client.zscore(keys.slots(other), 'c:2'))],
    };
    expect(await fixFindings(fake, [dead], prefix)).toBe(1);

    // the load summary: all its keys under one hash tag of their own (redis.md, "The load summary")
    const read = await store.exchangeLoads({
      instanceId: 'c',
      mode: 'changes',
      counts: new Map([[id, { active: 1, waiting: 0 }]]),
      keepMs: 60_000,
      read: [id, other],
    });
    expect(read.get(id)).toMatchObject({ active: 1, waiting: 0 });
    // the direct reads: the loads and the holders, one channel per call
    expect([...(await store.readLoads([id, other])).keys()]).toEqual([id, other]);
    expect([...(await store.readHolders([id, other])).keys()]).toEqual([id, other]);
    expect([...(await store.readPeaks([id, other])).keys()]).toEqual([id, other]);

    const tags = new Set([encodeChannelId(id), encodeChannelId(other), hashTag(keys.loadSummary())]);
    for (const k of [keys.loadCounts(), keys.loadCooling(), keys.loadSnapshot(50)])
      expect(hashTag(k)).toBe(hashTag(keys.loadSummary()));
    expect(hashTag(keys.slots(id))).toBe(encodeChannelId(id));
    for (const k of [keys.queue(id), keys.cooldown(id), keys.peak(id)])
      expect(hashTag(k)).toBe(hashTag(keys.slots(id)));
    // the epoch check carries one key of its own per master (one here): `<prefix>:v1:epoch:{e<n>}`
    const epochCalls = calls.filter((c) => c.keys[0]!.startsWith(keys.epoch()));
    expect(epochCalls.map((c) => c.keys)).toContainEqual([`${keys.epoch()}:{e0}`]);
    for (const call of calls.filter((c) => !epochCalls.includes(c))) {
      expect(call.keys.length).toBeGreaterThan(0);
      expect(new Set(call.keys.map(hashTag)).size, call.keys.join(' ')).toBe(1);
      expect(tags.has(hashTag(call.keys[0]!))).toBe(true);
    }
    const sha = (file: string) => createHash('sha1').update(loadLua(file)).digest('hex');
    const called = new Set(calls.map((c) => c.sha));
    for (const script of Object.values(SCRIPTS)) expect(called.has(sha(script.file)), script.file).toBe(true);
  });
});
