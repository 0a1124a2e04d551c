/**
 * What an operator reads, through a gateway on the test Redis and a fake upstream over real sockets: one access line
 * per client request (written when its response ends: a stream's line only once the stream is over, a client that
 * leaves gets `client_closed`) with the token's name and never a key; and /metrics's per-channel upstream series —
 * answers by status class (an upstream 200, 429 and 5xx, and an unreachable channel), time to first byte and duration,
 * retries, cooldowns started by an upstream 429 and by the admin API.
 */
import { describe, expect, it } from 'vitest';
import { FakeUpstream, gate, sseData } from '../helpers/fake-upstream.js';
import {
  ADMIN,
  CLIENT,
  LOG_LINES,
  SECRETS,
  call,
  chat,
  configDoc,
  eventually,
  expectNoSecretsLogged,
  secretsIn,
  startGateway,
  streamingCall,
  within,
} from '../helpers/gateway.js';
import { parsePrometheusText, select, valueOf } from '../helpers/prom-text.js';
import { freePort } from '../helpers/redis-server.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

interface Line {
  level: number;
  msg: string;
  reqId?: string;
  [field: string]: unknown;
}

const parsed = (): Line[] => LOG_LINES.map((l) => JSON.parse(l) as Line);
const accessOf = (reqId: string) => parsed().filter((l) => l.msg === 'access' && l.reqId === reqId);

