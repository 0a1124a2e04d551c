/**
 * The floor of the gateway's own stack: Fastify in, undici out on one keep-alive agent, the body and the streamed
 * answer passed through as the gateway does. What slotgate's code adds is the difference from this contender.
 */
import Fastify from 'fastify';
import { Agent, request } from 'undici';

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'content-length',
  'content-encoding',
]);

export async function startFastifyProxy(target: string): Promise<{ url: string; close(): Promise<void> }> {
  const agent = new Agent({ keepAliveTimeout: 30_000 });
  const app = Fastify({ logger: false });
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
  app.post('/*', async (req, reply) => {
    const res = await request(`${target}${req.url}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer upstream-key' },
      body: req.body as Buffer,
      dispatcher: agent,
    });
    reply.code(res.statusCode);
    for (const [name, value] of Object.entries(res.headers)) {
      if (value !== undefined && !HOP_BY_HOP.has(name)) reply.header(name, value);
    }
    return reply.send(res.body);
  });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  return {
    url,
    async close() {
      await app.close();
      await agent.close();
    },
  };
}
