/**
 * The fleet and the load of the chaos tests: several `slotgate serve` processes on one prefix of one Redis (each may
 * reach it through its own URL, e.g. a TcpProxy), two channels on one counting upstream (told apart by their keys),
 * and streaming clients that ask again and again until told to stop, each outcome recorded.
 *
 * Each client names its gateway in its `user-agent`, which the gateway passes on, so the upstream can tell which
 * gateway a request came through.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { chatAnswer, chunkText, FakeUpstream } from './fake-upstream.js';
import { spawnGateway, tempDir, writeConfig, type GwProcess } from './gw-gateway.js';

export const CLIENT_TOKEN = 'sk-client-chaos-test';
export const MODEL = 'gpt-chaos';
/** Upstream key → channel id: the upstream counts in flight per key. */
export const CHANNEL_KEYS = { 'sk-upstream-chaos-a': 'ch-a', 'sk-upstream-chaos-b': 'ch-b' } as const;
export const CHANNELS = Object.values(CHANNEL_KEYS);

export const userAgent = (gateway: number): string => `slotgate-chaos/g${gateway}`;

export interface FleetOptions {
  /** The Redis URL of each gateway (one gateway per URL). */
  redisUrls: string[];
  prefix: string;
  maxConcurrency: number;
  /** Settings of every gateway (lease_ttl_ms, the wait queue …). */
  settings: Record<string, unknown>;
  redisTimeoutMs: number;
  /** Streamed answers: `chunks` chunks, one every `chunkDelayMs`. */
  chunks: number;
  chunkDelayMs: number;
  /** More keys of each gateway's `redis` section (e.g. `store_failure_mode`). */
  redis?: Record<string, unknown>;
  /** The admin token of every gateway (for /admin/status); none by default. */
  adminToken?: string;
}

export interface Fleet {
  upstream: FakeUpstream;
  gateways: GwProcess[];
  /** Kills every gateway, closes the upstream and removes the config files. */
  close(): Promise<void>;
}

export async function startFleet(opts: FleetOptions): Promise<Fleet> {
  const upstream = await FakeUpstream.start({
    keys: CHANNEL_KEYS,
    reply: chatAnswer({ holdMs: 0, chunks: opts.chunks, chunkDelayMs: opts.chunkDelayMs }),
    timeline: true,
  });
  const dir = await tempDir();
  const gateways: GwProcess[] = [];
  const close = async () => {
    await Promise.all(gateways.map((g) => g.kill()));
    await upstream.close();
    await dir.remove();
  };
  try {
    for (const [i, url] of opts.redisUrls.entries()) {
      const config = {
        server: { log_level: 'info', drain_timeout_ms: 0 }, // info: the listening line
        redis: { url, prefix: opts.prefix, timeout_ms: opts.redisTimeoutMs, ...opts.redis },
        ...(opts.adminToken !== undefined ? { admin: { token: opts.adminToken } } : {}),
        tokens: [{ key: CLIENT_TOKEN, name: 'chaos' }],
        channels: Object.entries(CHANNEL_KEYS).map(([key, id]) => ({
          id,
          type: 'openai',
          base_url: upstream.origin,
          key,
          models: [MODEL],
          max_concurrency: opts.maxConcurrency,
        })),
        settings: opts.settings,
      };
      const path = await writeConfig(dir.dir, `g${i}.yaml`, config);
      gateways.push(await spawnGateway({ configPath: path, readyTimeoutMs: 30_000 }));
    }
    await Promise.all(gateways.map((g) => g.ready));
  } catch (err) {
    await close();
    throw err;
  }
  return { upstream, gateways, close };
}

/** Resolves once `check` holds (polled every 20 ms); throws naming `what` after `ms`. */
export async function waitFor(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = performance.now() + ms;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(20);
  }
}

/**
 * Asks `url` for a (non-streamed) completion until one is answered 200; returns how many ms that took, or -1 if
 * none was within `ms` (and says on stderr what the last try got instead).
 */
