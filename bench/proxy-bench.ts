/**
 * `npm run bench:proxy`: slotgate, a minimal Node proxy and a Fastify + undici pass-through (the gateway's stack, none
 * of its work) before one local upstream, each in its own process (proxy-node.ts). Throughput: autocannon, the median
 * of the rounds. Low load: one connection, requests interleaved in blocks of 50 so a busy machine slows all alike.
 */
import { Agent, request } from 'node:http';
import os from 'node:os';
import autocannon from 'autocannon';
import { forkChild } from './children.js';
import { columns, fmt } from './format.js';
import { percentile } from './load.js';

export type NodeSpec =
  | { role: 'upstream'; delayMs: number; chunks: number }
  | { role: 'minimal' | 'fastify'; target: string }
  | { role: 'slotgate'; target: string; maxConcurrency: number; redisUrl?: string }
  | {
      role: 'gateway';
      target: string;
      redisUrl: string;
      namespace: string;
      channels: string[];
      max: number;
      cache: boolean;
    };

/** The client token slotgate's contender accepts; every contender is sent it. */
export const CLIENT_TOKEN = 'bench-client-token';
export const MODEL = 'bench-model';
const PATH = '/v1/chat/completions';
/** slotgate's bounded channel: high enough that the load never fills it (what is measured is the cost, not waits). */
const BOUNDED_MAX = 1000;
const DIRECT = 'direct to the upstream';
const MINIMAL = 'minimal Node proxy';
const FASTIFY = 'Fastify + undici pass-through';

export type Mode = 'json' | 'stream';
export const MODES: readonly Mode[] = ['json', 'stream'];

/** The defaults are in runProxyBench; proxy-overhead.ts lists them. */
export interface ProxyBenchOptions {
  connections?: number;
  /** Measured seconds per contender and mode. */
  durationS?: number;
  warmupS?: number;
  rounds?: number;
  /** Sequential requests per contender and mode at low load. */
  lowRequests?: number;
  /** The upstream's time to its answer (JSON) or first chunk (SSE). */
  upstreamDelayMs?: number;
  /** SSE chunks in a streamed answer, each in its own event-loop turn. */
  chunks?: number;
  /** Also measure slotgate with an unlimited channel (max_concurrency 0). */
  unlimited?: boolean;
  /** slotgate's store: this Redis instead of the embedded one. */
  redisUrl?: string;
  progress?: (line: string) => void;
}

export interface ThroughputRow {
  contender: string;
  mode: Mode;
  requestsPerS: number;
  p50Ms: number;
  p99Ms: number;
  failed: number;
  /** The contender's own process CPU (user + system) per answered request, µs. */
  cpuUsPerRequest?: number;
}

export interface LatencyRow {
  contender: string;
  mode: Mode;
  /** Of the answers with status 200. */
  p50Ms: number;
  p99Ms: number;
  requests: number;
  failed: number;
}

export interface ProxyBenchResult {
  parameters: string;
  throughput: ThroughputRow[];
  latency: LatencyRow[];
}

interface Contender {
  label: string;
  url: string;
  /** The CPU its process has used so far, µs. */
  cpuUs?(): Promise<number>;
  close(): Promise<void>;
}

const HEADERS = { authorization: `Bearer ${CLIENT_TOKEN}`, 'content-type': 'application/json' };

const bodyOf = (mode: Mode): string =>
  JSON.stringify({ model: MODEL, stream: mode === 'stream', messages: [{ role: 'user', content: 'hi' }] });

/** A server of proxy-node.ts in its own process: its URL, a request-reply on its channel, and how to stop it. */
export async function startNode(spec: NodeSpec) {
  const child = forkChild('proxy-node');
  try {
    child.send({ type: 'start', spec });
    const { url } = await child.next<{ url: string }>('listening', 30_000);
    return {
      url,
      async ask<T>(type: string): Promise<T> {
        child.send({ type });
        return child.next<T>(type, 10_000);
      },
      async close() {
        child.send({ type: 'stop' });
        await child.next('stopped', 10_000).catch(() => {});
        await child.kill();
      },
    };
  } catch (err) {
    await child.kill();
    throw err;
  }
}

async function forkedContender(label: string, spec: NodeSpec): Promise<Contender> {
  const node = await startNode(spec);
  const cpuUs = async () => (await node.ask<{ micros: number }>('cpu')).micros;
  return { label, url: node.url, cpuUs, close: node.close };
}

