/**
 * `slotgate doctor` against the test Redis: planted leftovers (a queue key without expiry among them) are found
 * exactly, a read-only run changes nothing, --fix removes exactly what was reported (live members, other versions and
 * other prefixes survive), the command line exits 1 with findings and 0 when clean, and real traffic (waiters
 * included) leaves nothing behind once its holder is gone and one lease TTL has passed — while a crashed holder next
 * to a live one leaves exactly its own leases. Slots of an instance whose heartbeat is late but not yet dead are listed
 * with its age (never "clean"), exit 0, and never released.
 */
import { describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { checkLeftovers } from '../../packages/slotgate/src/store/redis/doctor/check.js';
import { fixFindings } from '../../packages/slotgate/src/store/redis/doctor/fix.js';
import type { Finding, LateOwner } from '../../packages/slotgate/src/store/redis/doctor/report.js';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { LeaseManager, type LeaseEvent } from '../../packages/slotgate/src/admission/leases/lease-manager.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { prefixCleanedAfter, redisUrl } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';
import { runCli } from '../helpers/gw-gateway.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const HOLDER = fileURLToPath(new URL('../helpers/lease-holder.ts', import.meta.url));
/** A short lease TTL, so "one lease TTL after" is a short wait; renewals run every third of it. */
const TTL = 500;

const cleanups = useCleanups();

async function client(): Promise<Redis> {
  const redis = new Redis(redisUrl());
  cleanups.push(() => void redis.disconnect());
  return redis;
}

const prefixForTest = (name: string) => prefixCleanedAfter(name, cleanups);

interface KeyState {
  type: string;
  expires: boolean;
  content: unknown;
}

/** Every key under the prefix with its type, whether it has an expiry, and its content. */
async function snapshot(redis: Redis, prefix: string): Promise<Record<string, KeyState>> {
  const out: Record<string, KeyState> = {};
  for (const key of (await redis.keys(`${prefix}:*`)).sort()) {
    const type = await redis.type(key);
    const expires = (await redis.pttl(key)) >= 0;
    const content =
      type === 'zset'
        ? await redis.zrange(key, 0, -1)
        : type === 'string'
          ? await redis.get(key)
          : type === 'hash'
            ? await redis.hgetall(key)
            : type === 'list'
              ? await redis.lrange(key, 0, -1)
              : null;
    out[key] = { type, expires, content };
  }
  return out;
}

const cli = (...args: string[]) => runCli(['doctor', ...args]);

const sortFindings = (findings: Finding[]) =>
  findings
    .map((f) => ({ key: f.key, kind: f.kind, members: f.members ? [...f.members].sort() : undefined }))
    .sort((a, b) => (a.key + a.kind).localeCompare(b.key + b.kind));

/** Plants one of each leftover next to healthy keys; returns the keys and what doctor must report. */
async function plant(redis: Redis, prefix: string) {
  const k = new KeyBuilder(prefix);
  const [sec] = await redis.time();
  const now = Number(sec) * 1000;
  const key = {
    leases: k.slots('leases'), // live and expired members, with an expiry
    noExpiry: k.slots('no-expiry'), // live member, no expiry
    queue: k.queue('leases'), // arrival scores (µs): a live and a run-out registration, with an expiry
    queueNoExpiry: k.queue('no-expiry'), // a queue key without an expiry
    coolingForever: k.cooldown('forever'), // a cooldown without TTL
    cooling: k.cooldown('cooling'), // a proper cooldown
    wrongType: k.queue('wrong'), // a string where a sorted set belongs
    olderQueue: `${prefix}:v1:{leases}:waiters`, // an older release's registrations
    unknown: `${prefix}:v1:junk`, // not a shape slotgate makes
    settings: k.settings(),
    otherVersion: `${prefix}:v2:{leases}:slots`,
    otherPrefix: `${prefix}:staging:v1:{leases}:slots`,
  };
  await redis
    .multi()
    .zadd(key.leases, now + 60_000, 'live:1', now - 5_000, 'dead:1', now - 1_000, 'dead:2')
    .pexpire(key.leases, 60_000)
    .zadd(key.noExpiry, now + 60_000, 'live:2')
    // members name their lifetime: 60 s, arrived 3 s ago (live the whole test); 10 s, arrived 11 s ago (ran out)
    .zadd(key.queue, (now - 3_000) * 1000, '2|60000|w-live', (now - 11_000) * 1000, '2|10000|w-dead')
    .pexpire(key.queue, 60_000)
    .zadd(key.olderQueue, now - 2_000, '2|w-old')
    .zadd(key.queueNoExpiry, now * 1000 - 1_000_000, '1|60000|w-stuck')
    .set(key.coolingForever, 'upstream 429')
    .set(key.cooling, 'upstream 429', 'PX', 60_000)
    .set(key.wrongType, 'oops')
    .set(key.unknown, 'x')
    .hset(key.settings, 'wait_enabled', 'false')
    .zadd(key.otherVersion, now - 5_000, 'old:1')
    .zadd(key.otherPrefix, now - 5_000, 'staging:1')
    .exec();
  const expected = sortFindings([
    { key: key.leases, kind: 'expired_members', detail: '', members: ['dead:1', 'dead:2'] },
    { key: key.noExpiry, kind: 'no_expiry', detail: '' },
    { key: key.queue, kind: 'expired_members', detail: '', members: ['2|10000|w-dead'] },
    { key: key.queueNoExpiry, kind: 'no_expiry', detail: '' },
    { key: key.coolingForever, kind: 'cooldown_without_ttl', detail: '' },
    { key: key.wrongType, kind: 'wrong_type', detail: '' },
    { key: key.unknown, kind: 'unknown_key', detail: '' },
  ]);
  return { key, expected };
}

describe('slotgate doctor', () => {
  it('finds exactly the planted leftovers and changes nothing without --fix', async () => {
    const redis = await client();
    const prefix = prefixForTest('doctor');
    const { key, expected } = await plant(redis, prefix);
    const before = await snapshot(redis, prefix);

    const report = await checkLeftovers(redis, prefix);
    expect(sortFindings(report.findings)).toEqual(expected);
    expect(report.otherVersions).toEqual([key.otherVersion]);
    expect(report.olderQueues).toEqual([key.olderQueue]);
    expect(report.otherPrefixes).toEqual([key.otherPrefix]);
    expect(report.scanned).toBe(Object.keys(before).length);
    expect(report.fixed).toBe(0);
    expect(await snapshot(redis, prefix)).toEqual(before);
  });

  it('--fix removes exactly what it reported; a second run is clean', async () => {
    const redis = await client();
    const prefix = prefixForTest('doctor-fix');
    const { key, expected } = await plant(redis, prefix);
    const before = await snapshot(redis, prefix);

    const report = await checkLeftovers(redis, prefix, true);
    expect(sortFindings(report.findings)).toEqual(expected);
    // 2 + 1 expired members, 2 expiries set, 3 keys deleted
    expect(report.fixed).toBe(8);

    const after = await snapshot(redis, prefix);
    const removedKeys = Object.keys(before).filter((k) => !(k in after));
    expect(removedKeys.sort()).toEqual([key.coolingForever, key.wrongType, key.unknown].sort());
    expect(after[key.leases]).toEqual({ type: 'zset', expires: true, content: ['live:1'] });
    // the run-out registration goes (it would count against max waiting); the live one stays
    expect(after[key.queue]).toEqual({ type: 'zset', expires: true, content: ['2|60000|w-live'] });
    // The key without expiry keeps its live member and now expires with it.
    expect(after[key.noExpiry]).toEqual({ type: 'zset', expires: true, content: ['live:2'] });
    // The queue key without expiry keeps its waiter and now expires past any wait deadline.
    expect(after[key.queueNoExpiry]).toEqual({ type: 'zset', expires: true, content: ['1|60000|w-stuck'] });
    expect(await redis.pttl(key.queueNoExpiry)).toBeGreaterThan(60_000);
    // Untouched: the healthy cooldown, the settings, the other schema version, the older release's queue and the
    // other prefix.
    for (const k of [key.cooling, key.settings, key.otherVersion, key.olderQueue, key.otherPrefix])
      expect(after[k], k).toEqual(before[k]);

    const again = await checkLeftovers(redis, prefix);
    expect(again.findings).toEqual([]);
    expect(again.otherVersions).toEqual([key.otherVersion]);
  });

  it('--fix leaves a member that was renewed after the report', async () => {
    const redis = await client();
    const prefix = prefixForTest('doctor-race');
    const k = new KeyBuilder(prefix);
    const [sec] = await redis.time();
    const now = Number(sec) * 1000;
    await redis.zadd(k.slots('a'), now - 1_000, 'late:1', now - 1_000, 'dead:1');
    await redis.pexpire(k.slots('a'), 60_000);
    const report = await checkLeftovers(redis, prefix);
    expect(report.findings[0]!.members!.sort()).toEqual(['dead:1', 'late:1']);
    // A late renewal (ZADD XX, as renew.lua does) revives one of them between the report and the fix.
    await redis.zadd(k.slots('a'), 'XX', now + 60_000, 'late:1');
    expect(await fixFindings(redis, report.findings)).toBe(1);
    expect(await redis.zrange(k.slots('a'), 0, -1)).toEqual(['late:1']);
  });

  it('the command line exits 1 with the findings, --fix removes them, then 0 and "clean"', async () => {
    const redis = await client();
    const prefix = prefixForTest('doctor-cli');
    const { key, expected } = await plant(redis, prefix);

    const found = await cli('--redis', redisUrl(), '--prefix', prefix);
    expect(found.code, found.stderr).toBe(1);
    for (const f of expected) expect(found.stdout).toMatch(new RegExp(`LEFTOVER ${f.kind} +\\S*`));
    for (const f of expected) expect(found.stdout).toContain(f.key);
    expect(found.stdout).toContain(`note: ${key.otherVersion} belongs to another schema version`);
    expect(found.stdout).toContain(`note: ${key.otherPrefix} looks like a key of another prefix`);
    expect(found.stdout).toContain(`${expected.length} finding(s)`);
    expect(found.stdout).not.toContain('clean');

    const json = await cli('--redis', redisUrl(), '--prefix', prefix, '--json');
    expect(json.code).toBe(1);
    expect(sortFindings((JSON.parse(json.stdout) as { findings: Finding[] }).findings)).toEqual(expected);

    const fixed = await cli('--redis', redisUrl(), '--prefix', prefix, '--fix');
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(fixed.stdout).toContain('fixed: 8 removal(s) for 7 finding(s)');

    const clean = await cli('--redis', redisUrl(), '--prefix', prefix);
    expect(clean.code, clean.stdout).toBe(0);
    expect(clean.stdout).toContain('clean: no leftover keys');
    expect(await redis.exists(key.otherVersion, key.otherPrefix, key.cooling)).toBe(3);
  });

  it('a clean prefix exits 0; a bad URL or prefix exits 2', async () => {
    const prefix = prefixForTest('doctor-empty');
    const empty = await cli('--redis', redisUrl(), '--prefix', prefix);
    expect(empty.code).toBe(0);
    expect(empty.stdout).toContain(`prefix "${prefix}", 0 key(s) scanned`);
    expect(empty.stdout).toContain('clean: no leftover keys');

    // A prefix with glob characters is matched literally: it does not see the keys of `<prefix>x`.
    const redis = await client();
    const glob = `${prefix}*`;
    await redis.set(`${prefix}x:v1:junk`, '1');
    const literal = await checkLeftovers(redis, glob);
    expect(literal.scanned).toBe(0);

    const down = await cli('--redis', 'redis://127.0.0.1:9', '--prefix', prefix);
    expect(down.code).toBe(2);
    expect(down.stderr).toMatch(/slotgate doctor:/);
    const badPrefix = await cli('--redis', redisUrl(), '--prefix', 'a{b}');
    expect(badPrefix.code).toBe(2);
    expect(badPrefix.stderr).toContain('prefix');
  });

  it('real traffic: clean while holders live, clean one lease TTL after the holder is killed', async () => {
    const redis = await client();
    const prefix = prefixForTest('doctor-traffic');
    const store = new RedisStore({ url: redisUrl(), prefix });
    cleanups.push(() => store.close());
    const events: LeaseEvent[] = [];
    const leases = new LeaseManager({ store, leaseTtlMs: () => TTL, onEvent: (e) => events.push(e) });
    cleanups.push(() => leases.close());

    // In-process traffic: leases taken and given back, a waiter queued and removed, a short cooldown.
    for (let i = 0; i < 5; i++) {
      const got = await leases.acquireFirst([{ channelId: 'busy', max: 3 }], true);
      expect(got.lease).toBeDefined();
      if (i % 2 === 0) await leases.release(got.lease!);
    }
    // two leases held: waiters under max 2 queue
    const waiter = (token: string) => ({ channelId: 'busy', token, max: 2 });
    const wait = { maxWaiting: 3, ttlMs: TTL, leaseTtlMs: TTL };
    expect(await store.enqueue(waiter('waiter:1'), wait)).toBe('queued');
    expect(await store.leaveQueue(waiter('waiter:1'), TTL)).toBe(false);
    expect(await store.enqueue(waiter('waiter:2'), wait)).toBe('queued'); // never leaves: its registration expires
    await store.setCooldown('cooled', TTL, 'test');

    // A second instance in its own process holds two leases on another channel.
    const holder = spawn(
      process.execPath,
      ['--import', 'tsx', HOLDER, redisUrl(), prefix, 'crash', String(TTL), '2'],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    cleanups.push(() => void holder.kill('SIGKILL'));
    await waitForReady(holder);

    // Live owners everywhere: nothing is a leftover.
    await sleep(2 * TTL + 100); // past two TTLs: renewals keep every live lease
    const live = await checkLeftovers(redis, prefix);
    expect(live.findings).toEqual([]);
    expect(live.scanned).toBeGreaterThanOrEqual(2);
    expect(await redis.zcard(new KeyBuilder(prefix).slots('crash'))).toBe(2);

    // The holder dies without releasing; this instance releases its own and stops.
    holder.kill('SIGKILL');
    await once(holder, 'exit');
    for (const lease of [...leases.leases()]) await leases.release(lease);
    await leases.close();
    expect(await redis.zcard(new KeyBuilder(prefix).slots('crash'))).toBe(2); // not cleaned by anyone yet

    await sleep(TTL + 200); // one lease TTL (the waiter's and the cooldown's too) plus a margin
    const k = new KeyBuilder(prefix);
    expect(await redis.exists(k.queue('busy'), k.slots('busy'))).toBe(0);
    const after = await checkLeftovers(redis, prefix);
    expect(after.findings).toEqual([]);
    // the store's epoch key (redis.md), which stays by design, and the load summary's keys, which expire 1.25 lease
    // TTLs after the last instance holding anything renewed them (the cooling hash an hour after its last cooldown),
    // and the channels' high-water marks, which go two minutes after their minute's first note
    const summaryKeys = await redis.keys(`${k.base}:loads*`);
    const peakKeys = await redis.keys(`${k.base}:{*}:peak`);
    expect(peakKeys).toEqual([k.peak('busy')]); // the killed holder's slots expired: nothing noted for them
    expect(after.scanned).toBe(1 + summaryKeys.length + peakKeys.length);
    expect(events.filter((e) => e.type === 'lease_lost')).toEqual([]);
    const cleanRun = await cli('--redis', redisUrl(), '--prefix', prefix);
    expect(cleanRun.code, cleanRun.stdout).toBe(0);
  });

  it('a crashed holder next to a live one leaves exactly its own leases; --fix takes only those', async () => {
    const redis = await client();
    const prefix = prefixForTest('doctor-crash');
    const store = new RedisStore({ url: redisUrl(), prefix });
    cleanups.push(() => store.close());
    const events: LeaseEvent[] = [];
    const leases = new LeaseManager({ store, leaseTtlMs: () => TTL, onEvent: (e) => events.push(e) });
    cleanups.push(() => leases.close());

    const holder = spawn(
      process.execPath,
      ['--import', 'tsx', HOLDER, redisUrl(), prefix, 'shared', String(TTL), '2'],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    cleanups.push(() => void holder.kill('SIGKILL'));
    await waitForReady(holder);
    const mine = await leases.acquireFirst([{ channelId: 'shared', max: 3 }], true);
    expect(mine.lease).toBeDefined();

    holder.kill('SIGKILL');
    await once(holder, 'exit');
    await sleep(TTL + 200); // the dead holder's leases expire by score; this instance keeps renewing its own
    const report = await checkLeftovers(redis, prefix);
    expect(report.findings).toHaveLength(1);
    const [finding] = report.findings;
    expect(finding!.kind).toBe('expired_members');
    expect(finding!.key).toBe(new KeyBuilder(prefix).slots('shared'));
    expect(finding!.members!.sort()).toEqual([`holder-${holder.pid}:1`, `holder-${holder.pid}:2`]);

    const fixed = await checkLeftovers(redis, prefix, true);
    expect(fixed.fixed).toBe(2);
    expect(await redis.zrange(new KeyBuilder(prefix).slots('shared'), 0, -1)).toEqual([mine.lease!.token]);
    await sleep(TTL); // renewals go on: the live lease was not taken
    await leases.renewAll();
    expect(events.filter((e) => e.type === 'lease_lost')).toEqual([]);
    expect((await checkLeftovers(redis, prefix)).findings).toEqual([]);
  });
});

describe('slotgate doctor: slots of dead owners', () => {
  /** A lease holder in its own process: `count` leases on `channel` (max = count), renewed until it is killed. */
  async function holder(prefix: string, channel: string, ttl: number, count: number): Promise<ChildProcess> {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', HOLDER, redisUrl(), prefix, channel, String(ttl), String(count)],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    cleanups.push(() => void child.kill('SIGKILL'));
    await waitForReady(child);
    return child;
  }

  /** A heartbeat in the instance list, as the gateway writes it, `ageMs` old on the Redis clock. */
  async function heartbeat(redis: Redis, prefix: string, id: string, ageMs: number): Promise<void> {
    const [sec, usec] = await redis.time();
    const seen = new Date(Number(sec) * 1000 + Math.floor(Number(usec) / 1000) - ageMs).toISOString();
    const info = { id, host: 'test', pid: 1, started_at: seen, seen_at: seen };
    await redis.hset(new KeyBuilder(prefix).instances(), id, JSON.stringify(info));
  }

  it('reports the live slots of an instance whose heartbeat stopped, never a live or unlisted one; --fix releases them to a waiter', async () => {
    const redis = await client();
    const prefix = prefixForTest('doctor-dead');
    const k = new KeyBuilder(prefix);
    const LONG_TTL = 60_000; // the dead holder's leases stay live for the whole test: only its heartbeat says it died
    const [dead, live, unlisted] = await Promise.all([
      holder(prefix, 'ch', LONG_TTL, 2),
      holder(prefix, 'other', LONG_TTL, 1),
      holder(prefix, 'third', LONG_TTL, 1), // announces nothing (a library user)
    ]);
    await heartbeat(redis, prefix, `holder-${live.pid}`, 0);
    // the dead one's heartbeat: three missed beats and more (the gateway beats every 5 s)
    await heartbeat(redis, prefix, `holder-${dead.pid}`, 20_000);
    dead.kill('SIGKILL');
    await once(dead, 'exit');
    // a waiter of a live instance queues behind the full channel
    const store = new RedisStore({ url: redisUrl(), prefix });
    cleanups.push(() => store.close());
    const waiter = { channelId: 'ch', token: `holder-${live.pid}:w`, max: 2 };
    expect(await store.enqueue(waiter, { maxWaiting: 3, ttlMs: LONG_TTL, leaseTtlMs: LONG_TTL })).toBe(
      'queued',
    );

    const found = await cli('--redis', redisUrl(), '--prefix', prefix);
    expect(found.code, found.stderr).toBe(1);
    const lines = found.stdout.split('\n').filter((l) => l.includes('DEAD OWNER'));
    expect(lines, found.stdout).toHaveLength(1);
    expect(lines[0]).toContain(k.slots('ch'));
    expect(lines[0]).toMatch(
      new RegExp(
        `2 slots of channel "ch" held by instance holder-${dead.pid}, whose heartbeat stopped 2\\d s ago`,
      ),
    );
    const frees = Number(/frees in (\d+) s/.exec(lines[0]!)?.[1]);
    expect(frees).toBeGreaterThan(0);
    expect(frees).toBeLessThanOrEqual(LONG_TTL / 1000);
    expect(found.stdout).not.toContain(`holder-${live.pid}`);
    expect(found.stdout).not.toContain(`holder-${unlisted.pid}`);
    expect(await redis.zcard(k.slots('ch'))).toBe(2); // a read-only run released nothing

    const fixed = await cli('--redis', redisUrl(), '--prefix', prefix, '--fix');
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(fixed.stdout).toContain('fixed: 2 removal(s) for 1 finding(s)');
    // the freed slot went to the waiter (a grant for its instance to claim), the other is free
    expect(await redis.zrange(k.slots('ch'), 0, -1)).toEqual([waiter.token]);
    expect(await redis.zcard(k.queue('ch'))).toBe(0);
    // the live and the unlisted holders keep theirs
    expect(await redis.zrange(k.slots('other'), 0, -1)).toEqual([`holder-${live.pid}:1`]);
    expect(await redis.zrange(k.slots('third'), 0, -1)).toEqual([`holder-${unlisted.pid}:1`]);

    const again = await cli('--redis', redisUrl(), '--prefix', prefix);
    expect(again.code, again.stdout).toBe(0);
    expect(again.stdout).toContain('clean: no leftover keys');
  });

  it('lists the live slots of an instance whose heartbeat is late but not yet dead, with its age: never "clean", exit 0, --fix leaves them', async () => {
    const redis = await client();
    const prefix = prefixForTest('doctor-late');
    const k = new KeyBuilder(prefix);
    const [sec] = await redis.time();
    const now = Number(sec) * 1000;
    await redis.zadd(k.slots('ch'), now + 30_000, 'late:1', now + 30_000, 'late:2', now + 30_000, 'fresh:1');
    await redis.pexpire(k.slots('ch'), 60_000);
    // Ages only grow while the test runs: 'late' is past the late threshold (7.5 s) from the start, and far from the
    // dead one (15 s); 'fresh' is a live gateway between two beats (every 5 s), planted again before each CLI run.
    const plantHeartbeats = async (freshAge: number) => {
      await heartbeat(redis, prefix, 'late', 7_600);
      await heartbeat(redis, prefix, 'fresh', freshAge);
    };
    await plantHeartbeats(4_000);

    const report = await checkLeftovers(redis, prefix);
    expect(report.findings).toEqual([]);
    expect(report.lateOwners).toHaveLength(1);
    const [late] = report.lateOwners;
    expect(late).toMatchObject({
      owner: 'late',
      slots: 2,
      held: [{ key: k.slots('ch'), channelId: 'ch', slots: 2 }],
    });
    expect(late!.silentMs).toBeGreaterThanOrEqual(7_600);
    expect(late!.silentMs + late!.deadInMs).toBe(15_000);
    expect(late!.held[0]!.freesInMs).toBeGreaterThan(20_000);

    await plantHeartbeats(0);
    const run = await cli('--redis', redisUrl(), '--prefix', prefix);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).not.toContain('clean');
    expect(run.stdout).toMatch(
      /^late heartbeats: 2 slots held by 1 instance not heard from for over 7\.5 s/m,
    );
    const age =
      /LATE OWNER 2 slots held by instance late, last heartbeat (\d+) s ago \(2 of channel "ch"\)/.exec(
        run.stdout,
      );
    expect(age, run.stdout).not.toBeNull();
    expect(Number(age![1])).toBeGreaterThanOrEqual(8);
    expect(Number(age![1])).toBeLessThanOrEqual(15);
    expect(run.stdout).not.toContain('fresh');

    await plantHeartbeats(0);
    const json = await cli('--redis', redisUrl(), '--prefix', prefix, '--json');
    expect(json.code, json.stderr).toBe(0);
    const parsed = JSON.parse(json.stdout) as { findings: Finding[]; lateOwners: LateOwner[] };
    expect(parsed.findings).toEqual([]);
    expect(parsed.lateOwners.map((o) => [o.owner, o.slots, o.silentMs >= 7_600])).toEqual([
      ['late', 2, true],
    ]);

    await plantHeartbeats(0);
    const fixed = await cli('--redis', redisUrl(), '--prefix', prefix, '--fix');
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(fixed.stdout).toContain('LATE OWNER 2 slots held by instance late');
    expect(await redis.zcard(k.slots('ch'))).toBe(3); // a late owner's slots are never released
  });

  it("prints each channel's high-water mark, against its max from --config, ABOVE MAX when a restore went over it", async () => {
    const prefix = prefixForTest('doctor-peak');
    const store = new RedisStore({ url: redisUrl(), prefix });
    cleanups.push(() => store.close());
    const opts = (token: string) => ({ token, leaseTtlMs: 60_000, checkCooldown: true });
    for (const token of ['a:1', 'a:2'])
      expect(await store.acquireFirst([{ channelId: 'ch', max: 2 }], opts(token))).toEqual(['acquired']);
    expect(await store.acquireFirst([{ channelId: 'low', max: 3 }], opts('a:3'))).toEqual(['acquired']);
    // a restore takes a lease back whatever the load: 3 held at once on a channel of max 2
    expect(await store.reclaim([{ channelId: 'ch', token: 'b:1', max: 2 }], 60_000, true)).toEqual([]);
    // 'low' held one slot, now none: its mark says 1
    expect(await store.release({ channelId: 'low', token: 'a:3' }, 60_000).done).toBe(true);

    const report = await checkLeftovers(await client(), prefix);
    expect(report.findings).toEqual([]);
    expect(report.peaks.map((p) => [p.channelId, p.peak])).toEqual([
      ['ch', 3],
      ['low', 1],
    ]);
    const dir = await mkdtemp(join(tmpdir(), 'slotgate-doctor-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const config = join(dir, 'slotgate.yaml');
    await writeFile(
      config,
      [
        `redis: { url: "${redisUrl()}", prefix: "${prefix}" }`,
        'channels:',
        '  - { id: ch, type: openai, key: env:UNSET_KEY, models: [m], max_concurrency: 2 }',
        '  - { id: low, type: openai, key: env:UNSET_KEY, models: [n], max_concurrency: 3 }',
      ].join('\n'),
    );
    const run = await cli('--config', config);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(
      /most slots held at once in the last \d+ s: channel "ch" 3 of max 2 — ABOVE MAX, channel "low" 1 of max 3$/m,
    );
    // without a config there is no max to compare with
    const bare = await cli('--redis', redisUrl(), '--prefix', prefix);
    expect(bare.stdout).toMatch(
      /most slots held at once in the last \d+ s: channel "ch" 3, channel "low" 1$/m,
    );
    // a peak key that lost its expiry is a leftover; --fix gives it two minutes
    const redis = await client();
    const peakKey = new KeyBuilder(prefix).peak('low');
    await redis.persist(peakKey);
    const leftover = await checkLeftovers(redis, prefix);
    expect(leftover.findings.map((f) => [f.kind, f.key])).toEqual([['no_expiry', peakKey]]);
    expect((await checkLeftovers(redis, prefix, true)).fixed).toBe(1);
    expect(await redis.pttl(peakKey)).toBeGreaterThan(60_000);
  });

  it("--fix leaves a dead owner's slot renewed after the report, and an owner heard from again", async () => {
    const redis = await client();
    const prefix = prefixForTest('doctor-dead-race');
    const k = new KeyBuilder(prefix);
    const [sec] = await redis.time();
    const now = Number(sec) * 1000;
    await redis.zadd(k.slots('a'), now + 30_000, 'gone:1', now + 30_000, 'gone:2', now + 30_000, 'back:1');
    await redis.pexpire(k.slots('a'), 60_000);
    await heartbeat(redis, prefix, 'gone', 20_000);
    await heartbeat(redis, prefix, 'back', 20_000);
    const report = await checkLeftovers(redis, prefix);
    expect(report.findings.map((f) => [f.kind, f.owner, f.members]).sort()).toEqual([
      ['dead_owner', 'back', ['back:1']],
      ['dead_owner', 'gone', ['gone:1', 'gone:2']],
    ]);
    // between the report and the fix: one lease renewed (ZADD XX, as renewLeases does), one owner beats again
    await redis.zadd(k.slots('a'), 'XX', now + 40_000, 'gone:2');
    await heartbeat(redis, prefix, 'back', 0);
    expect(await fixFindings(redis, report.findings, prefix)).toBe(1);
    expect(await redis.zrange(k.slots('a'), 0, -1)).toEqual(['back:1', 'gone:2']);
  });
});

async function waitForReady(child: ChildProcess): Promise<void> {
  let out = '';
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`lease holder not ready: ${err}`)), 10_000);
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('ready')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`lease holder exited (${code}): ${err}`));
    });
  });
}
