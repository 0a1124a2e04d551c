/** The client API: the OpenAI- and Anthropic-compatible POST routes, each proxied, and GET /v1/models (and /{id}). */
import type { FastifyInstance } from 'fastify';
import { HttpError, echo, type ApiShape } from '../http-errors.js';
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
    return { object: 'list', data: models.map(modelObject) };
  });
  // one model (openai `models.retrieve`), when an enabled channel of either API serves it for the caller's group (a
  // `*` channel serves any); the wildcard takes an id with a slash in it whether sent encoded or not
  app.get('/v1/models/*', async (request) => {
    const channels = ctx.registry();
    const token = channels.authenticate(presentedToken(request, 'openai'));
    if (!token) throw new HttpError('invalid_api_key', 'missing or invalid API key');
    const access = (request.access ??= newAccessRecord());
    access.token = token.name;
    const id = (access.model = (request.params as { '*': string })['*']);
    const served = SHAPES.some((shape) => channels.candidates(token.group, id, shape).length > 0);
    if (!served)
      throw new HttpError('model_not_found', `no channel serves model ${echo(id)} for this API key's group`);
    return modelObject(id);
  });
}

const SHAPES: readonly ApiShape[] = ['openai', 'anthropic'];

/** A model in OpenAI's shape. */
function modelObject(id: string) {
  return { id, object: 'model', created: 0, owned_by: 'slotgate' } as const;
}
