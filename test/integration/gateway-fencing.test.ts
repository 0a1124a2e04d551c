/**
 * Fencing through the gateway, on a real Redis with a fake upstream: a request whose slot is lost (its lease deleted
 * from Redis and its place taken by another instance) has its upstream call ended, and the client learns it: 503
 * `lease_lost` before the first byte, an error event as the last event of a stream. With fencing off, the old
 * behaviour: the request runs on.
 */
import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { FakeUpstream, gate, sseData } from '../helpers/fake-upstream.js';
import {
  CLIENT,
  SECRETS,
  call,
  chat,
  configDoc,
  eventually,
  startGateway,
  streamingCall,
  type TestGateway,
  expectNoSecretsLogged,
} from '../helpers/gateway.js';
import { redisUrl } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

async function setup(settings: Record<string, unknown> = {}) {
  const up = await FakeUpstream.start();
  cleanups.push(() => up.close());
  const gw: TestGateway = await startGateway(
    configDoc({
      channels: [
        {
          id: 'solo',
          type: 'openai',
          base_url: up.url('solo'),
          key: SECRETS.channelKey,
          models: ['gpt-x'],
          max_concurrency: 1,
        },
      ],
      // renewed every 1.7 s; the fake upstream's answers below outlast two renewals
      settings: { lease_ttl_ms: 5000, wait_enabled: false, ...settings },
    }),
  );
  cleanups.push(() => gw.close());
  const redis = new Redis(redisUrl());
  cleanups.push(() => redis.disconnect());
  const slots = (gw.gateway.store as unknown as { keys: { slots(id: string): string } }).keys.slots('solo');
  /** Another instance takes the slot behind the holder's back: its lease is gone and the channel is full. */
  const steal = async () => {
    expect(await redis.zcard(slots)).toBe(1);
    await redis.del(slots);
    await redis.zadd(slots, Date.now() + 60_000, 'thief:1');
    await redis.pexpire(slots, 60_000);
  };
  return { up, gw, redis, steal };
}

const stream = (n: number) => [
  ...Array.from({ length: n }, (_, i) =>
    sseData({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: `w${i} ` } }] }),
  ),
  'data: [DONE]\n\n',
];

describe('a request whose slot is lost', () => {
  it('mid-stream: the upstream call is ended and the stream ends with a lease_lost error event', async () => {
    const { up, gw, steal } = await setup();
    const release = gate();
    up.on('solo', { sse: [stream(1)[0]!, () => release.promise, ...stream(3).slice(1)] });
    const client = streamingCall(`${gw.url}/v1/chat/completions`, chat('gpt-x', { stream: true }), CLIENT);
    expect(await client.firstChunk).toContain('w0');
    await steal();
    const text = await client.body; // ends at the next renewal (≤ 1.7 s), long before the upstream would
    expect(text).toContain('w0');
    expect(text).not.toContain('[DONE]');
    const events = text.trim().split('\n\n');
    expect(JSON.parse(events.at(-1)!.replace(/^data: /, ''))).toMatchObject({
      error: { code: 'lease_lost', type: 'server_error' },
    });
    const [request] = up.requests('solo');
    await request!.done;
    expect(request!.aborted).toBe(true);
    release.open();
    // the thief's slot is not disturbed: the channel is still full for a newcomer
    expect(
      (await call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('gpt-x') })).status,
    ).toBe(429);
  });

  it('before the first byte: the client gets 503 lease_lost with Retry-After', async () => {
    const { up, gw, steal } = await setup();
    const headers = gate();
    up.on('solo', async () => {
      await headers.promise;
      return { json: { late: true } };
    });
    const answer = call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('gpt-x') });
    expect(await eventually(() => up.record('solo').current === 1)).toBe(true);
    await steal();
    const res = await answer;
    expect(res.status).toBe(503);
    expect(res.headers['retry-after']).toBe('1');
    expect(res.json()).toMatchObject({ error: { code: 'lease_lost', type: 'server_error' } });
    expect(await eventually(() => up.record('solo').current === 0)).toBe(true);
    headers.open();
  });

  it('with lease_fencing_enabled false the request runs on (the old behaviour)', async () => {
    const { up, gw, steal } = await setup({ lease_fencing_enabled: false });
    const release = gate();
    up.on('solo', { sse: [stream(1)[0]!, () => release.promise, ...stream(3).slice(1)] });
    const client = streamingCall(`${gw.url}/v1/chat/completions`, chat('gpt-x', { stream: true }), CLIENT);
    expect(await client.firstChunk).toContain('w0');
    await steal();
    const lost = () => gw.gateway.admission.stats().leasesLost === 1;
    expect(await eventually(lost, 5000)).toBe(true);
    release.open();
    const text = await client.body;
    expect(text).toContain('[DONE]');
    expect(text).not.toContain('lease_lost');
  });
});
