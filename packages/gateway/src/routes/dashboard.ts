/** GET /dashboard: one static HTML page that reads the admin API with the token the operator types in. */
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';

let html: string | undefined;

export function dashboardHtml(): string {
  html ??= readFileSync(new URL('../dashboard.html', import.meta.url), 'utf8');
  return html;
}

export function registerDashboardRoutes(app: FastifyInstance): void {
  app.get('/dashboard', async (_request, reply) => {
    void reply.header('content-type', 'text/html; charset=utf-8').header('cache-control', 'no-store');
    return dashboardHtml();
  });
}
