/**
 * Streaming through the gateway on real sockets, with a real Redis and a fake upstream that counts its own
 * concurrency: the upstream never sees more than max_concurrency at once, whatever the burst and
 * however many gateway instances share the Redis; every client gets its whole stream or a 429 it can act on; a client
 * that goes away frees its slot (or its waiter place) and aborts the upstream request; SSE passes through as it comes.
 */
import { describe, expect, it } from 'vitest';
import type { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { FakeUpstream, gate, sseData } from '../helpers/fake-upstream.js';
import {
  CLIENT,
  LOG_LINES,
  SECRETS,
  call,
  chat,
  configDoc,
  eventually,
  startGateway,
  streamingCall,
  within,
  type Answer,
  type TestGateway,
  expectNoSecretsLogged,
} from '../helpers/gateway.js';
import { uniquePrefix } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

async function upstream(): Promise<FakeUpstream> {
  const up = await FakeUpstream.start();
  cleanups.push(() => up.close());
  return up;
}

async function gateway(...args: Parameters<typeof startGateway>): Promise<TestGateway> {
  const gw = await startGateway(...args);
  cleanups.push(() => gw.close());
  return gw;
}

const openai = (up: FakeUpstream, id: string, extra: Record<string, unknown> = {}) => ({
  id,
  type: 'openai',
  base_url: up.url(id),
  key: SECRETS.channelKey,
  models: ['gpt-x'],
  ...extra,
});

const chunks = (n: number) => [
  ...Array.from({ length: n }, (_, i) =>
    sseData({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: `w${i} ` } }] }),
  ),
  'data: [DONE]\n\n',
];

function expectCapacity429(answer: Answer): void {
  expect(answer.status).toBe(429);
  const body = answer.json() as { error: { code: string; type: string; message: string } };
  expect(body.error.code).toBe('channel_capacity_exhausted');
  expect(body.error.type).toBe('rate_limit_error');
  expect(body.error.message).toMatch(/alpha/); // names the saturated channel
  expect(String(answer.headers['retry-after'])).toMatch(/^[1-9]\d*$/);
}

/** Live leases and waiters of the channel, straight from Redis. */
async function redisLoad(gw: TestGateway, id: string) {
  const store = gw.gateway.store as RedisStore;
  return (await store.readLoads([id])).get(id)!;
}

