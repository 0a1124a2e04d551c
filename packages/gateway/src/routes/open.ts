/**
 * The routes open without a token: the probes (/livez, its other name /healthz, and /readyz), the Prometheus
 * exposition (/metrics) and the dashboard's page, which reads the admin API with the token the operator types in.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { HttpError, errorBody } from '../http-errors.js';
import type { GatewayMetrics } from '../metrics.js';
import type { ReadinessCheck } from '../readiness.js';

let page: { html: string; policy: string } | undefined;

/** The CSP hash sources of the page's inline elements of one tag. */
function inlineHashes(html: string, tag: 'script' | 'style'): string {
  const bodies = [...html.matchAll(new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`, 'g'))].map((m) => m[1]!);
  return bodies.map((b) => `'sha256-${createHash('sha256').update(b).digest('base64')}'`).join(' ');
}

/**
 * The page, and a Content-Security-Policy that lets it run only its own inline script and style (by hash), talk only
 * to this gateway, and be framed by nobody.
 */
function dashboardPage(): { html: string; policy: string } {
  const html = readFileSync(new URL('../dashboard.html', import.meta.url), 'utf8');
  const policy = [
    "default-src 'none'",
    `script-src ${inlineHashes(html, 'script')}`,
    `style-src ${inlineHashes(html, 'style')}`,
    "connect-src 'self'",
    'img-src data:',
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { html, policy };
}

export function registerOpenRoutes(
  app: FastifyInstance,
  ready: ReadinessCheck,
  metrics: GatewayMetrics,
): void {
  const alive = async () => ({ ok: true });
  app.get('/livez', alive);
  app.get('/healthz', alive);
  app.get('/readyz', async (_request, reply) => {
    const readiness = await ready();
    if (readiness.ready) return { ready: true, ...(readiness.reason ? { reason: readiness.reason } : {}) };
    const err = new HttpError('not_ready', `slotgate: not ready: ${readiness.reason ?? 'no reason given'}`);
    return reply.code(err.status).send(errorBody(err, 'openai'));
  });
  app.get('/metrics', async (_request, reply) => {
    void reply.header('content-type', metrics.register.contentType);
    return metrics.register.metrics();
  });
  app.get('/dashboard', async (_request, reply) => {
    const { html, policy } = (page ??= dashboardPage());
    void reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('cache-control', 'no-store')
      .header('content-security-policy', policy)
      .header('x-frame-options', 'DENY')
      .header('referrer-policy', 'no-referrer');
    return html;
  });
}
