/** The client API: the OpenAI- and Anthropic-compatible POST routes, each proxied, and GET /v1/models. */
import type { FastifyInstance } from 'fastify';
import { HttpError } from '../http-errors.js';
import { newAccessRecord } from '../logging.js';
import type { ProxyContext } from '../proxy/context.js';
import { COUNT_TOKENS_PATH, countTokens } from '../proxy/count-tokens.js';
import { proxyRequest } from '../proxy/forward.js';
import { presentedToken } from '../proxy/request.js';

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
  // Anthropic's token counting generates nothing: forwarded (or answered by a mock) without taking a slot
  app.post(COUNT_TOKENS_PATH, (request, reply) => countTokens(ctx, request, reply));
  // the model names the caller's token group can use, in OpenAI's list shape
  app.get('/v1/models', async (request) => {
    const channels = ctx.registry();
    const token = channels.authenticate(presentedToken(request, 'openai'));
    if (!token) throw new HttpError('invalid_api_key', 'missing or invalid API key');
    (request.access ??= newAccessRecord()).token = token.name; // the access line names the caller, as for the proxy
    const models = channels.models(token.group);
    return {
      object: 'list',
      data: models.map((id) => ({ id, object: 'model', created: 0, owned_by: 'slotgate' })),
    };
  });
}
