/**
 * The floor the gateway is measured against: node:http in, node:http out on one keep-alive agent, the request and the
 * answer streamed through; no routing, authentication, admission or logs.
 */
import { Agent, createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export async function startMinimalProxy(target: string): Promise<{ url: string; close(): Promise<void> }> {
  const base = new URL(target);
  const agent = new Agent({ keepAlive: true, maxSockets: 1024 });
  const server: Server = createServer((req, res) => {
    const headers = { ...req.headers, host: base.host };
    const upstream = request(`${target}${req.url}`, { method: req.method, headers, agent }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on('error', () => (res.headersSent ? res.destroy() : res.writeHead(502).end()));
    req.pipe(upstream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      agent.destroy();
    },
  };
}
