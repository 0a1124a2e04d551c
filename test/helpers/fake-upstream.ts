/**
 * The counting upstream of the tests and the benchmark: one `http.createServer()` on 127.0.0.1 and a free port,
 * serving any number of channels, that counts itself how many requests each channel has in flight — so a test
 * asserts what the upstream saw, not what the gateway believes.
 *
 * A request's channel is the first path segment after `/c/` (`url(channel)` is that channel's base URL), or, with
 * the `keys` option, the channel its `Authorization: Bearer <key>` names (every channel then shares `origin`).
 * A request counts as in flight from its arrival until right before the last byte of its answer is written — the
 * gateway can only release its slot after that byte, so a release never precedes the decrement it stands for — or
 * until the gateway closes the connection first.
 *
 * Answers are programmable per channel and per path (status, headers, a JSON or raw body, SSE chunks with delays or
 * gates in between, a hold before the headers). Each channel's record keeps the requests received (headers and raw
 * body) and whether each was closed by the gateway before its answer was finished. With the `timeline` option it also
 * keeps every change of its in-flight count with its time, so a test can tell for how long the count was over a
 * limit, not only whether it ever was (`excess`).
 */
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** One step of a streamed answer: a chunk written as it is, or a function awaited before the next step. */
export type Part = string | (() => Promise<unknown>);

export interface Reply {
  /** @default 200 */
  status?: number;
  headers?: Record<string, string>;
  /** A JSON body (content-type application/json). */
  json?: unknown;
  /** A raw body (content-type application/json unless `headers` say otherwise). */
  body?: string | Buffer;
  /** A streamed body (content-type text/event-stream): the headers are flushed at once, then each part in turn. */
  sse?: readonly Part[];
  /** Pause between two SSE chunks. @default 0 */
  chunkDelayMs?: number;
  /** Pause before the response headers. @default 0 */
  delayMs?: number;
}

/** An answer, or a function of the request returning one; a function that throws lists the request in `bad`. */
export type Handler = Reply | ((request: ReceivedRequest) => Reply | Promise<Reply>);

export interface ReceivedRequest {
  channel: string;
  /** The API path, without the `/c/<channel>` part (e.g. `/v1/chat/completions`); with `keys`, the URL's path. */
  path: string;
  method: string;
  headers: IncomingHttpHeaders;
  /** The raw body; left unread (empty) when neither `keepRequests` nor a handler function needs it. */
  body: Buffer;
  /** Closed by the gateway before the response was finished. */
  aborted: boolean;
  /** The response was written completely. */
  finished: boolean;
  /** Settles when the exchange is over (finished or aborted). */
  done: Promise<void>;
  /** When it arrived, on `performance.now()`. */
  receivedAt: number;
  /** When it stopped counting as in flight (its last byte written, or closed early), on `performance.now()`. */
  endedAt?: number;
}

export interface ChannelRecord {
  /** Requests in flight now. */
  current: number;
  /** The highest `current` seen. */
  max: number;
  /** Requests received (counted with `keepRequests` off too). */
  received: number;
  /** Every request received; empty with `keepRequests` off. */
  requests: ReceivedRequest[];
  /** With the `timeline` option: every change of `current` as [performance.now(), current after it]. */
  timeline: Array<[at: number, current: number]>;
}

/** How far and for how long a channel's in-flight count went over a limit. */
export interface Excess {
  /** The highest count seen. */
  peak: number;
  /** Total time the count was above the limit, in ms (a spell still open counts up to `until`). */
  msAbove: number;
  /** Start of the first and end of the last spell above the limit (performance.now()); absent when none. */
  firstAbove?: number;
  lastAbove?: number;
}

/** Reads a timeline of [time, count] changes (in time order) against `limit`, up to `until`. */
export function excessOver(
  timeline: ReadonlyArray<readonly [number, number]>,
  limit: number,
  until: number,
): Excess {
  let peak = 0;
  let msAbove = 0;
  let since: number | undefined;
  let firstAbove: number | undefined;
  let lastAbove: number | undefined;
  for (const [at, current] of timeline) {
    peak = Math.max(peak, current);
    if (current > limit && since === undefined) {
      since = at;
      firstAbove ??= at;
    } else if (current <= limit && since !== undefined) {
      msAbove += at - since;
      lastAbove = at;
      since = undefined;
    }
  }
  if (since !== undefined) {
    msAbove += Math.max(0, until - since);
    lastAbove = until;
  }
  return { peak, msAbove, ...(firstAbove !== undefined ? { firstAbove, lastAbove } : {}) };
}

