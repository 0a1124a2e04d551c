/** GET /metrics: the Prometheus text exposition, open like /healthz so a scraper needs no token. */
import type { FastifyInstance } from 'fastify';
import type { GatewayMetrics } from '../metrics.js';

export function registerMetricsRoute(app: FastifyInstance, metrics: GatewayMetrics): void {
  app.get('/metrics', async (_request, reply) => {
    void reply.header('content-type', metrics.register.contentType);
    return metrics.text();
  });
}
