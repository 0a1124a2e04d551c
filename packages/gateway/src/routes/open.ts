/**
 * The routes open without a token: the probes (/livez, its other name /healthz, and /readyz), the Prometheus
 * exposition (/metrics) and the dashboard's page, which reads the admin API with the token the operator types in.
 */
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { HttpError, errorBody } from '../http-errors.js';
import type { GatewayMetrics } from '../metrics.js';
import type { ReadinessCheck } from '../readiness.js';

let html: string | undefined;

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
    void reply.header('content-type', 'text/html; charset=utf-8').header('cache-control', 'no-store');
    return (html ??= readFileSync(new URL('../dashboard.html', import.meta.url), 'utf8'));
  });
}