export interface UpstreamOptions {
  /**
   * Bearer key → channel id: a request belongs to the channel its key names. A request with another key is
   * answered 401 and listed in `bad`. Without this option, channels are told apart by path (`url(channel)`).
   */
  keys?: Readonly<Record<string, string>>;
  /** The answer of a channel that has no handler of its own (see `on`). @default 200 `{"channel": <id>}` */
  reply?: Handler;
  /** Keep every request in its channel's record; off for load runs, where only the counts matter. @default true */
  keepRequests?: boolean;
  /** @default 5000 */
  keepAliveTimeoutMs?: number;
  /** Keep each channel's `timeline` of in-flight counts (see `excess`). @default false */
  timeline?: boolean;
}

/** The base URL of `channel` on an upstream at `origin`, when channels are told apart by path. */
export const channelUrl = (origin: string, channel: string): string =>
  `${origin}/c/${encodeURIComponent(channel)}`;

/** An SSE `data:` event for an OpenAI-style chunk. */
export const sseData = (obj: unknown): string => `data: ${JSON.stringify(obj)}\n\n`;

/** A promise with its resolve function, for gating an upstream until the test says so. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

const defaultReply: Handler = (request) => ({ json: { channel: request.channel } });

/** Resolves after `ms`, or as soon as `res` closes. */
function pause(ms: number, res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      res.off('close', stop);
      resolve();
    }, ms);
    const stop = () => {
      clearTimeout(timer);
      resolve();
    };
    res.once('close', stop);
  });
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.once('end', () => resolve(Buffer.concat(chunks)));
    req.once('error', reject);
  });
}

export class FakeUpstream {
  /** Requests the upstream could not attribute to a channel, or whose handler threw. */
  readonly bad: string[] = [];
  private readonly handlers = new Map<string, Handler>();
  private readonly records = new Map<string, ChannelRecord>();
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly port: number,
    private readonly options: UpstreamOptions,
  ) {}

  static async start(options: UpstreamOptions = {}): Promise<FakeUpstream> {
    const server = createServer();
    server.keepAliveTimeout = options.keepAliveTimeoutMs ?? 5000;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const upstream = new FakeUpstream(server, (server.address() as AddressInfo).port, options);
    server.on('connection', (socket) => {
      upstream.sockets.add(socket);
      socket.once('close', () => upstream.sockets.delete(socket));
    });
    server.on('request', (req, res) => void upstream.serve(req, res));
    return upstream;
  }

  /** `http://127.0.0.1:<port>`: the base URL of every channel with the `keys` option. */
  get origin(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** The base URL of a channel told apart by path. */
  url(channel: string): string {
    return channelUrl(this.origin, channel);
  }

  /** Programs a channel, or one path of a channel. */
  on(channel: string, handler: Handler, path?: string): this {
    this.handlers.set(path ? `${channel} ${path}` : channel, handler);
    return this;
  }

  record(channel: string): ChannelRecord {
    let record = this.records.get(channel);
    if (!record) {
      record = { current: 0, max: 0, received: 0, requests: [], timeline: [] };
      this.records.set(channel, record);
    }
    return record;
  }

  requests(channel: string): ReceivedRequest[] {
    return this.record(channel).requests;
  }

  /** The channels that have a record (every channel that received a request). */
  channels(): string[] {
    return [...this.records.keys()];
  }

  /** The highest number in flight at once, per channel. */
  highest(): Record<string, number> {
    return Object.fromEntries([...this.records].map(([id, r]) => [id, r.max]));
  }

  /**
   * How far and for how long `channel` went over `limit` in flight, up to `until` (performance.now(); the changes
   * after it are left out); needs the `timeline` option.
   */
  excess(channel: string, limit: number, until = performance.now()): Excess {
    if (!this.options.timeline) throw new Error('excess() needs the upstream started with `timeline: true`');
    const timeline = this.record(channel).timeline.filter(([at]) => at <= until);
    return excessOver(timeline, limit, until);
  }

  /** Requests received on every channel. */
  total(): number {
    let n = 0;
    for (const r of this.records.values()) n += r.received;
    return n;
  }

  /** Forgets every handler, record and bad request (between the tests of one file sharing one upstream). */
  reset(): void {
    this.handlers.clear();
    this.records.clear();
    this.bad.length = 0;
  }

  /** Every request received, on every channel. */
  all(): ReceivedRequest[] {
    return [...this.records.values()].flatMap((r) => r.requests);
  }

  private attribute(req: IncomingMessage): { channel: string; path: string } | undefined {
    const { keys } = this.options;
    if (keys) {
      const key = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
      const channel = key === undefined ? undefined : keys[key];
      return channel === undefined ? undefined : { channel, path: (req.url ?? '/').replace(/\?.*$/, '') };
    }
    const m = /^\/c\/([^/]+)(\/[^?]*)/.exec(req.url ?? '');
    return m ? { channel: decodeURIComponent(m[1]!), path: m[2]! } : undefined;
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const attributed = this.attribute(req);
    if (!attributed) {
      req.resume();
      const keyed = this.options.keys !== undefined;
      this.bad.push(`${req.method} ${req.url}: ${keyed ? 'unknown key' : 'not a channel path'}`);
      res.writeHead(keyed ? 401 : 404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: keyed ? 'unknown key' : 'not a channel path' } }));
      return;
    }
    const { channel, path } = attributed;
    const record = this.record(channel);
    const receivedAt = performance.now();
    record.current++;
    record.received++;
    record.max = Math.max(record.max, record.current);
    if (this.options.timeline) record.timeline.push([receivedAt, record.current]);
    let inFlight = true;
    const countOut = () => {
      if (!inFlight) return;
      inFlight = false;
      record.current--;
      received.endedAt = performance.now();
      if (this.options.timeline) record.timeline.push([received.endedAt, record.current]);
    };
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
      receivedAt,
    };
    if (this.options.keepRequests !== false) record.requests.push(received);
    res.once('close', () => {
      countOut(); // a connection the gateway tore down early is no longer in flight either
      received.finished = res.writableFinished;
      received.aborted = !res.writableFinished;
      closed();
    });
    const done = received.done;

    const handler =
      this.handlers.get(`${channel} ${path}`) ??
      this.handlers.get(channel) ??
      this.options.reply ??
      defaultReply;
    if (typeof handler === 'function' || this.options.keepRequests !== false) {
      const body = await Promise.race([readBody(req).catch(() => undefined), done.then(() => undefined)]);
      if (body === undefined) return; // the gateway went away while sending the body
      received.body = body;
    } else {
      req.resume(); // nobody looks at the body
    }
    let reply: Reply;
    try {
      reply = typeof handler === 'function' ? await handler(received) : handler;
    } catch (err) {
      this.bad.push(
        `${req.method} ${req.url} on ${channel}: ${err instanceof Error ? err.message : String(err)}`,
      );
      countOut();
      res.writeHead(500).end();
      return;
    }
    if (reply.delayMs) await pause(reply.delayMs, res);
    if (res.destroyed) return;

    const status = reply.status ?? 200;
    if (reply.sse) {
      res.writeHead(status, {
        'content-type': 'text/event-stream',
        'cache-control': 'no-cache',
        ...reply.headers,
      });
      res.flushHeaders();
      const parts = reply.sse;
      let first = true;
      for (const [i, part] of parts.entries()) {
        if (res.destroyed) return;
        if (typeof part === 'function') {
          await Promise.race([part(), done]);
          continue;
        }
        if (!first && reply.chunkDelayMs) await pause(reply.chunkDelayMs, res);
        first = false;
        if (res.destroyed) return;
        if (i < parts.length - 1) {
          res.write(part);
        } else {
          countOut();
          res.end(part);
          return;
        }
      }
      if (res.destroyed) return;
      countOut();
      res.end();
      return;
    }
    countOut();
    res.writeHead(status, { 'content-type': 'application/json', ...reply.headers });
    res.end(reply.json !== undefined ? JSON.stringify(reply.json) : (reply.body ?? ''));
  }

  async close(): Promise<void> {
    const closing = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const socket of this.sockets) socket.destroy();
    await closing;
  }
}

