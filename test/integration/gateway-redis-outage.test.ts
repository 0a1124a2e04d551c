/**
 * The gateway with its Redis stopped and started again, on a private redis-server: bounded channels
 * fail closed with 503 admission_store_unavailable and `Retry-After: 1`, unlimited channels keep serving with no
 * Redis at all, and once Redis is back bounded channels serve again without a restart. /readyz follows Redis while
 * /livez and /healthz stay 200, and a settings update while Redis is down is 503 and changes nothing.
 */
import { describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import type { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { FakeUpstream } from '../helpers/fake-upstream.js';
import {
  ADMIN,
  CLIENT,
  SECRETS,
  call,
  chat,
  configDoc,
  eventually,
  startGateway,
  expectNoSecretsLogged,
} from '../helpers/gateway.js';
import { RedisServer } from '../helpers/redis-server.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

describe('gateway with Redis down', () => {
  it('bounded channels get 503 admission_store_unavailable, unlimited ones serve; Redis back → bounded serve again', async () => {
    const server = await RedisServer.start();
    cleanups.push(() => server.stop());
    const up = await FakeUpstream.start();
    cleanups.push(() => up.close());
    const channel = (id: string, model: string, max: number) => ({
      id,
      type: 'openai',
      base_url: up.url(id),
      key: SECRETS.channelKey,
      models: [model],
      max_concurrency: max,
    });
    const gw = await startGateway(
      configDoc({
        redis: server.url,
        channels: [
          channel('bounded', 'bounded-model', 2),
          channel('free', 'free-model', 0),
          {
            id: 'bounded-mock',
            type: 'mock',
            models: ['mock-model'],
            max_concurrency: 1,
            mock: { latency_ms: 0 },
          },
        ],
      }),
    );
    cleanups.push(() => gw.close());
    const ask = (model: string, path = '/v1/chat/completions') =>
      call(`${gw.url}${path}`, { headers: CLIENT, body: chat(model) });

    expect((await ask('bounded-model')).status).toBe(200);
    expect((await ask('free-model')).status).toBe(200);
    // both leases are back in Redis before it goes away (a release caught by the outage is retried until its lease
    // expires, and close would wait for that)
    const loads = () => gw.gateway.store.readLoads(['bounded', 'bounded-mock']);
    expect(await eventually(async () => [...(await loads()).values()].every((l) => l.active === 0))).toBe(
      true,
    );
    await server.stop();

    for (const model of ['bounded-model', 'mock-model']) {
      const res = await ask(model);
      expect(res.status).toBe(503);
      expect(res.headers['retry-after']).toBe('1');
      expect((res.json() as { error: { code: string; type: string } }).error).toMatchObject({
        code: 'admission_store_unavailable',
        type: 'server_error',
      });
    }
    // (/v1/messages reaches mock and anthropic channels only: the bounded mock here)
    const anthropic = await call(`${gw.url}/v1/messages`, {
      headers: { 'x-api-key': SECRETS.clientToken },
      body: chat('mock-model'),
    });
    expect(anthropic.status).toBe(503);
    expect(anthropic.headers['retry-after']).toBe('1');
    expect(anthropic.json()).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } });
    expect(up.requests('bounded')).toHaveLength(1); // nothing reached the bounded upstream while Redis was down

    for (let i = 0; i < 3; i++) {
      const res = await ask('free-model');
      expect(res.status).toBe(200);
      expect(res.headers['x-slotgate-channel']).toBe('free');
    }
    // the admin status answers (no Redis read may hold it up: generous bound, the ping gives up after 1 s) and says
    // Redis is unhealthy
    const asked = Date.now();
    const status = await call(`${gw.url}/admin/status`, { headers: ADMIN });
    expect(Date.now() - asked).toBeLessThan(5000);
    expect(status.status).toBe(200);
    expect((status.json() as { redis: { healthy: boolean } }).redis.healthy).toBe(false);

    await server.start(); // same port, empty data set
    expect(await eventually(async () => (await ask('bounded-model')).status === 200, 15_000)).toBe(true);
    expect((await ask('mock-model')).status).toBe(200);
    expect((await ask('free-model')).status).toBe(200);
    const healthy = await call(`${gw.url}/admin/status`, { headers: ADMIN });
    expect((healthy.json() as { redis: { healthy: boolean } }).redis.healthy).toBe(true);
    // no lease is stranded by the outage
    expect(await eventually(() => gw.gateway.admission.stats().liveLeases === 0)).toBe(true);
  });

  it('/readyz follows Redis, /livez and /healthz do not; a settings PUT while Redis is down is 503 and changes nothing', async () => {
    const server = await RedisServer.start();
    cleanups.push(() => server.stop());
    const gw = await startGateway(
      configDoc({
        redis: server.url,
        channels: [{ id: 'm', type: 'mock', models: ['m'], max_concurrency: 1, mock: { latency_ms: 0 } }],
      }),
    );
    cleanups.push(() => gw.close());
    const get = (path: string) => call(`${gw.url}${path}`, { headers: ADMIN });
    const putRetries = (n: number) =>
      call(`${gw.url}/admin/settings`, { method: 'PUT', headers: ADMIN, body: { retry_times: n } });
    const alive = async () => {
      for (const path of ['/livez', '/healthz']) {
        const res = await get(path);
        expect(res.status).toBe(200);
        expect(res.json()).toEqual({ ok: true });
      }
    };

    expect((await get('/readyz')).json()).toEqual({ ready: true });
    await alive();
    await server.stop();

    // the previous answer may be reused for up to 1 s
    expect(await eventually(async () => (await get('/readyz')).status === 503, 10_000)).toBe(true);
    const notReady = await get('/readyz');
    expect((notReady.json() as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'not_ready',
      message: expect.stringMatching(/^slotgate: not ready: the admission store \(redis\) does not answer: /),
    });
    await alive();

    const put = await putRetries(4);
    expect(put.status).toBe(503);
    expect(put.headers['retry-after']).toBe('1');
    expect((put.json() as { error: { code: string } }).error.code).toBe('admission_store_unavailable');
    expect(gw.gateway.settings.retry_times).toBe(1);
    expect(
      ((await get('/admin/settings')).json() as { settings: { retry_times: number } }).settings.retry_times,
    ).toBe(1);

    await server.start(); // same port, empty data set
    expect(await eventually(async () => (await get('/readyz')).status === 200, 15_000)).toBe(true);
    expect(gw.gateway.settings.retry_times).toBe(1);
    const redis = new Redis(server.url);
    cleanups.push(() => redis.disconnect());
    expect(await redis.hgetall((gw.gateway.store as RedisStore).keys.settings())).toEqual({});
    // and a PUT once Redis is back is stored
    expect((await putRetries(4)).status).toBe(200);
    expect(gw.gateway.settings.retry_times).toBe(4);
  });
});
