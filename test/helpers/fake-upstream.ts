/**
 * A fake LLM upstream for the gateway tests: one `http.createServer()` on 127.0.0.1 and a free port, serving any number
 * of channels. Each channel has its own base URL (`url(channel)` = `http://127.0.0.1:<port>/c/<channel>`), so a
 * request's channel is the first path segment after `/c/`, and the rest is the API path (`/v1/chat/completions`).
 *
 * Behaviour is programmable per channel and per path (status, headers, a JSON or raw body, SSE chunks with delays or
 * gates in between, a hold before the headers). For each channel it records what the gateway did: the requests
 * received (headers and raw body), the current and highest number in flight (from arrival until the response ended or
 * was closed), and whether each request was closed by the gateway before its response was finished.
 */
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/** One step of a streamed answer: a chunk written as it is, or a function awaited before the next step. */
export type Part = string | (() => Promise<unknown>);

export interface Reply {
  /** @default 200 */
  status?: number;
  headers?: Record<string, string>;
  /** A JSON body (content-type application/json). */
  json?: unknown;
  /** A raw body. */
  body?: string | Buffer;
  /** A streamed body (content-type text/event-stream): the headers are flushed at once, then each part in turn. */
  sse?: readonly Part[];
  /** Pause between two SSE chunks. @default 0 */
  chunkDelayMs?: number;
  /** Pause before the response headers. @default 0 */
  delayMs?: number;
}

export type Handler = Reply | ((request: ReceivedRequest) => Reply | Promise<Reply>);

export interface ReceivedRequest {
  channel: string;
  /** The API path, without the `/c/<channel>` part (e.g. `/v1/chat/completions`). */
  path: string;
  method: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** Closed by the gateway before the response was finished. */
  aborted: boolean;
  /** The response was written completely. */
  finished: boolean;
  /** Settles when the exchange is over (finished or aborted). */
  done: Promise<void>;
}

export interface ChannelRecord {
  current: number;
  max: number;
  requests: ReceivedRequest[];
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** An SSE `data:` event for an OpenAI-style chunk. */
export const sseData = (obj: unknown): string => `data: ${JSON.stringify(obj)}\n\n`;

/** A promise with its resolve function, for gating an upstream until the test says so. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

export class FakeUpstream {
  private readonly handlers = new Map<string, Handler>();
  private readonly records = new Map<string, ChannelRecord>();
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(): Promise<FakeUpstream> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const upstream = new FakeUpstream(server, (server.address() as AddressInfo).port);
    server.on('connection', (socket) => {
      upstream.sockets.add(socket);
      socket.once('close', () => upstream.sockets.delete(socket));
    });
    server.on('request', (req, res) => void upstream.serve(req, res));
    return upstream;
  }

  /** The base_url of a channel. */
  url(channel: string): string {
    return `http://127.0.0.1:${this.port}/c/${encodeURIComponent(channel)}`;
  }

  /** Programs a channel, or one path of a channel. Without a handler a channel answers 200 `{"channel": id}`. */
  on(channel: string, handler: Handler, path?: string): this {
    this.handlers.set(path ? `${channel} ${path}` : channel, handler);
    return this;
  }

  record(channel: string): ChannelRecord {
    let record = this.records.get(channel);
    if (!record) this.records.set(channel, (record = { current: 0, max: 0, requests: [] }));
    return record;
  }

  requests(channel: string): ReceivedRequest[] {
    return this.record(channel).requests;
  }

  /** Forgets every handler and every record (between the tests of one file sharing one upstream). */
  reset(): void {
    this.handlers.clear();
    this.records.clear();
  }

  /** Every request received, on every channel. */
  all(): ReceivedRequest[] {
    return [...this.records.values()].flatMap((r) => r.requests);
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const m = /^\/c\/([^/]+)(\/[^?]*)/.exec(req.url ?? '');
    if (!m) {
      res.writeHead(404).end('not a channel path');
      return;
    }
    const channel = decodeURIComponent(m[1]!);
    const path = m[2]!;
    const record = this.record(channel);
    record.current++;
    record.max = Math.max(record.max, record.current);
    let closed!: () => void;
    const received: ReceivedRequest = {
      channel,
      path,
      method: req.method ?? '',
      headers: req.headers,
      body: Buffer.alloc(0),
      aborted: false,
      finished: false,
      done: new Promise<void>((resolve) => (closed = resolve)),
    };
    record.requests.push(received);
    const isClosed = new Promise<void>((resolve) =>
      res.once('close', () => {
        record.current--;
        received.finished = res.writableFinished;
        received.aborted = !res.writableFinished;
        resolve();
        closed();
      }),
    );

    const chunks: Buffer[] = [];
    try {
      for await (const chunk of req) chunks.push(chunk as Buffer);
    } catch {
      return; // the gateway went away while sending the body
    }
    received.body = Buffer.concat(chunks);

    const handler = this.handlers.get(`${channel} ${path}`) ?? this.handlers.get(channel);
    const reply: Reply =
      typeof handler === 'function' ? await handler(received) : (handler ?? { json: { channel } });
    if (reply.delayMs) await Promise.race([sleep(reply.delayMs), isClosed]);
    if (res.destroyed) return;

    const status = reply.status ?? 200;
    if (reply.sse) {
      res.writeHead(status, {
        'content-type': 'text/event-stream',
        'cache-control': 'no-cache',
        ...reply.headers,
      });
      res.flushHeaders();
      let first = true;
      for (const part of reply.sse) {
        if (res.destroyed) return;
        if (typeof part === 'function') {
          await Promise.race([part(), isClosed]);
          continue;
        }
        if (!first && reply.chunkDelayMs) await Promise.race([sleep(reply.chunkDelayMs), isClosed]);
        first = false;
        if (res.destroyed) return;
        res.write(part);
      }
      if (!res.destroyed) res.end();
      return;
    }
    if (reply.json !== undefined) {
      res.writeHead(status, { 'content-type': 'application/json', ...reply.headers });
      res.end(JSON.stringify(reply.json));
      return;
    }
    res.writeHead(status, { 'content-type': 'application/json', ...reply.headers });
    res.end(reply.body ?? '');
  }

  async close(): Promise<void> {
    const closing = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const socket of this.sockets) socket.destroy();
    await closing;
  }
}