const cannon = (c: Contender, mode: Mode, connections: number, duration: number) =>
  autocannon({
    url: c.url + PATH,
    method: 'POST',
    headers: HEADERS,
    body: bodyOf(mode),
    connections,
    duration,
    timeout: 10,
  });

/** One POST on `agent`, timed from the request to the last byte of the answer; undefined unless it was a 200. */
function timedRequest(agent: Agent, c: Contender, mode: Mode): Promise<number | undefined> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const req = request(c.url + PATH, { method: 'POST', headers: HEADERS, agent }, (res) => {
      res.resume();
      res.once('end', () => resolve(res.statusCode === 200 ? performance.now() - t0 : undefined));
      res.once('error', () => resolve(undefined));
    });
    req.once('error', () => resolve(undefined));
    req.end(bodyOf(mode));
  });
}

export async function runProxyBench(options: ProxyBenchOptions = {}): Promise<ProxyBenchResult> {
  const { connections = 50, durationS = 5, warmupS = 2, rounds = 1, lowRequests = 400, chunks = 5 } = options;
  const delayMs = options.upstreamDelayMs ?? 5;
  const progress = options.progress ?? (() => {});
  const loadBefore = os.loadavg()[0]!;
  const upstream = await startNode({ role: 'upstream', delayMs, chunks });
  const contenders: Contender[] = [];
  try {
    const store = options.redisUrl ? 'Redis' : 'embedded store';
    const target = upstream.url;
    const redis = options.redisUrl ? { redisUrl: options.redisUrl } : {};
    const specs: [string, NodeSpec][] = [
      [MINIMAL, { role: 'minimal', target }],
      [FASTIFY, { role: 'fastify', target }],
      [
        `slotgate, bounded channel (max ${BOUNDED_MAX}, ${store})`,
        { role: 'slotgate', target, maxConcurrency: BOUNDED_MAX, ...redis },
      ],
    ];
    if (options.unlimited ?? true)
      specs.push(['slotgate, unlimited channel', { role: 'slotgate', target, maxConcurrency: 0 }]);
    // started together (tsx compiles each child), kept in order as each one is up, so every one is closed
    const started = await Promise.allSettled(specs.map(([label, spec]) => forkedContender(label, spec)));
    for (const s of started) if (s.status === 'fulfilled') contenders.push(s.value);
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;

    // 1. throughput: the median of the rounds
    const samples = new Map<string, ThroughputRow[]>();
    for (let round = 1; round <= rounds; round++) {
      for (const mode of MODES) {
        for (const c of contenders) {
          progress(`round ${round}/${rounds}, ${mode}: ${c.label}`);
          if (warmupS > 0) await cannon(c, mode, connections, warmupS);
          const cpuBefore = await c.cpuUs?.();
          const r = await cannon(c, mode, connections, durationS);
          const cpuAfter = await c.cpuUs?.();
          const ok = r['2xx'];
          const cpu = cpuBefore !== undefined && cpuAfter !== undefined && ok > 0;
          const key = `${c.label}\0${mode}`;
          samples.set(key, [
            ...(samples.get(key) ?? []),
            {
              contender: c.label,
              mode,
              requestsPerS: ok / r.duration,
              p50Ms: r.latency.p50,
              p99Ms: r.latency.p99,
              failed: r.non2xx + r.errors,
              cpuUsPerRequest: cpu ? (cpuAfter - cpuBefore) / ok : undefined,
            },
          ]);
        }
      }
    }
    const throughput = [...samples.values()].map(
      (runs) => [...runs].sort((a, b) => a.requestsPerS - b.requestsPerS)[Math.floor(runs.length / 2)]!,
    );

    // 2. low load: one connection per target, blocks of 50 interleaved across the targets
    const targets: Contender[] = [{ label: DIRECT, url: upstream.url, close: async () => {} }, ...contenders];
    const latency: LatencyRow[] = [];
    for (const mode of MODES) {
      progress(`low load, ${mode}`);
      const agents = targets.map(() => new Agent({ keepAlive: true, maxSockets: 1 }));
      const times: number[][] = targets.map(() => []);
      const failures = targets.map(() => 0);
      try {
        for (const [i, t] of targets.entries()) {
          for (let k = 0; k < Math.min(50, lowRequests); k++) await timedRequest(agents[i]!, t, mode);
        }
        for (let done = 0; done < lowRequests; done += 50) {
          for (const [i, t] of targets.entries()) {
            for (let k = 0; k < Math.min(50, lowRequests - done); k++) {
              const ms = await timedRequest(agents[i]!, t, mode);
              if (ms === undefined) failures[i]!++;
              else times[i]!.push(ms);
            }
          }
        }
      } finally {
        for (const agent of agents) agent.destroy();
      }
      for (const [i, t] of targets.entries()) {
        const sorted = times[i]!.sort((a, b) => a - b);
        const failed = failures[i]!;
        const [p50Ms, p99Ms] = [percentile(sorted, 0.5), percentile(sorted, 0.99)];
        latency.push({ contender: t.label, mode, p50Ms, p99Ms, requests: sorted.length + failed, failed });
      }
    }

    const loadAfter = os.loadavg()[0]!;
    const parameters =
      `Upstream on 127.0.0.1 answering after ${delayMs} ms (JSON; or ${chunks} SSE chunks, each in its own ` +
      `event-loop turn, then [DONE]); upstream, each contender and the load generator in separate processes. ` +
      `Throughput: autocannon ${connections} connections, ${warmupS} s warm-up then ${durationS} s per contender ` +
      `and mode, ${rounds} round(s) (median round shown); CPU µs per request: each contender's own process ` +
      `(user + system, all threads) over that run, per answered request. Low load: 1 connection, ${lowRequests} ` +
      `sequential requests per contender and mode after ${Math.min(50, lowRequests)} warm-up, interleaved in blocks ` +
      `of 50. slotgate: one openai channel, ${store}, logger off; the minimal proxy and the Fastify + undici ` +
      `pass-through (the gateway's own HTTP stack with none of its work) log nothing either. Machine: ` +
      `${os.cpus().length} × ${os.cpus()[0]?.model.trim()}, Node ${process.version}; 1-minute load average ` +
      `${fmt(loadBefore, 1)} at the start, ${fmt(loadAfter, 1)} at the end` +
      (Math.max(loadBefore, loadAfter) > os.cpus().length
        ? ' (above the core count: other work shared the machine).'
        : '.');
    return { parameters, throughput, latency };
  } finally {
    await Promise.all([...contenders.map((c) => c.close()), upstream.close()]);
  }
}

