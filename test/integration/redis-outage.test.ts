/**
 * Redis outages against a real redis-server that each test owns (paused with SIGSTOP, killed, started again on the
 * same port): the store fails closed with StoreUnavailableError and never hangs, an acquire or a waiter registration
 * whose outcome is unknown is cleaned up (and a grant it got passes on), and the same store instance recovers by itself when Redis is back (scripts reloaded transparently).
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { StoreUnavailableError } from '../../packages/slotgate/src/core/errors.js';
import { LeaseManager, type LeaseEvent } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { SCRIPTS, loadLua } from '../../packages/slotgate/src/store/redis/scripts.js';
import { RedisServer } from '../helpers/redis-server.js';
import { countingClient, uniquePrefix, type CountingClient } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';
import { answered, until } from '../helpers/until.js';

const cleanups = useCleanups();

async function privateServer(): Promise<RedisServer> {
  const server = await RedisServer.start();
  cleanups.push(() => server.stop()); // stop() resumes a paused server before killing it
  return server;
}

async function adminClient(server: RedisServer): Promise<Redis> {
  const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
  admin.on('error', () => {});
  cleanups.push(() => admin.disconnect());
  return admin;
}

async function counting(server: RedisServer): Promise<CountingClient> {
  const cc = await countingClient(server.url);
  cleanups.push(() => cc.close());
  return cc;
}

/** Polls `check` until it returns true or `ms` passes; returns whether it did. */
async function eventually(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await sleep(25);
  }
}

/** INFO commandstats with failed calls too: { command: { calls, failed } }. */
async function stats(admin: Redis): Promise<Record<string, { calls: number; failed: number }>> {
  const out: Record<string, { calls: number; failed: number }> = {};
  for (const line of (await admin.info('commandstats')).split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+).*?(?:failed_calls=(\d+))?\s*$/.exec(line.trim());
    if (m) out[m[1]!] = { calls: Number(m[2]), failed: Number(m[3] ?? 0) };
  }
  return out;
}

const opts = (token: string) => ({ token, leaseTtlMs: 60_000, checkCooldown: true });
/** A waiter under max 1, and the options of its enqueue. */
const waiter = (channelId: string, token: string) => ({ channelId, token, max: 1 });
const wait = { maxWaiting: 3, ttlMs: 60_000, leaseTtlMs: 60_000 };
/** The SHA1 a script is called by (EVALSHA). */
const sha = (file: string) => createHash('sha1').update(loadLua(file)).digest('hex');

/**
 * A store (time bound 200 ms) on a private server, its queue scripts loaded on its connection (so later calls are
 * EVALSHAs), holding the one slot of `channelId` (max 1): a waiter there queues.
 */
async function queueStore(channelId: string) {
  const server = await privateServer();
  const admin = await adminClient(server);
  const cc = await counting(server);
  const store = new RedisStore({ client: cc.client, prefix: uniquePrefix('outage'), timeoutMs: 200 });
  cleanups.push(() => store.close());
  await store.acquireFirst([{ channelId, max: 1 }], opts('h:1'));
  await store.enqueue(waiter('warm', 'warm:w'), wait);
  await store.leaveQueue(waiter('warm', 'warm:w'), 60_000);
  return { server, admin, cc, store };
}

/** Freezes the server (SIGSTOP); the returned function resumes it, and a cleanup does if the test did not. */
function freeze(server: RedisServer): () => void {
  server.pause();
  let resumed = false;
  cleanups.push(() => {
    if (!resumed) server.resume();
  });
  return () => {
    resumed = true;
    server.resume();
  };
}

