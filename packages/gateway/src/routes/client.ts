/** The OpenAI- and Anthropic-compatible POST routes: each forwards its body to an admitted channel. */
import type { FastifyInstance } from 'fastify';
import type { ProxyContext } from '../proxy/context.js';
import { proxyRequest } from '../proxy/forward.js';

export const CLIENT_ROUTES = [
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/embeddings',
  '/v1/images/generations',
  '/v1/responses',
  '/v1/messages',
] as const;

export function registerClientRoutes(app: FastifyInstance, ctx: ProxyContext): void {
  for (const path of CLIENT_ROUTES)
    app.post(path, (request, reply) => proxyRequest(ctx, request, reply, path));
}
