/**
 * The access line (packages/gateway/src/logging.ts) through buildApp and inject: exactly one per request, written when
 * the response has ended, with the token's name and never its key; client API requests at info with every field,
 * admin reads, /metrics and the probes at debug; Fastify's own request lines gone; admission outcomes at debug. And
 * the log format: pino-pretty only when asked for or on a terminal, never loaded otherwise.
 */
import { createRequire } from 'node:module';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import pino from 'pino';
import { loggerOptions, prettyLogs, prettyStream } from '../../packages/gateway/src/logging.js';
import { ADMIN_TOKEN, TOKEN, admin, openai, post, testApp } from '../helpers/app.js';

interface Line {
  level: number;
  msg: string;
  reqId?: string;
  [field: string]: unknown;
}

const INFO = 30;
const DEBUG = 20;

function capture(): { stream: Writable; raw: string[]; lines: () => Line[] } {
  const raw: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      raw.push(chunk.toString());
      callback();
    },
  });
  const lines = () =>
    raw
      .join('')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Line);
  return { stream, raw, lines };
}

/** A request id for a read of `url`. */
const idOf = (url: string) => `get${url.replaceAll('/', '-')}`;

/** The access lines of one request. */
const accessOf = (lines: Line[], reqId: string) =>
  lines.filter((l) => l.msg === 'access' && l.reqId === reqId);

describe('the access line', () => {
  it('one per proxied request, at info, with every field; the token key never appears', async () => {
    const log = capture();
    const { app } = testApp({ logStream: log.stream });
    const res = await post(
      app,
      '/v1/chat/completions',
      { ...openai, 'x-request-id': 'req-ok-1' },
      {
        model: 'gpt-mock',
        messages: [],
      },
    );
    expect(res.statusCode).toBe(200);
    const streamed = await post(
      app,
      '/v1/chat/completions',
      { ...openai, 'x-request-id': 'req-sse-1' },
      {
        model: 'gpt-mock',
        stream: true,
        messages: [],
      },
    );
    expect(streamed.headers['content-type']).toMatch(/^text\/event-stream/);

    const lines = log.lines();
    for (const id of ['req-ok-1', 'req-sse-1']) {
      const access = accessOf(lines, id);
      expect(access).toHaveLength(1);
      const line = access[0]!;
      expect(line.level).toBe(INFO);
      expect(line).toMatchObject({
        method: 'POST',
        path: '/v1/chat/completions',
        status: 200,
        token: 'unit',
        model: 'gpt-mock',
        channel: 'mock-a',
        wait_ms: 0,
        upstream_status: 200,
        retries: 0,
        outcome: 'ok',
      });
      expect(line.duration_ms).toEqual(expect.any(Number));
    }
    // Fastify's own two lines per request are off
    expect(lines.filter((l) => l.msg === 'incoming request' || l.msg === 'request completed')).toEqual([]);
    expect(lines.filter((l) => l.reqId === 'req-ok-1' && l.msg === 'admitted')).toHaveLength(1);
    expect(lines.find((l) => l.msg === 'admitted')!.level).toBe(DEBUG);
    const all = log.raw.join('');
    expect(all).not.toContain(TOKEN);
    expect(all).not.toContain(ADMIN_TOKEN);
  });

  it('a refused request: no channel, the reason as outcome (a 429 gives the admission outcome)', async () => {
    const log = capture();
    const { app, admission, channel } = testApp({ logStream: log.stream });
    const bad = await post(
      app,
      '/v1/chat/completions',
      { authorization: 'Bearer nope', 'x-request-id': 'r-401' },
      {
        model: 'gpt-mock',
      },
    );
    expect(bad.statusCode).toBe(401);
    const held = await admission.acquire({ candidates: [channel] });
    const full = await post(
      app,
      '/v1/chat/completions',
      { ...openai, 'x-request-id': 'r-429' },
      { model: 'gpt-mock' },
    );
    expect(full.statusCode).toBe(429);
    await held.release();
    const unknown = await post(
      app,
      '/v1/chat/completions',
      { ...openai, 'x-request-id': 'r-404' },
      { model: 'nope' },
    );
    expect(unknown.statusCode).toBe(404);

    const lines = log.lines();
    expect(accessOf(lines, 'r-401')).toEqual([
      expect.objectContaining({
        level: INFO,
        status: 401,
        token: null,
        model: null,
        channel: null,
        upstream_status: null,
        retries: 0,
        outcome: 'invalid_api_key',
      }),
    ]);
    expect(accessOf(lines, 'r-429')).toEqual([
      expect.objectContaining({
        status: 429,
        token: 'unit',
        model: 'gpt-mock',
        channel: null,
        upstream_status: null,
        outcome: 'capacity_full',
      }),
    ]);
    expect(accessOf(lines, 'r-404')).toEqual([
      expect.objectContaining({ status: 404, model: 'nope', channel: null, outcome: 'model_not_found' }),
    ]);
    expect(lines.filter((l) => l.reqId === 'r-429' && l.msg === 'admission refused')).toHaveLength(1);
    expect(log.raw.join('')).not.toContain(TOKEN);
  });

  it('GET /v1/models names the caller too', async () => {
    const log = capture();
    const { app } = testApp({ logStream: log.stream });
    const res = await app.inject({
      method: 'GET',
      url: '/v1/models',
      headers: { ...openai, 'x-request-id': 'r-models' },
    });
    expect(res.statusCode).toBe(200);
    expect(accessOf(log.lines(), 'r-models')).toEqual([
      expect.objectContaining({ level: INFO, status: 200, token: 'unit', outcome: 'ok' }),
    ]);
    expect(log.raw.join('')).not.toContain(TOKEN);
  });

  it('the dashboard polling, /metrics and the probes log at debug; an admin write at info', async () => {
    const log = capture();
    const { app } = testApp({ logStream: log.stream });
    const reads = [
      ['/admin/channels', admin],
      ['/admin/status', admin],
      ['/metrics', {}],
      ['/livez', {}],
      ['/readyz', {}],
      ['/dashboard', {}],
    ] as const;
    for (const [url, headers] of reads) {
      const res = await app.inject({
        method: 'GET',
        url,
        headers: { ...headers, 'x-request-id': idOf(url) },
      });
      expect(res.statusCode, url).toBe(200);
    }
    const write = await app.inject({
      method: 'POST',
      url: '/admin/channels/mock-a/cooldown',
      headers: { ...admin, 'x-request-id': 'admin-write' },
    });
    expect(write.statusCode).toBe(200);

    const lines = log.lines();
    for (const [url] of reads) {
      expect(accessOf(lines, idOf(url)), url).toEqual([
        expect.objectContaining({ level: DEBUG, method: 'GET', path: url, status: 200, outcome: 'ok' }),
      ]);
      // the proxy's fields are for client API requests only
      expect(accessOf(lines, idOf(url))[0]).not.toHaveProperty('token');
    }
    expect(accessOf(lines, 'admin-write')).toEqual([expect.objectContaining({ level: INFO, status: 200 })]);
    expect(lines.filter((l) => l.level >= INFO && l.reqId?.startsWith('get'))).toEqual([]);
    expect(log.raw.join('')).not.toContain(ADMIN_TOKEN);
  });
});

