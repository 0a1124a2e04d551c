/**
 * GET /admin/history and GET /admin/fleet through a whole gateway on the embedded store (app.inject, no port), the
 * history driven by a ManualClock: both need the admin token, and answer in the documented shape.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from './manual-clock.js';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { createGateway, type Gateway } from '../../packages/gateway/src/server.js';

const ADMIN = 'adm-history-S3CRET';
const CLIENT = 'tok-history-S3CRET';
const KEY = 'sk-history-S3CRET';

const gateways: Gateway[] = [];
afterEach(async () => {
  for (const gw of gateways.splice(0)) await gw.close();
});

async function gateway(clock: ManualClock, extra: Record<string, unknown>[] = []): Promise<Gateway> {
  const config = parseConfig(
    {
      admin: { token: ADMIN },
      tokens: [{ key: CLIENT, name: 'history' }],
      channels: [
        ...extra,
        { id: 'm', type: 'mock', models: ['m'], max_concurrency: 2, mock: { latency_ms: 0, chunks: 1 } },
        { id: 'free', type: 'mock', models: ['f'], mock: { latency_ms: 0, chunks: 1 } },
        {
          id: 'real',
          type: 'openai',
          base_url: 'http://127.0.0.1:9/v1',
          key: KEY,
          models: ['r'],
          max_concurrency: 3,
        },
      ],
      settings: { wait_enabled: false },
    },
    'history-test',
    {},
  );
  const gw = await createGateway({ config, logger: false, history: { clock, intervalMs: 1000, points: 3 } });
  gateways.push(gw);
  await gw.app.ready();
  return gw;
}

const admin = { authorization: `Bearer ${ADMIN}` };

async function chat(gw: Gateway, model: string): Promise<number> {
  const res = await gw.app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    headers: { authorization: `Bearer ${CLIENT}`, 'content-type': 'application/json' },
    payload: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }),
  });
  return res.statusCode;
}

describe('GET /admin/history', () => {
  it('needs the admin token', async () => {
    const gw = await gateway(new ManualClock());
    for (const headers of [{}, { authorization: `Bearer ${CLIENT}` }, { authorization: 'Bearer wrong' }]) {
      for (const url of ['/admin/history', '/admin/fleet']) {
        const res = await gw.app.inject({ method: 'GET', url, headers });
        expect(res.statusCode).toBe(401);
        expect(res.json()).toMatchObject({ error: { code: 'unauthorized_admin' } });
      }
    }
  });

  it('returns the points in columns, at most `points` of them, each channel of the configuration', async () => {
    const clock = new ManualClock();
    const gw = await gateway(clock);
    const empty = (await gw.app.inject({ method: 'GET', url: '/admin/history', headers: admin })).json();
    expect(empty).toMatchObject({ interval_ms: 1000, capacity: 3, t: [], admissions_per_s: [] });
    expect(empty.channels.map((c: { id: string }) => c.id)).toEqual(['m', 'free', 'real']);

    for (let i = 0; i < 3; i++) expect(await chat(gw, 'm')).toBe(200);
    expect(await chat(gw, 'f')).toBe(200);
    for (let i = 0; i < 5; i++) await clock.advance(1000);
    const res = await gw.app.inject({ method: 'GET', url: '/admin/history', headers: admin });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body)).toEqual([
      'interval_ms',
      'capacity',
      't',
      'admissions_per_s',
      'rejections_per_s',
      'wait_ms',
      'commands_per_s',
      'channels',
    ]);
    expect(body.t).toHaveLength(3); // the ring keeps the last 3 of 5
    expect(body.t[2] - body.t[1]).toBe(1000);
    expect(body.rejections_per_s).toEqual({
      full: [0, 0, 0],
      queue_full: [0, 0, 0],
      wait_timeout: [0, 0, 0],
      client_limit: [0, 0, 0],
    });
    expect(body.wait_ms).toEqual({ p50: [null, null, null], p99: [null, null, null] });
    expect(body.channels[0]).toEqual({
      id: 'm',
      max_concurrency: [2, 2, 2],
      active: [0, 0, 0],
      waiting: [0, 0, 0],
      upstream_429_per_s: [0, 0, 0],
    });
    expect(JSON.stringify(body)).not.toMatch(/S3CRET/);
  });

  it('counts the admissions of an interval in its point', async () => {
    const clock = new ManualClock();
    const gw = await gateway(clock);
    await clock.advance(1000); // one empty point first
    for (let i = 0; i < 4; i++) expect(await chat(gw, 'm')).toBe(200);
    await clock.advance(1000);
    const body = (await gw.app.inject({ method: 'GET', url: '/admin/history', headers: admin })).json();
    expect(body.admissions_per_s).toEqual([0, 4]);
  });
});

describe('GET /admin/history of an adaptive channel', () => {
  it('holds its limit and the upstream’s 429s on it; a plain channel has no limit', async () => {
    const clock = new ManualClock();
    // every answer a 429: the first reports an overload, and the limit falls to its floor (where a 429 cools the
    // channel down: the requests after it get slotgate's own 429, not the upstream's)
    const mock = { latency_ms: 0, chunks: 1, error_rate: 1, error_status: 429 };
    const adaptive = { min_concurrency: 1 };
    const gw = await gateway(clock, [
      { id: 'ad', type: 'mock', models: ['a'], max_concurrency: 4, mock, adaptive },
    ]);
    await clock.advance(1000); // one point before any request: the max
    expect(await chat(gw, 'a')).toBe(429);
    await clock.advance(1000);
    const body = (await gw.app.inject({ method: 'GET', url: '/admin/history', headers: admin })).json();
    const [ad, m] = body.channels;
    expect(ad).toEqual({
      id: 'ad',
      max_concurrency: [4, 4],
      active: [0, 0],
      waiting: [0, 0],
      upstream_429_per_s: [0, 1],
      adaptive_limit: [4, 1],
    });
    expect(m.id).toBe('m');
    expect(m).not.toHaveProperty('adaptive_limit');
  });
});

describe('GET /admin/fleet', () => {
  it('lists who holds each bounded channel’s slots (nobody when idle) and the most held at once; unlimited channels are left out', async () => {
    const gw = await gateway(new ManualClock());
    const res = await gw.app.inject({ method: 'GET', url: '/admin/fleet', headers: admin });
    expect(res.statusCode).toBe(200);
    const window = expect.any(Number);
    expect(res.json()).toEqual({
      instance_id: gw.admission.instanceId,
      channels: [
        { id: 'm', max_concurrency: 2, in_use: 0, peak: 0, peak_window_s: window, holders: [] },
        { id: 'real', max_concurrency: 3, in_use: 0, peak: 0, peak_window_s: window, holders: [] },
      ],
    });
    // one request at a time: the mark says 1 once they are over, over a window of one to two minutes
    for (let i = 0; i < 2; i++) expect(await chat(gw, 'm')).toBe(200);
    const after = (await gw.app.inject({ method: 'GET', url: '/admin/fleet', headers: admin })).json();
    expect(after.channels[0]).toMatchObject({ id: 'm', in_use: 0, peak: 1 });
    expect(after.channels[0].peak_window_s).toBeGreaterThanOrEqual(60);
    expect(after.channels[0].peak_window_s).toBeLessThanOrEqual(120);
  });
});
