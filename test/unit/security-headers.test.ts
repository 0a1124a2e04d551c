/**
 * The security pass of issue 35, item 7, through a whole gateway on the embedded store (app.inject, no port): the
 * dashboard's Content-Security-Policy allows exactly its own inline script and style (by hash), the admin API's
 * answers are never cached, rendered or framed, no route grants CORS, and client tokens are looked up by digest.
 * (The dashboard test runs the page under this policy in Chromium and fails on any console error.)
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { ChannelRegistry } from '../../packages/gateway/src/channels.js';
import { parseConfig } from '../../packages/gateway/src/config.js';
import { createGateway, type Gateway } from '../../packages/gateway/src/server.js';

const ADMIN = 'adm-headers-S3CRET';
const CLIENT = 'tok-headers-S3CRET';

const gateways: Gateway[] = [];
afterEach(async () => {
  for (const gw of gateways.splice(0)) await gw.close();
});

async function gateway(): Promise<Gateway> {
  const config = parseConfig(
    {
      admin: { token: ADMIN },
      tokens: [{ key: CLIENT, name: 'headers' }],
      channels: [{ id: 'm', type: 'mock', models: ['m'], max_concurrency: 2, mock: { latency_ms: 0 } }],
    },
    'headers-test',
    {},
  );
  const gw = await createGateway({ config, logger: false });
  gateways.push(gw);
  await gw.app.ready();
  return gw;
}

const hashOf = (body: string) => `'sha256-${createHash('sha256').update(body).digest('base64')}'`;

describe('security headers', () => {
  it("the dashboard's policy runs only its own inline script and style, talks only to this gateway, is never framed", async () => {
    const gw = await gateway();
    const res = await gw.app.inject({ method: 'GET', url: '/dashboard' });
    expect(res.statusCode).toBe(200);
    const policy = String(res.headers['content-security-policy']);
    const directives = new Map(
      policy.split('; ').map((d) => [d.split(' ')[0]!, d.split(' ').slice(1).join(' ')]),
    );
    const html = readFileSync(new URL('../../packages/gateway/src/dashboard.html', import.meta.url), 'utf8');
    const [script] = /<script>([\s\S]*?)<\/script>/.exec(html)!.slice(1);
    const [style] = /<style>([\s\S]*?)<\/style>/.exec(html)!.slice(1);
    expect(directives.get('default-src')).toBe("'none'");
    expect(directives.get('script-src')).toBe(hashOf(script!));
    expect(directives.get('style-src')).toBe(hashOf(style!));
    expect(directives.get('connect-src')).toBe("'self'");
    expect(directives.get('frame-ancestors')).toBe("'none'");
    expect(policy).not.toContain('unsafe');
    expect(res.headers['x-frame-options']).toBe('DENY');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    expect(res.headers['referrer-policy']).toBe('no-referrer');
  });

  it('admin answers, refusals included, are never cached, rendered as a page or framed', async () => {
    const gw = await gateway();
    for (const authorization of [`Bearer ${ADMIN}`, 'Bearer wrong']) {
      const res = await gw.app.inject({ method: 'GET', url: '/admin/status', headers: { authorization } });
      expect(res.statusCode).toBe(authorization.endsWith(ADMIN) ? 200 : 401);
      expect(res.headers['cache-control']).toBe('no-store');
      expect(res.headers['content-security-policy']).toBe("default-src 'none'; frame-ancestors 'none'");
      expect(res.headers['x-content-type-options']).toBe('nosniff');
    }
  });

  it('no route grants CORS: a preflight and a cross-origin call get no Access-Control-Allow-* header', async () => {
    const gw = await gateway();
    const origin = 'https://evil.example';
    const answers = [
      await gw.app.inject({
        method: 'OPTIONS',
        url: '/v1/chat/completions',
        headers: { origin, 'access-control-request-method': 'POST' },
      }),
      await gw.app.inject({
        method: 'OPTIONS',
        url: '/admin/status',
        headers: { origin, 'access-control-request-method': 'GET' },
      }),
      await gw.app.inject({
        method: 'GET',
        url: '/admin/status',
        headers: { origin, authorization: `Bearer ${ADMIN}` },
      }),
      await gw.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { origin, authorization: `Bearer ${CLIENT}`, 'content-type': 'application/json' },
        payload: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
      }),
    ];
    expect(answers.map((r) => r.statusCode)).toEqual([404, 404, 200, 200]);
    for (const res of answers)
      expect(Object.keys(res.headers).filter((h) => h.startsWith('access-control-'))).toEqual([]);
  });
});

describe('client tokens', () => {
  it('are looked up by their SHA-256 digest: the registry keeps no key as a lookup key', () => {
    const registry = new ChannelRegistry(
      [],
      parseConfig({ tokens: [{ key: CLIENT, name: 'a' }] }, 'tokens-test', {}).tokens,
    );
    expect(registry.authenticate(CLIENT)?.name).toBe('a');
    expect(registry.authenticate(`${CLIENT.slice(0, -1)}x`)).toBeUndefined();
    expect(registry.authenticate(`${CLIENT} `)).toBeUndefined();
    const lookupKeys = [...(registry as unknown as { tokens: Map<string, unknown> }).tokens.keys()];
    expect(lookupKeys).toEqual([createHash('sha256').update(CLIENT).digest('base64')]);
  });
});
