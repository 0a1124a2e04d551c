/**
 * A redis-server that speaks only TLS to slotgate (a client certificate required, certificates made here with
 * openssl) and knows the user of docs/redis.md's ACL rule: two instances go the whole way as that user — acquire,
 * wait, grant, renew, release, an empty restart — with nothing in the ACL log, while the same user cannot reach a key
 * or channel outside its prefix. A rule without `+info` is named by the store, by /readyz and by `slotgate doctor`,
 * and the gateway takes its TLS files and user from its config.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis, type RedisOptions } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import { CapacityError, StoreUnavailableError } from '../../packages/slotgate/src/core/errors.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { useCleanups } from '../helpers/cleanups.js';
import { CLIENT, configDoc, startGateway } from '../helpers/gateway.js';
import { runCli } from '../helpers/gw-gateway.js';
import { RedisServer, freePort } from '../helpers/redis-server.js';
import { makeCerts, tlsServerArgs, type TestCerts } from '../helpers/tls-certs.js';
import { uniquePrefix } from '../helpers/redis.js';

const PASSWORD = 'acl-test-password';
const PREFIX = uniquePrefix('acl');
const cleanups = useCleanups();

/** docs/redis.md's rule for `user` on PREFIX, as `ACL SETUSER` arguments (`+info` left out for the narrow user). */
function documentedRule(user: string, without?: string): string[] {
  const doc = readFileSync(new URL('../../docs/redis.md', import.meta.url), 'utf8');
  const block = /<!-- acl-rule -->\s*```\n([^`]+)```/.exec(doc)?.[1];
  if (!block) throw new Error('docs/redis.md has no ACL rule block after <!-- acl-rule -->');
  const [acl, setuser, name, ...rule] = block.trim().split(/\s+/);
  expect([acl, setuser, name]).toEqual(['ACL', 'SETUSER', 'slotgate']);
  return [
    user,
    ...rule
      .filter((t) => t !== without)
      .map((t) => t.replace('>CHANGE-ME', `>${PASSWORD}`).replace(/^([~&])slotgate:\*$/, `$1${PREFIX}:*`)),
  ];
}

let certs: TestCerts;
let server: RedisServer;
let tlsPort: number;

beforeAll(async () => {
  certs = makeCerts();
  tlsPort = await freePort();
  server = await RedisServer.start(undefined, [
    ...tlsServerArgs(certs, tlsPort),
    // in the server's arguments, so an empty restart keeps them
    '--user',
    ...documentedRule('slotgate'),
    '--user',
    ...documentedRule('narrow', '+info'),
  ]);
}, 30_000);

afterAll(async () => {
  await server?.stop();
  certs?.remove();
});

const tlsOptions = () => ({ ca: certs.ca, cert: certs.cert, key: certs.key, servername: 'localhost' });

function store(user: string, redisOptions: RedisOptions = {}): RedisStore {
  const s = new RedisStore({
    url: `rediss://127.0.0.1:${tlsPort}`,
    prefix: PREFIX,
    restartGraceMs: 300,
    redisOptions: { username: user, password: PASSWORD, tls: tlsOptions(), ...redisOptions },
  });
  cleanups.push(() => s.close());
  return s;
}

/** The server's ACL log, read as the default user on the plain port; cleared after. */
async function aclLog(): Promise<string[]> {
  const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
  try {
    const entries = (await admin.call('ACL', 'LOG')) as unknown[][];
    await admin.call('ACL', 'LOG', 'RESET');
    return entries.map((e) => `${String(e[1])} ${String(e[3])} ${String(e[5])}`);
  } finally {
    admin.disconnect();
  }
}

const channel = [{ id: 'ch', maxConcurrency: 1 }];

describe('TLS and the documented ACL user', () => {
  it('acquire, wait, grant, renew, release and an empty restart, with nothing denied', async () => {
    await aclLog();
    const a = createAdmission({ store: store('slotgate'), settings: { lease_ttl_ms: 5000 } });
    const bStore = store('slotgate');
    const b = createAdmission({ store: bStore, settings: { lease_ttl_ms: 5000, wait_timeout_ms: 30_000 } });
    cleanups.push(() => a.close());
    cleanups.push(() => b.close());

    const first = await a.acquire({ candidates: channel });
    const waiting = b.acquire({ candidates: channel });
    // held past its TTL: only renewals keep it
    await sleep(6000);
    expect(first.lost.aborted).toBe(false);
    expect((await bStore.readLoads(['ch'])).get('ch')).toMatchObject({ active: 1, waiting: 1 });
    await first.release();
    const second = await waiting;

    await server.restart();
    // b registers its lease again; a is not admitted above max meanwhile
    await expect(
      a.acquire({ candidates: channel, signal: AbortSignal.timeout(1500) }),
    ).rejects.toBeInstanceOf(CapacityError);
    expect(bStore.restartsDetected).toBe(1);
    expect((await bStore.readLoads(['ch'])).get('ch')).toMatchObject({ active: 1 });
    await second.release();
    await (await a.acquire({ candidates: channel })).release();

    expect(await aclLog()).toEqual([]);
  }, 40_000);

  it('the user reaches no key and no channel outside its prefix', async () => {
    const user = new Redis(`rediss://127.0.0.1:${tlsPort}`, {
      username: 'slotgate',
      password: PASSWORD,
      tls: tlsOptions(),
      maxRetriesPerRequest: 1,
    });
    cleanups.push(() => user.disconnect());
    expect(await user.set(`${PREFIX}:mine`, '1', 'PX', 1000)).toBe('OK');
    await expect(user.get('other:key')).rejects.toThrow(/NOPERM/);
    await expect(user.set('other:key', '1')).rejects.toThrow(/NOPERM/);
    await expect(user.publish('other:channel', 'x')).rejects.toThrow(/NOPERM/);
    await expect(user.call('CONFIG', 'GET', 'maxmemory')).rejects.toThrow(/NOPERM/);
    await aclLog();
  });

  it('without a client certificate, or without the CA, the connection is refused', async () => {
    const { cert: _cert, key: _key, ...noCert } = tlsOptions();
    const withoutCert = store('slotgate', { tls: noCert });
    const { ca: _ca, ...noCa } = tlsOptions();
    const withoutCa = store('slotgate', { tls: noCa });
    for (const s of [withoutCert, withoutCa]) expect((await s.health()).healthy).toBe(false);
    expect((await withoutCa.health()).error).toMatch(/certificate/);
  });
});