export async function admitted(url: string, ms: number): Promise<number> {
  const started = performance.now();
  let last = 'no try';
  while (performance.now() - started < ms) {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${CLIENT_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'are you back?' }] }),
      signal: AbortSignal.timeout(Math.max(1, Math.ceil(ms - (performance.now() - started)))),
    }).catch((err: unknown) => {
      last = err instanceof Error ? err.message : String(err);
      return undefined;
    });
    if (res?.status === 200) {
      await res.body?.cancel();
      return performance.now() - started;
    }
    if (res) last = `${res.status} ${(await res.text().catch(() => '')).slice(0, 200)}`;
    await sleep(100);
  }
  console.warn(`${url}: no completion admitted within ${ms} ms; the last try got: ${last}`);
  return -1;
}

/** Every channel has `max` requests in flight at the upstream. */
export const channelsFull = (upstream: FakeUpstream, max: number): boolean =>
  CHANNELS.every((id) => upstream.record(id).current === max);

/** Requests in flight at the upstream now that came through gateway `i`. */
export function inFlightVia(upstream: FakeUpstream, i: number): number {
  return upstream.all().filter((r) => r.headers['user-agent'] === userAgent(i) && !r.finished && !r.aborted)
    .length;
}

/**
 * What became of one client request:
 * - `complete`: 200 and the whole stream, ending in `data: [DONE]`;
 * - `refused`: 429 or 503 before any byte of an answer;
 * - `stream_error`: 200, then an SSE error event (`event: error`, or a `data:` object with an `error`) instead of the
 *   rest of the stream;
 * - `broken`: the stream ended or the connection broke without [DONE] and without an error event;
 * - `hung`: nothing settled it within the request's deadline;
 * - `cancelled`: the load stopped it (a request begun after the fault, no longer needed);
 * - `unexpected`: any other status, or no answer at all.
 */
export type OutcomeKind =
  'complete' | 'refused' | 'stream_error' | 'broken' | 'hung' | 'cancelled' | 'unexpected';

export interface Outcome {
  gateway: number;
  kind: OutcomeKind;
  status: number;
  startedAt: number;
  /** When its 200 came, for a stream. */
  streamingAt?: number;
  endedAt: number;
  detail?: string;
}

const EXPECTED_STREAM = (chunks: number) => Array.from({ length: chunks }, (_, i) => chunkText(i)).join('');

function streamContent(text: string): string {
  return text
    .split('\n')
    .filter((l) => l.startsWith('data: {'))
    .map((l) => {
      const parsed = JSON.parse(l.slice(6)) as { choices?: [{ delta?: { content?: string } }] };
      return parsed.choices?.[0]?.delta?.content ?? '';
    })
    .join('');
}

export function hasSseError(text: string): boolean {
  return text.split('\n').some((l) => {
    if (l.startsWith('event: error')) return true;
    if (!l.startsWith('data: {')) return false;
    try {
      return 'error' in (JSON.parse(l.slice(6)) as object);
    } catch {
      return false;
    }
  });
}

export interface LoadOptions {
  chunks: number;
  /** A request not settled after this long is `hung`. */
  deadlineMs: number;
  /** Pause after an answer that was not a complete stream, plus up to as much again at random. */
  retryDelayMs: number;
}

/** Streaming clients, each asking its gateway again as soon as its last request is over, until `stop`. */
export class StreamingLoad {
  readonly outcomes: Outcome[] = [];
  private running = true;
  private readonly loops: Promise<void>[] = [];
  /** Requests in flight: when each began, and when its stream began (its 200 came). */
  private readonly inFlight = new Map<AbortController, { startedAt: number; streamingAt?: number }>();

  constructor(private readonly opts: LoadOptions) {}

  /** Starts `clients` clients on gateway `index`. */
  start(gateway: GwProcess, index: number, clients: number): void {
    for (let c = 0; c < clients; c++) this.loops.push(this.client(gateway, index));
  }

