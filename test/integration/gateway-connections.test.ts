/**
 * The gateway's connections on a real socket: clients that send their request slowly, or nothing at all, are cut
 * off within the configured time-outs with a 408 in slotgate's shape, while a long stream with long silences from the
 * upstream runs to its end; idle keep-alive connections close; bytes that are not HTTP and oversized headers get
 * slotgate's shape too. Time-outs are small here and every bound has a wide margin: the test asserts orderings and
 * bounds, never a precise duration.
 */
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { FakeUpstream, sseData } from '../helpers/fake-upstream.js';
import {
  CLIENT,
  LOG_LINES,
  SECRETS,
  configDoc,
  startGateway,
  streamingCall,
  within,
  expectNoSecretsLogged,
  type TestGateway,
} from '../helpers/gateway.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

const HEADERS_MS = 600;
const REQUEST_MS = 1200;
const KEEP_ALIVE_MS = 800;
/** Room for a busy machine on top of every upper bound. */
const MARGIN_MS = 5000;

interface Closed {
  /** From the connect call to the close. */
  elapsedMs: number;
  /** When it closed (Date.now()). */
  at: number;
  /** Everything the gateway sent. */
  data: string;
}

/** A raw TCP connection to the gateway, driven by `script`; resolves when the gateway closes it. */
function rawConnection(gw: TestGateway, script: (socket: Socket) => void): Promise<Closed> {
  const { hostname, port } = new URL(gw.url);
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = connect(Number(port), hostname);
    let data = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (data += chunk));
    socket.on('error', () => {});
    socket.on('close', () => resolve({ elapsedMs: Date.now() - started, at: Date.now(), data }));
    socket.on('connect', () => script(socket));
    cleanups.push(() => socket.destroy());
  });
}

/** Writes `text` one character every `everyMs`, for as long as the socket is open. */
function trickle(socket: Socket, text: string, everyMs: number): void {
  let i = 0;
  const timer = setInterval(() => {
    if (socket.destroyed) return clearInterval(timer);
    socket.write(text[i++ % text.length]!);
  }, everyMs);
  socket.once('close', () => clearInterval(timer));
}

function expectTimeout408(closed: Closed): void {
  expect(closed.data).toMatch(/^HTTP\/1\.1 408 /);
  const body = JSON.parse(closed.data.slice(closed.data.indexOf('\r\n\r\n') + 4)) as {
    error: { code: string; type: string };
  };
  expect(body.error).toMatchObject({ code: 'request_timeout', type: 'invalid_request_error' });
}

async function gatewayWith(up: FakeUpstream): Promise<TestGateway> {
  const gw = await startGateway(
    configDoc({
      server: {
        host: '127.0.0.1',
        port: 0,
        log_level: 'trace',
        drain_timeout_ms: 2000,
        headers_timeout_ms: HEADERS_MS,
        request_timeout_ms: REQUEST_MS,
        keep_alive_timeout_ms: KEEP_ALIVE_MS,
      },
      channels: [
        {
          id: 'slow',
          type: 'openai',
          base_url: up.url('slow'),
          key: SECRETS.channelKey,
          models: ['gpt-x'],
          max_concurrency: 2,
        },
      ],
    }),
  );
  cleanups.push(() => gw.close());
  return gw;
}

