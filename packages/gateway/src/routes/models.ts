/** GET /v1/models: the model names the caller's token group can use, in OpenAI's list shape. */
import type { FastifyInstance } from 'fastify';
import type { ChannelRegistry } from '../channels.js';
import { HttpError } from '../http-errors.js';
import { newAccessRecord } from '../logging.js';
import { presentedToken } from '../proxy/request.js';

export function registerModelRoutes(app: FastifyInstance, registry: () => ChannelRegistry): void {
  app.get('/v1/models', async (request) => {
    const channels = registry();
    const token = channels.authenticate(presentedToken(request, 'openai'));
    if (!token) throw new HttpError('invalid_api_key', 'missing or invalid API key');
    (request.access ??= newAccessRecord()).token = token.name; // the access line names the caller, as for the proxy
    return {
      object: 'list',
      data: channels
        .models(token.group)
        .map((id) => ({ id, object: 'model', created: 0, owned_by: 'slotgate' })),
    };
  });
}