describe('a rule too narrow is named', () => {
  it('acquires fail closed naming the command, health says it, and it recovers once the rule is fixed', async () => {
    const narrow = store('narrow');
    const admission = createAdmission({ store: narrow });
    cleanups.push(() => admission.close());
    const failed = await admission.acquire({ candidates: channel }).catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(StoreUnavailableError);
    expect((failed as Error).message).toContain('the Redis user may not run what slotgate needs: info');
    expect(await narrow.health()).toMatchObject({
      healthy: false,
      error: expect.stringContaining(': info —'),
    });

    const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
    cleanups.push(() => admin.disconnect());
    await admin.call('ACL', 'SETUSER', 'narrow', '+info');
    try {
      expect(await narrow.health()).toMatchObject({ healthy: true });
      await (await admission.acquire({ candidates: channel })).release();
    } finally {
      await admin.call('ACL', 'SETUSER', 'narrow', '-info');
      await aclLog();
    }
  });

  it('the gateway: TLS files and the user from its config; /readyz names the missing command', async () => {
    const redis = (user: string) => ({
      url: `rediss://127.0.0.1:${tlsPort}`,
      prefix: PREFIX,
      username: user,
      password: 'env:SLOTGATE_TEST_REDIS_PASSWORD',
      tls: {
        ca: certs.files.ca,
        cert: certs.files.clientCert,
        key: certs.files.clientKey,
        servername: 'localhost',
      },
    });
    process.env.SLOTGATE_TEST_REDIS_PASSWORD = PASSWORD;
    cleanups.push(() => delete process.env.SLOTGATE_TEST_REDIS_PASSWORD);
    const channels = [{ id: 'mock-1', type: 'mock', models: ['m'], max_concurrency: 1 }];
    const good = await startGateway({ ...configDoc({ channels }), redis: redis('slotgate') });
    cleanups.push(() => good.close());
    expect((await fetch(`${good.url}/readyz`)).status).toBe(200);
    const chat = await fetch(`${good.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...CLIENT, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chat.status, await chat.clone().text()).toBe(200);

    const bad = await startGateway({ ...configDoc({ channels }), redis: redis('narrow') });
    cleanups.push(() => bad.close());
    const ready = await fetch(`${bad.url}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.text()).toContain('the Redis user may not run what slotgate needs: info');
    await aclLog();
  });
});

describe('slotgate doctor', () => {
  it('says what the rule is missing and exits 1; with the rule fixed it checks as usual', async () => {
    const config = {
      redis: {
        url: `rediss://127.0.0.1:${tlsPort}`,
        prefix: PREFIX,
        username: 'narrow',
        password: PASSWORD,
        tls: { ca: certs.files.ca, cert: certs.files.clientCert, key: certs.files.clientKey },
      },
    };
    const path = join(certs.dir, 'doctor.yaml');
    writeFileSync(path, JSON.stringify(config));
    const narrow = await runCli(['doctor', '--config', path]);
    expect(narrow.stdout, narrow.stderr).toContain('may not run what slotgate needs: info, scan');
    expect(narrow.code).toBe(1);

    const admin = new Redis(server.url, { maxRetriesPerRequest: 1 });
    cleanups.push(() => admin.disconnect());
    await admin.call('ACL', 'SETUSER', 'narrow', '+info', '+scan');
    try {
      const fixed = await runCli(['doctor', '--config', path]);
      expect(fixed.stdout, fixed.stderr).not.toContain('may not run');
      expect(fixed.code, fixed.stdout + fixed.stderr).toBeLessThan(2);
    } finally {
      await admin.call('ACL', 'SETUSER', 'narrow', '-info', '-scan');
      await aclLog();
    }
  }, 30_000);
});