describe('the log format', () => {
  const pretty = () =>
    Object.keys(createRequire(import.meta.url).cache).filter((k) => k.includes('pino-pretty'));

  it('auto is pretty on a terminal only; json and pretty force it', () => {
    expect(prettyLogs('auto', true)).toBe(true);
    expect(prettyLogs('auto', false)).toBe(false);
    expect(prettyLogs('json', true)).toBe(false);
    expect(prettyLogs('pretty', false)).toBe(true);
  });

  it('pino-pretty is loaded only for pretty output, and never when the caller gives a stream', () => {
    const given = new Writable({ write: (_c, _e, cb) => cb() });
    // JSON lines: pino's own stdout destination, written synchronously (no line lost at process.exit)
    const json = loggerOptions({ log_level: 'info', log_format: 'json' }, undefined) as { stream?: unknown };
    expect(json.stream).toMatchObject({ fd: 1, sync: true });
    expect(json.stream).not.toBeInstanceOf(Writable);
    expect(loggerOptions({ log_level: 'info', log_format: 'pretty' }, { stream: given })).toMatchObject({
      stream: given,
    });
    expect(loggerOptions({ log_level: 'info', log_format: 'json' }, false)).toBe(false);
    expect(pretty()).toEqual([]);
    const options = loggerOptions({ log_level: 'debug', log_format: 'pretty' }, { level: 'warn' });
    expect(options).toMatchObject({ level: 'warn' });
    expect((options as { stream?: unknown }).stream).toBeInstanceOf(Writable);
    expect(pretty().length).toBeGreaterThan(0);
  });

  it('pretty: an access line on one line, every other line as pino-pretty shows it', () => {
    const written: string[] = [];
    const log = pino(
      { level: 'info' },
      prettyStream((text) => written.push(text)),
    );
    log.child({ reqId: 'r-1' }).info(
      {
        method: 'POST',
        path: '/v1/chat/completions',
        status: 200,
        token: 'team-a',
        model: 'gpt-4o',
        channel: 'openai-main',
        wait_ms: 120,
        upstream_status: 200,
        retries: 1,
        duration_ms: 2310,
        outcome: 'ok',
      },
      'access',
    );
    log.warn({ channel: 'openai-main', seconds: 30 }, 'channel cooling down');
    // a client's model name cannot put an escape sequence on the operator's terminal
    log.info(
      { method: 'POST', path: '/v1/x', status: 404, model: 'a\u001b[2Jb', outcome: 'not_found' },
      'access',
    );
    // eslint-disable-next-line no-control-regex
    const plain = written.map((w) => w.replace(/\x1b\[[0-9;]*m/g, ''));
    expect(plain).toHaveLength(3);
    expect(plain[0]).toMatch(
      /^\[[\d:.]+\] INFO: POST \/v1\/chat\/completions 200 2310 ms gpt-4o → openai-main wait 120 ms retries 1 ok token=team-a \[r-1\]\n$/,
    );
    expect(plain[1]).toMatch(/WARN: channel cooling down\n\s+channel: "openai-main"\n\s+seconds: 30\n$/);
    expect(written[2]).not.toContain('\u001b[2J');
    expect(plain[2]).toMatch(/INFO: POST \/v1\/x 404 undefined ms a\?\[2Jb → - not_found\n$/);
  });
});