  /** Requests in flight at the client side. */
  get pending(): number {
    return this.inFlight.size;
  }

  /**
   * Starts no new request, and waits for those in flight to settle by themselves (each within its deadline), except
   * that it cancels the requests begun after `cancel.requestsFrom`, and the streams that began after
   * `cancel.streamsFrom` once their 200 has come (times on performance.now()). So a stream that was running at
   * `streamsFrom`, and a request begun by `requestsFrom`, always show how they end.
   */
  async stop(cancel: { streamsFrom: number; requestsFrom: number }): Promise<void> {
    this.running = false;
    let all = false;
    const settled = Promise.all(this.loops).then(() => (all = true));
    while (!all) {
      for (const [controller, r] of this.inFlight) {
        const lateStream = r.streamingAt !== undefined && r.streamingAt > cancel.streamsFrom;
        if (lateStream || r.startedAt > cancel.requestsFrom) controller.abort();
      }
      await Promise.race([settled, sleep(100)]);
    }
  }

  /** Cancels everything at once (cleanup after a failure). */
  async abortAll(): Promise<void> {
    this.running = false;
    for (const controller of this.inFlight.keys()) controller.abort();
    await Promise.all(this.loops);
  }

  count(kind: OutcomeKind, from = 0): number {
    return this.outcomes.filter((o) => o.kind === kind && o.startedAt >= from).length;
  }

  /** Outcomes counted per gateway, kind and status: { g0: { 'refused 503': 12, … }, … }. */
  tally(): Record<string, Record<string, number>> {
    const tally: Record<string, Record<string, number>> = {};
    for (const o of this.outcomes) {
      const per = (tally[`g${o.gateway}`] ??= {});
      const key = `${o.kind} ${o.status}`;
      per[key] = (per[key] ?? 0) + 1;
    }
    return tally;
  }

  private async client(gateway: GwProcess, index: number): Promise<void> {
    while (this.running) {
      const outcome = await this.once(gateway, index);
      this.outcomes.push(outcome);
      if (outcome.kind !== 'complete' && this.running) {
        await sleep(this.opts.retryDelayMs * (1 + Math.random()));
      }
    }
  }

  private async once(gateway: GwProcess, index: number): Promise<Outcome> {
    const controller = new AbortController();
    const startedAt = performance.now();
    const entry: { startedAt: number; streamingAt?: number } = { startedAt };
    this.inFlight.set(controller, entry);
    const timeout = AbortSignal.timeout(this.opts.deadlineMs);
    const signal = AbortSignal.any([controller.signal, timeout]);
    let status = 0;
    let text = '';
    const outcome = (kind: OutcomeKind, detail?: string): Outcome => ({
      gateway: index,
      kind,
      status,
      startedAt,
      ...(entry.streamingAt !== undefined ? { streamingAt: entry.streamingAt } : {}),
      endedAt: performance.now(),
      ...(detail !== undefined ? { detail } : {}),
    });
    try {
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${CLIENT_TOKEN}`,
          'content-type': 'application/json',
          'user-agent': userAgent(index),
        },
        body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
        signal,
      });
      status = res.status;
      if (status !== 200) {
        text = await res.text();
        return outcome(status === 429 || status === 503 ? 'refused' : 'unexpected', text.slice(0, 300));
      }
      entry.streamingAt = performance.now();
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
      }
      if (hasSseError(text)) return outcome('stream_error', text.slice(-300));
      const whole =
        streamContent(text) === EXPECTED_STREAM(this.opts.chunks) && text.trimEnd().endsWith('data: [DONE]');
      return outcome(whole ? 'complete' : 'broken', text.slice(-300));
    } catch (err) {
      if (controller.signal.aborted) return outcome('cancelled');
      if (timeout.aborted) return outcome('hung', text.slice(-300));
      if (status === 200) return outcome(hasSseError(text) ? 'stream_error' : 'broken', String(err));
      return outcome('unexpected', String(err));
    } finally {
      this.inFlight.delete(controller);
    }
  }
}
