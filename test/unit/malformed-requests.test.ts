/**
 * Issue 35, item 7: 10,000 generated malformed requests (fast-check) against every route of a whole gateway on the
 * embedded store (app.inject, no port), client and admin: every answer is below 500, the gateway keeps serving, and no
 * answer or log line holds a secret. Requests mix valid and invalid methods, paths, tokens, content types and bodies:
 * random bytes, invalid UTF-8, JSON of any shape, request bodies whose fields have the wrong types, deep nesting and
 * large bodies. The seed is printed; SLOTGATE_FUZZ_SEED replays a run, SLOTGATE_FUZZ_RUNS changes its size.
 */
import { Writable } from 'node:stream';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { COUNT_TOKENS_PATH } from '../../packages/gateway/src/proxy/mock.js';
import { CLIENT_ROUTES } from '../../packages/gateway/src/routes/client.js';
import { createGateway, type Gateway } from '../../packages/gateway/src/server.js';

const ADMIN = 'adm-fuzz-S3CRET-7f2c';
const CLIENT = 'tok-fuzz-S3CRET-91ab';
const KEY = 'sk-fuzz-S3CRET-c0de';
const SECRETS = [ADMIN, CLIENT, KEY];
const RUNS = Number(process.env.SLOTGATE_FUZZ_RUNS ?? 10_000);
const SEED = Number(process.env.SLOTGATE_FUZZ_SEED ?? Date.now() % 2 ** 31);

/** The gateway's own list of model routes, and the rest of what it serves. */
const ROUTES = [
  ...CLIENT_ROUTES,
  COUNT_TOKENS_PATH,
  '/v1/models',
  '/v1/models/m',
  '/chat/completions',
  '/livez',
  '/healthz',
  '/readyz',
  '/metrics',
  '/dashboard',
  '/admin/settings',
  '/admin/channels',
  '/admin/channels/m/cooldown',
  '/admin/channels/%7B%7D/cooldown',
  '/admin/clients',
  '/admin/status',
  '/admin/stats',
  '/admin/history',
  '/admin/fleet',
];

const logLines: string[] = [];
let gw: Gateway;

beforeAll(async () => {
  const config = parseConfig(
    {
      admin: { token: ADMIN },
      tokens: [{ key: CLIENT, name: 'fuzz', max_concurrency: 4 }],
      channels: [
        { id: 'm', type: 'mock', models: ['m', 'claude-x'], max_concurrency: 2, mock: { latency_ms: 0 } },
        // a real channel's key is a secret the answers must never show; disabled, so nothing calls it
        {
          id: 'real',
          type: 'openai',
          base_url: 'http://127.0.0.1:9/v1',
          key: KEY,
          models: ['r'],
          enabled: false,
        },
      ],
      settings: { wait_enabled: true, wait_timeout_ms: 100 },
    },
    'fuzz-test',
    {},
  );
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      logLines.push(chunk.toString('utf8'));
      done();
    },
  });
  gw = await createGateway({ config, logger: { level: 'debug', stream } });
  await gw.app.ready();
});

afterAll(async () => {
  await gw?.close();
});

const printable = fc.string({
  unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)),
});

const path = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...ROUTES) },
  {
    weight: 2,
    arbitrary: fc.tuple(fc.constantFrom(...ROUTES), printable).map(([r, q]) => `${r}?${encodeURI(q)}`),
  },
  fc.tuple(fc.constantFrom(...ROUTES), fc.webSegment()).map(([r, s]) => `${r}/${s}`),
  fc.webPath().map((p) => (p.startsWith('/') ? p : `/${p}`)),
);

const authorization = fc.oneof(
  fc.constant(undefined),
  fc.constantFrom(`Bearer ${CLIENT}`, `Bearer ${ADMIN}`, `bearer ${CLIENT}`, 'Bearer ', `Basic ${CLIENT}`),
  printable,
  printable.map((s) => `Bearer ${s}`),
);