/** The result as markdown: parameters and the two tables. */
export function proxyBenchReport(r: ProxyBenchResult): string {
  const find = <R extends { contender: string; mode: Mode }>(rows: readonly R[], who: string, mode: Mode) =>
    rows.find((x) => x.contender === who && x.mode === mode);
  const ratio = (row: ThroughputRow, who: string) => {
    const base = find(r.throughput, who, row.mode);
    return base ? fmt(row.requestsPerS / base.requestsPerS, 2) : '–';
  };
  const addedP50 = (row: ThroughputRow) => {
    const floor = find(r.throughput, MINIMAL, row.mode);
    return floor ? fmt(row.p50Ms - floor.p50Ms, 0) : '–';
  };
  const throughput = columns(r.throughput, [
    ['contender', (row) => row.contender],
    ['mode', (row) => row.mode],
    ['requests/s', (row) => fmt(row.requestsPerS, 0)],
    ['p50 ms', (row) => fmt(row.p50Ms, 0)],
    ['p99 ms', (row) => fmt(row.p99Ms, 0)],
    ['failed', (row) => row.failed],
    ['× minimal proxy', (row) => ratio(row, MINIMAL)],
    ['× Fastify + undici', (row) => ratio(row, FASTIFY)],
    ['added p50 ms', addedP50],
    ['CPU µs per request', (row) => (row.cpuUsPerRequest === undefined ? '–' : fmt(row.cpuUsPerRequest, 0))],
  ]);
  const over = (row: LatencyRow, who: string) => {
    const base = find(r.latency, who, row.mode);
    return base && row !== base && row.contender !== DIRECT ? fmt(row.p50Ms - base.p50Ms, 3) : '–';
  };
  const low = columns(r.latency, [
    ['at low load (1 connection)', (row) => row.contender],
    ['mode', (row) => row.mode],
    ['p50 ms', (row) => fmt(row.p50Ms, 3)],
    ['p99 ms', (row) => fmt(row.p99Ms, 3)],
    ['failed', (row) => row.failed],
    ['added p50 ms over direct', (row) => over(row, DIRECT)],
    ['over minimal proxy', (row) => over(row, MINIMAL)],
  ]);
  return [`# slotgate beside a minimal proxy`, '', r.parameters, '', throughput, '', low].join('\n');
}
