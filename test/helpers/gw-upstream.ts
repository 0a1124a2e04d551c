/**
 * A counting OpenAI-shaped upstream for the multi-process gateway tests (test/integration/gateway-multiprocess.test.ts).
 * It answers `POST …/chat/completions`, identifies the channel by the key in `Authorization: Bearer <key>`, and counts
 * requests in flight per channel itself, so tests assert what the upstream saw, not what the gateways believe.
 *
 * A request is counted in from its arrival until just before the last byte of its answer is written; the gateway can
 * only release its slot after that last byte, so a release never precedes the decrement it stands for.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface GwUpstreamOptions {
  /** Bearer key → channel id. A request with another key is answered 401 and listed in `bad`. */
  keys: Record<string, string>;
  /** Non-streamed answers: time before the JSON answer. */
  holdMs: number;
  /** Streamed answers: number of content chunks, and the delay before each one. */
  chunks: number;
  chunkDelayMs: number;
}

export interface GwChannelSeen {
  current: number;
  highest: number;
  requests: number;
  streamed: number;
}

export interface GwUpstream {
  port: number;
  /** base_url for an openai channel. */
  baseUrl: string;
  seen: Map<string, GwChannelSeen>;
  /** Requests the upstream could not attribute (wrong key, path or body). */
  bad: string[];
  totalRequests(): number;
  close(): Promise<void>;
}

/** The text chunk i of a streamed answer; tests rebuild the whole text to check nothing was lost. */
export const gwChunkText = (i: number) => `c${i} `;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function readBody(req: IncomingMessage): Promise<string> {
  const parts: Buffer[] = [];
  for await (const chunk of req) parts.push(chunk as Buffer);
  return Buffer.concat(parts).toString('utf8');
}

export async function startGwUpstream(opts: GwUpstreamOptions): Promise<GwUpstream> {
  const seen = new Map<string, GwChannelSeen>();
  const bad: string[] = [];

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const auth = req.headers.authorization ?? '';
    const key = /^Bearer (.+)$/.exec(auth)?.[1];
    const channel = key ? opts.keys[key] : undefined;
    if (!channel || req.method !== 'POST' || !req.url?.endsWith('/chat/completions')) {
      bad.push(`${req.method} ${req.url} key=${key ? 'unknown' : 'none'}`);
      res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":{"message":"bad request"}}');
      return;
    }
    let s = seen.get(channel);
    if (!s) seen.set(channel, (s = { current: 0, highest: 0, requests: 0, streamed: 0 }));
    const stats = s;
    stats.current++;
    stats.requests++;
    stats.highest = Math.max(stats.highest, stats.current);
    let counted = true;
    const countOut = () => {
      if (!counted) return;
      counted = false;
      stats.current--;
    };
    res.once('close', countOut); // a connection torn down early is no longer in flight either

    let body: { stream?: unknown; model?: unknown };
    try {
      body = JSON.parse(await readBody(req)) as typeof body;
    } catch {
      bad.push(`unparsable body for ${channel}`);
      countOut();
      res.writeHead(400).end();
      return;
    }
    const id = `chatcmpl-${channel}-${stats.requests}`;
    if (body.stream === true) {
      stats.streamed++;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      for (let i = 0; i < opts.chunks; i++) {
        await sleep(opts.chunkDelayMs);
        if (res.destroyed) return;
        const chunk = {
          id,
          object: 'chat.completion.chunk',
          model: body.model,
          choices: [{ index: 0, delta: { content: gwChunkText(i) }, finish_reason: null }],
        };
        res.write(`data: ${JSON.stringify(chunk)}\n\n`);
      }
      countOut();
      res.end('data: [DONE]\n\n');
      return;
    }
    await sleep(opts.holdMs);
    if (res.destroyed) return;
    countOut();
    res.writeHead(200, { 'content-type': 'application/json' }).end(
      JSON.stringify({
        id,
        object: 'chat.completion',
        model: body.model,
        choices: [{ index: 0, message: { role: 'assistant', content: `hello from ${channel}` } }],
      }),
    );
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      bad.push(`handler failed: ${String(err)}`);
      res.destroy();
    });
  });
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    baseUrl: `http://127.0.0.1:${port}/v1`,
    seen,
    bad,
    totalRequests: () => [...seen.values()].reduce((n, s) => n + s.requests, 0),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