describe('access lines and per-channel upstream metrics', () => {
  it('one line per request with its fields, a stream logged once at its end; the upstream series per channel', async () => {
    const up = await FakeUpstream.start();
    cleanups.push(() => up.close());
    const streamGate = gate();
    const neverOpened = gate();
    cleanups.push(() => neverOpened.open());
    up.on('ok', { json: { id: 'ok' } })
      .on('flaky', { status: 503, json: { error: { message: 'busy' } } })
      .on('steady', { json: { id: 'steady' } })
      .on('limited', {
        status: 429,
        headers: { 'retry-after': '30' },
        json: { error: { message: 'slow down' } },
      })
      .on('broken', { status: 500, json: { error: { message: 'boom' } } })
      .on('sse', {
        sse: [sseData({ n: 1 }), () => streamGate.promise, sseData({ n: 2 }), 'data: [DONE]\n\n'],
      })
      .on('sse-leave', { sse: [sseData({ n: 1 }), () => neverOpened.promise, 'data: [DONE]\n\n'] });
    const channel = (id: string, model: string, extra: Record<string, unknown> = {}) => ({
      id,
      type: 'openai',
      base_url: up.url(id),
      key: SECRETS.channelKey,
      models: [model],
      max_concurrency: 4,
      ...extra,
    });
    const gw = await startGateway(
      configDoc({
        channels: [
          channel('ok', 'm-ok'),
          channel('flaky', 'm-retry', { priority: 10 }),
          channel('steady', 'm-retry', { priority: 0 }),
          channel('limited', 'm-429'),
          channel('broken', 'm-5xx'),
          channel('down', 'm-down', { base_url: `http://127.0.0.1:${await freePort()}/v1` }),
          channel('sse', 'm-sse'),
          channel('sse-leave', 'm-sse-leave'),
        ],
        settings: { retry_times: 1 },
      }),
    );
    cleanups.push(() => gw.close());
    const ask = (id: string, model: string) =>
      call(`${gw.url}/v1/chat/completions`, {
        headers: { ...CLIENT, 'x-request-id': id },
        body: chat(model),
      });

    expect((await ask('obs-ok', 'm-ok')).status).toBe(200);
    expect((await ask('obs-retry', 'm-retry')).status).toBe(200);
    expect((await ask('obs-429', 'm-429')).status).toBe(429);
    expect((await ask('obs-5xx', 'm-5xx')).status).toBe(500);
    expect((await ask('obs-down', 'm-down')).status).toBe(502);

    /** A stream under way: its first chunk is in and it has logged nothing yet. */
    const streamStarted = async (id: string, model: string) => {
      const started = streamingCall(`${gw.url}/v1/chat/completions`, chat(model, { stream: true }), {
        ...CLIENT,
        'x-request-id': id,
      });
      await within(started.firstChunk, 5000, 'first chunk');
      expect(accessOf(id)).toEqual([]);
      return started;
    };
    // a stream logs once it has ended
    const stream = await streamStarted('obs-sse', 'm-sse');
    streamGate.open();
    expect(await within(stream.body, 5000, 'stream end')).toContain('[DONE]');
    expect(await eventually(() => accessOf('obs-sse').length > 0)).toBe(true);
    // a client that leaves mid-stream
    (await streamStarted('obs-leave', 'm-sse-leave')).destroy();
    expect(await eventually(() => accessOf('obs-leave').length > 0)).toBe(true);

    const cooldown = await call(`${gw.url}/admin/channels/ok/cooldown`, {
      method: 'POST',
      headers: { ...ADMIN, 'x-request-id': 'obs-admin' },
    });
    expect(cooldown.status).toBe(200);
    const scrape = await call(`${gw.url}/metrics`, { headers: { 'x-request-id': 'obs-metrics' } });
    expect(scrape.status).toBe(200);
    await eventually(() => accessOf('obs-metrics').length > 0);

    // --- the access lines
    const fields = { method: 'POST', path: '/v1/chat/completions', token: 'tester', level: 30, wait_ms: 0 };
    const expected: Record<string, Record<string, unknown>> = {
      'obs-ok': {
        status: 200,
        model: 'm-ok',
        channel: 'ok',
        upstream_status: 200,
        retries: 0,
        outcome: 'ok',
      },
      'obs-retry': { status: 200, channel: 'steady', upstream_status: 200, retries: 1, outcome: 'ok' },
      'obs-429': {
        status: 429,
        channel: 'limited',
        upstream_status: 429,
        retries: 0,
        outcome: 'upstream_error',
      },
      'obs-5xx': {
        status: 500,
        channel: 'broken',
        upstream_status: 500,
        retries: 0,
        outcome: 'upstream_error',
      },
      'obs-down': {
        status: 502,
        channel: 'down',
        upstream_status: null,
        retries: 0,
        outcome: 'upstream_unreachable',
      },
      'obs-sse': { status: 200, model: 'm-sse', channel: 'sse', upstream_status: 200, outcome: 'ok' },
      'obs-leave': { status: 200, channel: 'sse-leave', upstream_status: 200, outcome: 'client_closed' },
    };
    for (const [id, want] of Object.entries(expected)) {
      const lines = accessOf(id);
      expect(lines, id).toHaveLength(1);
      expect(lines[0], id).toMatchObject({ ...fields, ...want });
      expect(lines[0]!.duration_ms, id).toEqual(expect.any(Number));
    }
    expect(accessOf('obs-admin')).toEqual([expect.objectContaining({ level: 30, status: 200 })]);
    expect(accessOf('obs-metrics')).toEqual([expect.objectContaining({ level: 20, path: '/metrics' })]);
    const all = parsed();
    expect(all.filter((l) => l.msg === 'incoming request' || l.msg === 'request completed')).toEqual([]);
    // every request of this test has its one line, and no other request logged one
    const ids = [...Object.keys(expected), 'obs-admin', 'obs-metrics'];
    expect(all.filter((l) => l.msg === 'access').map((l) => l.reqId)).toEqual(expect.arrayContaining(ids));
    expect(all.filter((l) => l.msg === 'access')).toHaveLength(ids.length);
    expect(LOG_LINES.flatMap(secretsIn)).toEqual([]);

    // --- the per-channel upstream series
    const exp = parsePrometheusText(scrape.text);
    const answers = (channel: string, cls: string) =>
      valueOf(exp, 'slotgate_upstream_responses_total', { channel, class: cls });
    expect(answers('ok', '2xx')).toBe(1);
    expect(answers('flaky', '5xx')).toBe(1);
    expect(answers('steady', '2xx')).toBe(1);
    expect(answers('limited', '4xx')).toBe(1);
    expect(answers('broken', '5xx')).toBe(1);
    expect(answers('down', 'error')).toBe(1);
    expect(answers('sse', '2xx')).toBe(1);
    expect(answers('sse-leave', '2xx')).toBe(1);
    expect(select(exp, 'slotgate_upstream_responses_total')).toHaveLength(8);

    const count = (name: string, channel: string) => select(exp, `${name}_count`, { channel })[0]?.value ?? 0;
    const sum = (name: string, channel: string) => valueOf(exp, `${name}_sum`, { channel });
    for (const ch of ['ok', 'flaky', 'steady', 'limited', 'broken', 'sse', 'sse-leave'])
      expect(count('slotgate_upstream_ttfb_seconds', ch), ch).toBe(1);
    expect(count('slotgate_upstream_ttfb_seconds', 'down')).toBe(0); // no answer, no first byte
    for (const ch of ['ok', 'flaky', 'steady', 'limited', 'broken', 'sse']) {
      expect(count('slotgate_upstream_duration_seconds', ch), ch).toBe(1);
      // the first byte comes before the last
      expect(sum('slotgate_upstream_ttfb_seconds', ch)).toBeLessThanOrEqual(
        sum('slotgate_upstream_duration_seconds', ch),
      );
    }
    expect(count('slotgate_upstream_duration_seconds', 'sse-leave')).toBe(0); // cut short: not timed

    expect(select(exp, 'slotgate_upstream_retries_total')).toEqual([
      {
        name: 'slotgate_upstream_retries_total',
        labels: { channel: 'flaky', reason: 'upstream_5xx' },
        value: 1,
      },
    ]);
    expect(select(exp, 'slotgate_cooldowns_total').map((s) => [s.labels, s.value])).toEqual(
      expect.arrayContaining([
        [{ channel: 'limited', reason: 'upstream_429' }, 1],
        [{ channel: 'ok', reason: 'admin' }, 1],
      ]),
    );
    expect(select(exp, 'slotgate_cooldowns_total')).toHaveLength(2);
  });
});