describe('server time-outs', () => {
  it('slow and silent clients are cut off within their time-out; a stream with long silences runs to its end', async () => {
    const up = await FakeUpstream.start();
    cleanups.push(() => up.close());
    // Four chunks with silences longer than every server time-out in between: about 3 × REQUEST_MS in all.
    const silence = () => sleep(REQUEST_MS + 300);
    const words = ['w0 ', 'w1 ', 'w2 ', 'w3 '].map((w) =>
      sseData({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: w } }] }),
    );
    up.on('slow', {
      sse: [words[0]!, silence, words[1]!, silence, words[2]!, silence, words[3]!, 'data: [DONE]\n\n'],
    });
    const gw = await gatewayWith(up);
    const logsBefore = LOG_LINES.length;

    const streamStarted = Date.now();
    const stream = streamingCall(`${gw.url}/v1/chat/completions`, { model: 'gpt-x', stream: true }, CLIENT);
    expect(await within(stream.status, 5000, 'stream status')).toBe(200);

    const auth = `Authorization: Bearer ${SECRETS.clientToken}\r\n`;
    const slowHeaders = Array.from({ length: 20 }, () =>
      rawConnection(gw, (s) => {
        s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n${auth}`);
        trickle(s, 'X-Slow: abcdefghijklmnopqrstuvwxyz', 100);
      }),
    );
    const slowBodies = Array.from({ length: 20 }, () =>
      rawConnection(gw, (s) => {
        s.write(
          `POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n${auth}` +
            'Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"model":"gpt-x","pad":"',
        );
        trickle(s, 'x', 100);
      }),
    );
    const silent = Array.from({ length: 10 }, () => rawConnection(gw, () => {}));

    for (const closed of [...(await Promise.all(slowHeaders)), ...(await Promise.all(silent))]) {
      expect(closed.elapsedMs).toBeGreaterThanOrEqual(HEADERS_MS - 50);
      expect(closed.elapsedMs).toBeLessThan(HEADERS_MS + MARGIN_MS);
      expectTimeout408(closed);
    }
    const bodies = await Promise.all(slowBodies);
    for (const closed of bodies) {
      expect(closed.elapsedMs).toBeGreaterThanOrEqual(REQUEST_MS - 50);
      expect(closed.elapsedMs).toBeLessThan(REQUEST_MS + MARGIN_MS);
      expectTimeout408(closed);
    }
    const lastCut = Math.max(...bodies.map((c) => c.at));

    // The stream outlived every cut connection and every time-out, and arrived whole.
    const text = await within(stream.body, 20_000, 'stream body');
    const streamEnded = Date.now();
    expect(streamEnded).toBeGreaterThan(lastCut);
    expect(streamEnded - streamStarted).toBeGreaterThanOrEqual(3 * REQUEST_MS);
    for (let i = 0; i < 4; i++) expect(text).toContain(`w${i} `);
    expect(text).toMatch(/data: \[DONE\]\n\n$/);
    expect(up.requests('slow')).toHaveLength(1); // no slow client's request reached the upstream
    expect(up.requests('slow')[0]!.aborted).toBe(false);

    // Cutting a client off is not a gateway error.
    const errors = LOG_LINES.slice(logsBefore).filter(
      (l) => (JSON.parse(l) as { level: number }).level >= 50,
    );
    expect(errors).toEqual([]);
  });

  it('an idle keep-alive connection closes after keep_alive_timeout_ms', async () => {
    const up = await FakeUpstream.start();
    cleanups.push(() => up.close());
    const gw = await gatewayWith(up);
    let answeredAt = 0;
    const closed = await rawConnection(gw, (s) => {
      s.on('data', () => (answeredAt ||= Date.now()));
      s.write('GET /livez HTTP/1.1\r\nHost: gw\r\n\r\n');
    });
    expect(closed.data).toMatch(/^HTTP\/1\.1 200 /);
    expect(closed.data).toContain('{"ok":true}');
    const idleMs = closed.at - answeredAt;
    expect(idleMs).toBeGreaterThanOrEqual(KEEP_ALIVE_MS - 50);
    expect(idleMs).toBeLessThan(KEEP_ALIVE_MS + 1000 + MARGIN_MS); // Node adds about 1 s
  });
});

describe('connection-level errors', () => {
  it('bytes that are not HTTP → 400, headers over 16 KiB → 413, both in slotgate shape', async () => {
    const up = await FakeUpstream.start();
    cleanups.push(() => up.close());
    const gw = await gatewayWith(up);
    const garbage = await rawConnection(gw, (s) => s.write('HELLO THERE\r\n\r\n'));
    expect(garbage.data).toMatch(/^HTTP\/1\.1 400 /);
    expect(garbage.data).toContain('"code":"invalid_request_error"');

    const huge = await rawConnection(gw, (s) =>
      s.write(`GET /admin/channels/${'c'.repeat(20_000)}/cooldown HTTP/1.1\r\nHost: gw\r\n\r\n`),
    );
    expect(huge.data).toMatch(/^HTTP\/1\.1 413 /);
    expect(huge.data).toContain('"code":"request_too_large"');
  });
});