describe('gateway streams on Redis', () => {
  it('3 × max concurrent streaming clients: the upstream never sees more than max, each client gets its whole stream or a 429', async () => {
    const up = await upstream();
    const parts = chunks(10);
    up.on('alpha', { sse: parts, chunkDelayMs: 50 });
    const gw = await gateway(
      configDoc({
        channels: [openai(up, 'alpha', { max_concurrency: 3, max_waiting: 3 })],
        settings: { wait_timeout_ms: 10_000 },
      }),
    );

    const answers = await Promise.all(
      Array.from({ length: 9 }, () =>
        call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('gpt-x', { stream: true }) }),
      ),
    );

    const served = answers.filter((a) => a.status === 200);
    const limited = answers.filter((a) => a.status !== 200);
    expect(up.record('alpha').max).toBe(3);
    // three run, three wait in the queue (max_waiting 3), the rest are turned away
    expect(served.length).toBeGreaterThanOrEqual(6);
    expect(limited.length).toBeGreaterThanOrEqual(1);
    for (const a of limited) expect(a.text).toMatch(/reason: queue_full/);
    for (const a of served) {
      expect(a.text).toBe(parts.join(''));
      expect(a.headers['content-type']).toMatch(/^text\/event-stream/);
      expect(a.headers['x-slotgate-channel']).toBe('alpha');
    }
    for (const a of limited) expectCapacity429(a);
    // every admitted request reached the upstream once and ran to the end; no rejected one reached it
    expect(up.requests('alpha')).toHaveLength(served.length);
    expect(up.requests('alpha').every((r) => r.finished)).toBe(true);
    // nothing leaks: every lease and waiter registration is gone from Redis
    expect(await eventually(async () => (await redisLoad(gw, 'alpha')).active === 0)).toBe(true);
    expect(await redisLoad(gw, 'alpha')).toMatchObject({ active: 0, waiting: 0 });
  });

  it('default queue bound: a burst of 5 × max over two gateways waits its turn, every request served, no 429', async () => {
    const up = await upstream();
    const parts = chunks(5);
    up.on('alpha', { sse: parts, chunkDelayMs: 20 }); // ~100 ms a stream: 5 rounds take far less than 5 s
    const doc = configDoc({
      prefix: uniquePrefix('burst'),
      channels: [openai(up, 'alpha', { max_concurrency: 4 })],
    });
    const a = await gateway(doc);
    const b = await gateway(doc);

    // Default settings: wait_timeout_ms 5000 and max_waiting_per_channel 0, so the queue holds max(32, 8 × 4) = 32.
    // With the bound at max (4), 12 of these 20 got 429 queue_full at once.
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        call(`${(i % 2 ? a : b).url}/v1/chat/completions`, {
          headers: CLIENT,
          body: chat('gpt-x', { stream: true }),
        }),
      ),
    );
    expect(answers.map((x) => x.status)).toEqual(Array(20).fill(200));
    for (const x of answers) expect(x.text).toBe(parts.join(''));
    expect(up.record('alpha').max).toBe(4);
    expect(up.requests('alpha')).toHaveLength(20);
    expect(await eventually(async () => (await redisLoad(a, 'alpha')).active === 0)).toBe(true);
    expect(await redisLoad(a, 'alpha')).toMatchObject({ active: 0, waiting: 0 });
  });

  it('default queue bound exceeded: max 1 holds 1 + 32 waiters, the rest get 429 queue_full with Retry-After', async () => {
    const up = await upstream();
    const hold = gate();
    cleanups.push(() => hold.open());
    const parts = chunks(2);
    up.on('alpha', { sse: [() => hold.promise, ...parts] }); // the first stream holds the slot until the gate opens
    const gw = await gateway(configDoc({ channels: [openai(up, 'alpha', { max_concurrency: 1 })] }));

    const answers: Answer[] = [];
    const all = Promise.all(
      Array.from({ length: 40 }, () =>
        call(`${gw.url}/v1/chat/completions`, {
          headers: CLIENT,
          body: chat('gpt-x', { stream: true }),
        }).then((x) => (answers.push(x), x)),
      ),
    );
    // 1 in flight and 32 (= max(32, 8 × 1)) in the queue: the other 7 are answered at once, while the gate is shut
    expect(
      await eventually(async () => answers.length === 7 && (await redisLoad(gw, 'alpha')).waiting === 32),
    ).toBe(true);
    for (const x of answers) {
      expectCapacity429(x);
      expect(x.text).toMatch(/reason: queue_full/);
    }
    hold.open();
    const done = await all;
    expect(done.filter((x) => x.status === 200)).toHaveLength(33);
    expect(done.filter((x) => x.status === 429)).toHaveLength(7);
    expect(up.record('alpha').max).toBe(1);
    expect(up.requests('alpha')).toHaveLength(33);
  });

  it('with waiting off, a burst gets exactly the free slots and 429s with reason full', async () => {
    const up = await upstream();
    const parts = chunks(6);
    up.on('alpha', { sse: parts, chunkDelayMs: 100 });
    const gw = await gateway(
      configDoc({
        channels: [openai(up, 'alpha', { max_concurrency: 2 })],
        settings: { wait_enabled: false },
      }),
    );

    const answers = await Promise.all(
      Array.from({ length: 6 }, () =>
        call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('gpt-x', { stream: true }) }),
      ),
    );
    const served = answers.filter((a) => a.status === 200);
    const limited = answers.filter((a) => a.status !== 200);
    expect(up.record('alpha').max).toBe(2);
    expect(served.length).toBeGreaterThanOrEqual(2);
    expect(limited.length).toBeGreaterThanOrEqual(1);
    for (const a of served) expect(a.text).toBe(parts.join(''));
    for (const a of limited) {
      expectCapacity429(a);
      expect((a.json() as { error: { message: string } }).error.message).toMatch(/reason: full/);
    }
    expect(up.requests('alpha')).toHaveLength(served.length);
  });

  it('two gateway instances on one Redis never exceed max_concurrency together', async () => {
    const up = await upstream();
    const parts = chunks(8);
    up.on('alpha', { sse: parts, chunkDelayMs: 40 });
    const prefix = uniquePrefix('gw2');
    const doc = configDoc({
      prefix,
      channels: [openai(up, 'alpha', { max_concurrency: 3 })],
      settings: { wait_timeout_ms: 10_000, max_waiting_per_channel: 6 },
    });
    const a = await gateway(doc);
    const b = await gateway(doc);

    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        call(`${(i % 2 ? a : b).url}/v1/chat/completions`, {
          headers: CLIENT,
          body: chat('gpt-x', { stream: true }),
        }),
      ),
    );
    const served = answers.filter((x) => x.status === 200);
    expect(up.record('alpha').max).toBeLessThanOrEqual(3);
    expect(up.record('alpha').max).toBeGreaterThanOrEqual(2);
    expect(served.length).toBeGreaterThanOrEqual(3);
    for (const x of served) expect(x.text).toBe(parts.join(''));
    for (const x of answers.filter((y) => y.status !== 200)) expectCapacity429(x);
    expect(up.requests('alpha')).toHaveLength(served.length);
    expect(await eventually(async () => (await redisLoad(a, 'alpha')).active === 0)).toBe(true);
  });

  it('a client that disconnects mid-stream frees its slot for the next request and aborts the upstream request, never by handoff', async () => {
    const up = await upstream();
    const hold = gate();
    cleanups.push(() => hold.open());
    up.on('alpha', (req) => {
      const body = JSON.parse(req.body.toString()) as { stream?: boolean };
      if (!body.stream) return { json: { id: 'second', choices: [] } };
      return { sse: [sseData({ n: 1 }), () => hold.promise, sseData({ n: 2 }), 'data: [DONE]\n\n'] };
    });
    const gw = await gateway(
      configDoc({
        channels: [openai(up, 'alpha', { max_concurrency: 1 })],
        // A long first poll interval (2 to 4 s): the waiter is asleep when the stream's slot comes free, so a local
        // release wakes it and it could take the slot over at once if the gateway let it.
        settings: { wait_timeout_ms: 15_000, safety_poll_ms: 10_000 },
      }),
    );

    const first = streamingCall(`${gw.url}/v1/chat/completions`, chat('gpt-x', { stream: true }));
    expect(await within(first.status, 5000, 'first response')).toBe(200);
    expect(await within(first.firstChunk, 5000, 'first chunk')).toBe(sseData({ n: 1 }));

    // The second request has to wait: the only slot is held by the stream.
    const second = call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('gpt-x') });
    expect(await eventually(() => gw.gateway.admission.stats().channels.alpha?.waiting === 1)).toBe(true);
    expect(up.requests('alpha')).toHaveLength(1);

    // The upstream call is aborted mid-stream with a waiter of this gateway present: its slot goes back through
    // Redis (the upstream may still be running it for a moment), never straight to the waiter.
    expect(gw.gateway.admission.stats().channels.alpha?.waiting).toBe(1);
    first.destroy();
    const answer = await within(second, 10_000, 'second request');
    expect(answer.status).toBe(200);
    expect(answer.json()).toEqual({ id: 'second', choices: [] });
    expect(Number(answer.headers['x-slotgate-waited-ms'])).toBeGreaterThan(0);
    expect(gw.gateway.admission.stats().handoffs).toBe(0);

    const streamed = up.requests('alpha')[0]!;
    await within(streamed.done, 5000, 'upstream request closed');
    expect(streamed.aborted).toBe(true);
    expect(streamed.finished).toBe(false);
    await expect(first.body).rejects.toThrow();
    expect(up.record('alpha').max).toBe(1);
    expect(await eventually(async () => (await redisLoad(gw, 'alpha')).active === 0)).toBe(true);
  });

  it('a client that disconnects before the upstream sends its headers leaves no live lease', async () => {
    const up = await upstream();
    const hold = gate();
    cleanups.push(() => hold.open());
    // the upstream has the request but holds its response headers until the test opens the gate
    up.on('alpha', async () => {
      await hold.promise;
      return { json: { id: 'late', choices: [] } };
    });
    const gw = await gateway(configDoc({ channels: [openai(up, 'alpha', { max_concurrency: 1 })] }));

    const client = streamingCall(`${gw.url}/v1/chat/completions`, chat('gpt-x'));
    expect(await eventually(() => up.requests('alpha').length === 1)).toBe(true);
    expect((await redisLoad(gw, 'alpha')).active).toBe(1);
    expect(gw.gateway.admission.stats().liveLeases).toBe(1);

    client.destroy();
    const held = up.requests('alpha')[0]!;
    await within(held.done, 5000, 'upstream request closed');
    expect(held.aborted).toBe(true);
    await expect.poll(async () => (await redisLoad(gw, 'alpha')).active).toBe(0);
    // released, not merely gone from Redis: this gateway holds no lease and renews nothing
    expect(gw.gateway.admission.stats().liveLeases).toBe(0);
    expect(up.requests('alpha')).toHaveLength(1);
  });

  it('a client that leaves after the upstream headers, before its first chunk, is no gateway error', async () => {
    const up = await upstream();
    const hold = gate();
    cleanups.push(() => hold.open());
    // the headers go out at once; the first chunk waits for the gate (a model thinking before its first token)
    up.on('alpha', { sse: [() => hold.promise, ...chunks(2)] });
    const gw = await gateway(configDoc({ channels: [openai(up, 'alpha', { max_concurrency: 1 })] }));
    const errorsBefore = LOG_LINES.filter((l) => l.includes('"level":50')).length;

    const client = streamingCall(`${gw.url}/v1/chat/completions`, chat('gpt-x', { stream: true }));
    expect(await eventually(() => up.requests('alpha').length === 1)).toBe(true);
    client.destroy();
    const held = up.requests('alpha')[0]!;
    await within(held.done, 5000, 'upstream request closed');
    await expect.poll(async () => (await redisLoad(gw, 'alpha')).active).toBe(0);

    // no 'internal error' line, and the gateway counts no 5xx of its own
    expect(LOG_LINES.filter((l) => l.includes('"level":50')).slice(errorsBefore)).toEqual([]);
    const metrics = await (await fetch(`${gw.url}/metrics`)).text();
    expect(metrics).not.toMatch(/slotgate_responses_total\{[^}]*source="gateway"[^}]*code="5/);
  });

  it('a disconnect mid-stream on a bounded mock channel frees the slot too', async () => {
    const gw = await gateway(
      configDoc({
        channels: [
          {
            id: 'mocky',
            type: 'mock',
            models: ['gpt-x'],
            max_concurrency: 1,
            mock: { latency_ms: 0, chunks: 50, chunk_delay_ms: 200 },
          },
        ],
        settings: { wait_enabled: false },
      }),
    );
    const first = streamingCall(`${gw.url}/v1/chat/completions`, chat('gpt-x', { stream: true }));
    expect(await within(first.status, 5000, 'first response')).toBe(200);
    await within(first.firstChunk, 5000, 'first chunk');
    const busy = await call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('gpt-x') });
    expect(busy.status).toBe(429);

    first.destroy();
    expect(await eventually(async () => (await redisLoad(gw, 'mocky')).active === 0)).toBe(true);
    const next = await call(`${gw.url}/v1/chat/completions`, { headers: CLIENT, body: chat('gpt-x') });
    expect(next.status).toBe(200);
    expect(gw.gateway.admission.stats().liveLeases).toBe(0);
  });

  it('a client that disconnects while waiting leaves the queue and never reaches the upstream', async () => {
    const up = await upstream();
    const hold = gate();
    cleanups.push(() => hold.open());
    up.on('alpha', { sse: [sseData({ n: 1 }), () => hold.promise, 'data: [DONE]\n\n'] });
    const gw = await gateway(
      configDoc({
        channels: [openai(up, 'alpha', { max_concurrency: 1 })],
        settings: { wait_timeout_ms: 20_000 },
      }),
    );
    const first = streamingCall(`${gw.url}/v1/chat/completions`, chat('gpt-x', { stream: true }));
    await within(first.firstChunk, 5000, 'first chunk');
    const waiter = streamingCall(`${gw.url}/v1/chat/completions`, chat('gpt-x', { stream: true }));
    expect(await eventually(async () => (await redisLoad(gw, 'alpha')).waiting === 1)).toBe(true);

    waiter.destroy();
    expect(await eventually(async () => (await redisLoad(gw, 'alpha')).waiting === 0)).toBe(true);
    expect(gw.gateway.admission.stats().channels.alpha?.waiting ?? 0).toBe(0);
    hold.open();
    expect(await within(first.body, 5000, 'first stream')).toBe(sseData({ n: 1 }) + 'data: [DONE]\n\n');
    expect(up.requests('alpha')).toHaveLength(1);
    expect(await eventually(async () => (await redisLoad(gw, 'alpha')).active === 0)).toBe(true);
  });

  it('an openai channel streams SSE through chunk by chunk: the client has the first chunk before the upstream sends the last', async () => {
    const up = await upstream();
    const hold = gate();
    cleanups.push(() => hold.open());
    let lastSent = false;
    up.on('alpha', {
      sse: [
        sseData({ n: 1 }),
        () => hold.promise,
        sseData({ n: 2 }),
        async () => {
          lastSent = true;
        },
        'data: [DONE]\n\n',
      ],
    });
    const gw = await gateway(configDoc({ channels: [openai(up, 'alpha', { max_concurrency: 2 })] }));

    const stream = streamingCall(`${gw.url}/v1/chat/completions`, chat('gpt-x', { stream: true }));
    // The upstream holds everything after its first chunk until the client has that chunk: a gateway that buffered
    // the answer would never deliver it.
    expect(await within(stream.firstChunk, 5000, 'first chunk')).toBe(sseData({ n: 1 }));
    expect(lastSent).toBe(false);
    expect((await stream.headers)['content-type']).toMatch(/^text\/event-stream/);
    // the slot is held while the stream is open
    expect((await redisLoad(gw, 'alpha')).active).toBe(1);
    hold.open();
    expect(await within(stream.body, 5000, 'whole stream')).toBe(
      sseData({ n: 1 }) + sseData({ n: 2 }) + 'data: [DONE]\n\n',
    );
    expect(await eventually(async () => (await redisLoad(gw, 'alpha')).active === 0)).toBe(true);
  });
});