describe('Redis outages', () => {
  it('an acquire that timed out against a frozen Redis is cleaned up once Redis answers again', async () => {
    const server = await privateServer();
    const admin = await adminClient(server);
    const prefix = uniquePrefix('outage');
    const store = new RedisStore({ url: server.url, prefix, timeoutMs: 200 });
    cleanups.push(() => store.close());
    const events: LeaseEvent[] = [];
    const leases = new LeaseManager({
      store,
      instanceId: 'frozen',
      leaseTtlMs: () => 60_000, // far longer than the test: only the cleanup can remove the slot
      onEvent: (e) => events.push(e),
    });
    cleanups.push(() => leases.close());
    // load the script on the store's connection first, so the timed-out call below is an EVALSHA
    await store.acquireFirst([{ channelId: 'warm', max: 1 }], opts('warm:1'));
    await admin.config('SET', 'slowlog-log-slower-than', '0');
    await admin.config('SET', 'slowlog-max-len', '1000');
    await admin.slowlog('RESET');
    const before = await stats(admin);

    const resume = freeze(server);
    const started = Date.now();
    const error = await leases.acquireFirst([{ channelId: 'u', max: 1 }], true).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as StoreUnavailableError).operation).toBe('acquire');
    expect(Date.now() - started).toBeLessThan(5_000); // did not hang
    expect(leases.size).toBe(0);
    expect(leases.localCount('u')).toBe(0);
    // the one cleanup removal was fired and gave up client-side (Redis is still frozen)
    expect(await eventually(async () => events.some((e) => e.type === 'acquire_uncertain'), 3_000)).toBe(
      true,
    );
    const uncertain = events.find((e) => e.type === 'acquire_uncertain')!;
    expect(uncertain).toMatchObject({ channelIds: ['u'], token: 'frozen:1', cleaned: false });

    resume();
    const slots = store.keys.slots('u');
    // Redis now runs what was already on the wire: the acquire (which admits the token), then the removal
    expect(
      await eventually(async () => {
        const s = await stats(admin);
        return (s.zrem?.calls ?? 0) > (before.zrem?.calls ?? 0);
      }, 5_000),
    ).toBe(true);
    const after = await stats(admin);
    expect((after.evalsha?.calls ?? 0) - (before.evalsha?.calls ?? 0)).toBe(1);
    expect((after.zadd?.calls ?? 0) - (before.zadd?.calls ?? 0)).toBe(1); // the script did admit the token
    expect((after.zrem?.calls ?? 0) - (before.zrem?.calls ?? 0)).toBe(1);
    expect(await admin.zcard(slots)).toBe(0);
    // and in that order: the slow log (threshold 0) records every command with an increasing id
    const log = (await admin.slowlog('GET', 1000)) as [number, number, number, string[]][];
    const idOf = (name: string) =>
      log.find(([, , , args]) => args[0]?.toLowerCase() === name && args.includes('frozen:1'))?.[0];
    const evalId = idOf('evalsha');
    const zremId = idOf('zrem');
    expect(evalId).toBeDefined();
    expect(zremId).toBeDefined();
    expect(zremId!).toBeGreaterThan(evalId!);
  });

  it('a waiter registration that timed out against a frozen Redis is removed once Redis answers again', async () => {
    const { server, admin, store } = await queueStore('q');
    await admin.config('SET', 'slowlog-log-slower-than', '0');
    await admin.config('SET', 'slowlog-max-len', '1000');
    await admin.slowlog('RESET');
    const before = await stats(admin);
    const waitBefore = store.commands.wait;

    const resume = freeze(server);
    const error = await store.enqueue(waiter('q', 'frozen:w'), wait).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as StoreUnavailableError).operation).toBe('wait_register');
    // the store sent its removal behind the registration before it told the caller; resumed once it counts it
    await until(() => store.commands.wait - waitBefore === 2, 'the removal sent');
    resume();

    // the registration was on the wire and runs now; the caller was told it failed, so it will never leave the
    // queue itself: the store sent the removal (a ZREM of its member) behind it, on the same connection
    expect(
      await eventually(async () => {
        const s = await stats(admin);
        return (s.zrem?.calls ?? 0) - (before.zrem?.calls ?? 0) >= 1;
      }, 5_000),
    ).toBe(true);
    const after = await stats(admin);
    expect((after.evalsha?.calls ?? 0) - (before.evalsha?.calls ?? 0)).toBe(1);
    expect((after.zadd?.calls ?? 0) - (before.zadd?.calls ?? 0)).toBe(1); // the script did register it
    expect((after.zrem?.calls ?? 0) - (before.zrem?.calls ?? 0)).toBe(1); // and the ZREM found it queued
    expect(store.commands.wait - waitBefore).toBe(2);
    expect(await admin.exists(store.keys.queue('q'))).toBe(0);
    expect(await admin.zrange(store.keys.slots('q'), 0, -1)).toEqual(['h:1']);
    expect((await store.readLoads(['q'])).get('q')!.waiting).toBe(0);
    // and in that order: the slow log (threshold 0) records every command with an increasing id
    const log = (await admin.slowlog('GET', 1000)) as [number, number, number, string[]][];
    const member = '1|60000|frozen:w';
    const enqueueId = log.find(
      ([, , , args]) => args[1] === sha(SCRIPTS.enqueueWaiter.file) && args.includes(member),
    )?.[0];
    const leaveId = log.find(
      ([, , , args]) => args[0]?.toLowerCase() === 'zrem' && args.includes(member),
    )?.[0];
    expect(enqueueId).toBeDefined();
    expect(leaveId).toBeDefined();
    expect(leaveId!).toBeGreaterThan(enqueueId!);
  });

  it('a grant the timed-out registration got meanwhile passes on to the next waiter', async () => {
    const { server, admin, cc, store } = await queueStore('g');
    const keys = store.keys;
    const feed = new Redis(server.url, { maxRetriesPerRequest: 1 });
    cleanups.push(() => feed.disconnect());
    const heard: string[] = [];
    feed.on('pmessage', (_p: string, channel: string, message: string) =>
      // (a grant's claim deadline, "c\n<ms>\n…", is left out)
      heard.push(
        `${channel.slice(keys.grants().length)} ${message.replace(/^c\n\d+\n/, 'g\n').replace(/\n/g, ' ')}`,
      ),
    );
    await feed.psubscribe(`${keys.grants()}*`);

    const resume = freeze(server);
    // On the store's connection, in this order: the registration, another instance's waiter behind it, and the
    // release of the slot, which grants it to the registration. The store's removal follows at its time-out.
    const failed = store.enqueue(waiter('g', 'frozen:w'), wait).catch((e: unknown) => e);
    await Promise.resolve(); // the store sends a registration when the job that asked for it ends
    const queueKeys = [keys.slots('g'), keys.queue('g'), keys.peak('g'), keys.limit('g')];
    const args = (first: string) => [first, 5_000, 60_000, keys.grants(), 'g', ''];
    const next = SCRIPTS.enqueueWaiter.call(cc.client, queueKeys, [...args('1|60000|next:w'), 5, 1]);
    const released = SCRIPTS.releaseSlot
      .call(cc.client, queueKeys, [...args('h:1'), '', ''])
      .then((r) => r.removed);
    const error = await failed;
    expect(error).toBeInstanceOf(StoreUnavailableError);
    resume();

    expect(await next).toBe('queued');
    expect(await released).toBe(true);
    expect(
      await eventually(async () => {
        const slots = await admin.zrange(keys.slots('g'), 0, -1);
        return slots.length === 1 && slots[0] === 'next:w';
      }, 5_000),
    ).toBe(true);
    expect(await admin.exists(keys.queue('g'))).toBe(0);
    // every message is in before a marker published after the removal ran
    await admin.publish(`${keys.grants()}~`, 'marker');
    expect(await eventually(async () => heard.includes('~ marker'), 5_000)).toBe(true);
    expect(heard).toEqual(['h q g', 'frozen g frozen:w g', 'next g next:w g', '~ marker']);
  });

  it('with Redis stopped every operation fails fast; the same store works again once Redis is back', async () => {
    const server = await privateServer();
    const cc = await counting(server);
    const store = new RedisStore({ client: cc.client, prefix: uniquePrefix('outage'), timeoutMs: 500 });
    expect(await store.acquireFirst([{ channelId: 'a', max: 2 }], opts('before:1'))).toEqual(['acquired']);

    await server.stop();
    // Channel `down` only: a command that timed out client-side may still sit in ioredis's offline queue and run
    // once the connection is back (docs/redis.md, failure behaviour), so it must not touch what is checked below.
    const attempts: [string, () => Promise<unknown>][] = [
      ['acquire', () => store.acquireFirst([{ channelId: 'down', max: 2 }], opts('down:1'))],
      ['load_read', () => store.readLoads(['down', 'b'])],
      ['wait_register', () => store.enqueue(waiter('down', 'w:1'), wait)],
      ['release', () => store.release({ channelId: 'down', token: 'before:1' }, 60_000).done],
      ['renew', () => store.renew([{ channelId: 'down', token: 'before:1' }], 60_000)],
      ['cooldown', () => store.setCooldown('down', 1_000, 'x')],
    ];
    for (const [operation, attempt] of attempts) {
      const started = Date.now();
      const error = await attempt().catch((e: unknown) => e);
      expect(error, operation).toBeInstanceOf(StoreUnavailableError);
      expect((error as StoreUnavailableError).operation).toBe(operation);
      expect((error as StoreUnavailableError).code).toBe('admission_store_unavailable');
      expect(Date.now() - started, operation).toBeLessThan(5_000); // did not hang
    }

    await server.start(); // same port, empty data set, no scripts loaded
    const admin = await adminClient(server);
    cc.reset();
    const errors: unknown[] = [];
    const reply = await answered(
      () =>
        store.acquireFirst([{ channelId: 'a', max: 2 }], opts('after:1')).catch((err: unknown) => {
          errors.push(err);
          throw err;
        }),
      'an acquire once Redis is back',
    );
    for (const err of errors) expect(err).toBeInstanceOf(StoreUnavailableError);
    expect(reply).toEqual(['acquired']);
    expect(cc.count('evalsha')).toBeGreaterThanOrEqual(1);
    // the restarted server never had the script: the store's client sent its body (EVAL) without being told to
    const s = await stats(admin);
    expect(s.eval?.calls).toBeGreaterThanOrEqual(1);
    expect(await admin.zrange(store.keys.slots('a'), 0, -1)).toContain('after:1');
    // the other operations work again too
    expect(await store.enqueue({ channelId: 'a', token: 'w:2', max: 1 }, wait)).toBe('queued');
    const load = (await store.readLoads(['a'])).get('a')!;
    expect(load.waiting).toBe(1);
    expect(load.active).toBeGreaterThanOrEqual(1);
    expect(await store.release({ channelId: 'a', token: 'after:1' }, 60_000).done).toBe(true);
    // whether the failed registration on `down` was dropped with ioredis's offline queue or ran after the reconnect,
    // its cleanup removal went the same way behind it: no waiter is left
    expect(await eventually(async () => (await admin.exists(store.keys.queue('down'))) === 0, 3_000)).toBe(
      true,
    );
  });

  it('a script cache flushed under a live connection (NOSCRIPT) is reloaded transparently', async () => {
    const server = await privateServer();
    const cc = await counting(server);
    const admin = await adminClient(server);
    const store = new RedisStore({ client: cc.client, prefix: uniquePrefix('outage'), timeoutMs: 1_000 });
    expect(await store.acquireFirst([{ channelId: 'n', max: 5 }], opts('n:1'))).toEqual(['acquired']);
    expect(await store.acquireFirst([{ channelId: 'n', max: 5 }], opts('n:2'))).toEqual(['acquired']);
    await admin.script('FLUSH');
    const before = await stats(admin);
    cc.reset();
    expect(await store.acquireFirst([{ channelId: 'n', max: 5 }], opts('n:3'))).toEqual(['acquired']);
    const after = await stats(admin);
    // EVALSHA failed with NOSCRIPT, ioredis resent the call with the body, which ran once
    expect(cc.sent).toEqual(['evalsha', 'evalsha']);
    expect(after.evalsha!.failed - (before.evalsha?.failed ?? 0)).toBe(1);
    expect(after.eval!.calls - (before.eval?.calls ?? 0)).toBe(1);
    expect(after.zadd!.calls - (before.zadd?.calls ?? 0)).toBe(1);
    expect(await admin.zcard(store.keys.slots('n'))).toBe(3);
    expect(store.commands.acquire).toBe(3 + 2); // and the check of the new connection: probeAccess and checkEpoch
  });
});
