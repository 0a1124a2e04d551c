/** The probes, open like /metrics: /livez (and its other name /healthz) and /readyz (503 `not_ready` with why). */
import type { FastifyInstance } from 'fastify';
import { HttpError, errorBody } from '../http-errors.js';
import type { ReadinessCheck } from '../readiness.js';

export function registerHealthRoutes(app: FastifyInstance, ready: ReadinessCheck): void {
  const alive = async () => ({ ok: true });
  app.get('/livez', alive);
  app.get('/healthz', alive);

  app.get('/readyz', async (_request, reply) => {
    const readiness = await ready();
    if (readiness.ready) return { ready: true, ...(readiness.reason ? { reason: readiness.reason } : {}) };
    const err = new HttpError('not_ready', `slotgate: not ready: ${readiness.reason ?? 'no reason given'}`);
    return reply.code(err.status).send(errorBody(err, 'openai'));
  });
}