const wrongTyped = fc.oneof(fc.jsonValue(), fc.constant(undefined));
/** A request body of the right outline whose fields have any type. */
const shapedBody = fc
  .record({
    model: fc.oneof(fc.constantFrom('m', 'claude-x', 'r', 'none'), wrongTyped),
    messages: fc.oneof(
      fc.array(
        fc.record({ role: fc.oneof(fc.constantFrom('user', 'system'), wrongTyped), content: wrongTyped }),
      ),
      wrongTyped,
    ),
    stream: wrongTyped,
    max_tokens: wrongTyped,
    input: wrongTyped,
    prompt: wrongTyped,
    stream_options: wrongTyped,
    encoding_format: wrongTyped,
  })
  .map((b) => JSON.stringify(b));

const deep = fc.integer({ min: 50, max: 3000 }).map((n) => '['.repeat(n) + ']'.repeat(n));

const body = fc.oneof(
  fc.constant(undefined),
  { weight: 3, arbitrary: shapedBody },
  fc.jsonValue().map((v) => JSON.stringify(v)),
  printable,
  fc.uint8Array({ maxLength: 512 }).map((b) => Buffer.from(b)),
  fc.constant(Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d])), // invalid UTF-8 inside JSON
  deep,
  fc.integer({ min: 1, max: 12 }).map((mb) => JSON.stringify({ model: 'm', messages: 'x'.repeat(mb << 20) })),
);

const request = fc.record({
  method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD'),
  url: path,
  authorization,
  apiKey: fc.oneof(fc.constant(undefined), fc.constant(CLIENT), printable),
  contentType: fc.oneof(
    fc.constant(undefined),
    fc.constantFrom(
      'application/json',
      'text/plain',
      'application/json; charset=latin1',
      'multipart/form-data',
    ),
    printable,
  ),
  body,
});

describe('malformed requests', () => {
  it(`${RUNS} generated requests: every answer below 500, no secret in an answer or a log line`, async () => {
    console.log(`malformed requests: seed ${SEED}, ${RUNS} runs (SLOTGATE_FUZZ_SEED=${SEED} replays it)`);
    const statuses = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(request, async (r) => {
        const headers: Record<string, string> = {};
        if (r.authorization !== undefined) headers.authorization = r.authorization;
        if (r.apiKey !== undefined) headers['x-api-key'] = r.apiKey;
        if (r.contentType !== undefined) headers['content-type'] = r.contentType;
        const res = await gw.app.inject({
          method: r.method as 'GET',
          url: r.url,
          headers,
          ...(r.body !== undefined && r.method !== 'GET' && r.method !== 'HEAD' ? { payload: r.body } : {}),
        });
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
        expect(res.statusCode, `${r.method} ${r.url}: ${res.body.slice(0, 300)}`).toBeLessThan(500);
        // the client's own key may come back only where it was sent; the others never
        for (const secret of SECRETS) expect(res.body.includes(secret), secret).toBe(false);
        for (const value of Object.values(res.headers))
          for (const secret of SECRETS) expect(String(value).includes(secret)).toBe(false);
      }),
      { numRuns: RUNS, seed: SEED, endOnFailure: true },
    );
    // still serving, and it logged, but no secret
    expect((await gw.app.inject({ method: 'GET', url: '/livez' })).statusCode).toBe(200);
    // a generated admin call (the admin token is among the generated ones) may have cooled the channel down
    await gw.admission.clearCooldown('m');
    const chat = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: `Bearer ${CLIENT}`, 'content-type': 'application/json' },
      payload: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chat.statusCode, chat.body).toBe(200);
    expect(logLines.length).toBeGreaterThan(RUNS / 2);
    for (const line of logLines)
      for (const secret of SECRETS) expect(line.includes(secret), line).toBe(false);
    // the mix reached the handlers, not only the router's 404
    console.log(`statuses: ${JSON.stringify(Object.fromEntries([...statuses].sort(([a], [b]) => a - b)))}`);
    expect([...statuses.keys()]).toEqual(expect.arrayContaining([200, 400, 401, 404]));
  }, 300_000);
});