/** The text of chunk i of a streamed `chatAnswer`; tests rebuild the whole text to check nothing was lost. */
export const chunkText = (i: number): string => `c${i} `;

/**
 * An OpenAI-shaped answer to `POST …/chat/completions` (anything else throws, so it is listed in `bad`): with
 * `"stream": true` in the body, `chunks` content chunks each after `chunkDelayMs`, then `data: [DONE]`; otherwise a
 * chat.completion saying `hello from <channel>` after `holdMs`.
 */
export function chatAnswer(opts: { holdMs: number; chunks: number; chunkDelayMs: number }): Handler {
  let n = 0;
  return (request) => {
    if (request.method !== 'POST' || !request.path.endsWith('/chat/completions')) {
      throw new Error('not a chat completion');
    }
    const body = JSON.parse(request.body.toString('utf8')) as { stream?: unknown; model?: unknown };
    const id = `chatcmpl-${request.channel}-${++n}`;
    if (body.stream !== true) {
      const message = { role: 'assistant', content: `hello from ${request.channel}` };
      return {
        delayMs: opts.holdMs,
        json: { id, object: 'chat.completion', model: body.model, choices: [{ index: 0, message }] },
      };
    }
    const pause = () => sleep(opts.chunkDelayMs);
    const chunk = (i: number) =>
      sseData({
        id,
        object: 'chat.completion.chunk',
        model: body.model,
        choices: [{ index: 0, delta: { content: chunkText(i) }, finish_reason: null }],
      });
    return {
      sse: [...Array.from({ length: opts.chunks }, (_, i) => [pause, chunk(i)]).flat(), 'data: [DONE]\n\n'],
    };
  };
}
