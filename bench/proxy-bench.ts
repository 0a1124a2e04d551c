/**
 * `npm run bench:proxy`: what the gateway costs per request, beside the floor. slotgate (one instance, one OpenAI
 * channel), a minimal Node pass-through proxy (minimal-proxy.ts), the same pass-through on the gateway's own stack
 * (fastify-proxy.ts: Fastify and undici, none of slotgate's work) — plus Portkey's gateway when
 * `@portkey-ai/gateway` is installed — forward to the same local upstream, which answers after `upstreamDelayMs`.
 * Each of the upstream and the contenders runs in a process of its own (proxy-node.ts); the load comes from this one.
 *
 * 1. Throughput: autocannon, `connections` keep-alive connections for `durationS` after a `warmupS` warm-up on every
 *    contender and mode (non-streaming JSON, streaming SSE), in the same order, `rounds` times; the median round counts.
 * 2. Low load: one connection, `lowRequests` sequential requests per contender and mode (after up to 50 warm-up),
 *    interleaved in blocks of 50 across the contenders so a busy machine slows them alike, timed with
 *    performance.now() (autocannon's histogram has whole-millisecond buckets). "direct" is the upstream itself.
 *
 * Targets: slotgate's requests/s ≥ 0.95 × the minimal proxy's in each mode, and its added p50 at low load ≤ 1 ms,
 * judged both over going direct (the whole extra hop) and over the minimal proxy (slotgate's own part).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import os from 'node:os';
import autocannon from 'autocannon';
import { forkChild, type Child } from './children.js';
import { percentile } from './load.js';
import { fmt } from './report.js';
import { freePort } from '../test/helpers/redis-server.js';

export type NodeSpec =
  | { role: 'upstream'; delayMs: number; chunks: number }
  | { role: 'minimal'; target: string }
  | { role: 'fastify'; target: string }
  | { role: 'slotgate'; target: string; maxConcurrency: number; redisUrl?: string };

/** The client token slotgate's contender accepts; every contender is sent it. */
export const CLIENT_TOKEN = 'bench-client-token';
export const MODEL = 'bench-model';
const PATH = '/v1/chat/completions';
/** slotgate's bounded channel: high enough that the load never fills it (what is measured is the cost, not waits). */
const BOUNDED_MAX = 1000;

export type Mode = 'json' | 'stream';
export const MODES: readonly Mode[] = ['json', 'stream'];

export interface ProxyBenchOptions {
  /** autocannon connections. @default 50 */
  connections?: number;
  /** Measured seconds per contender and mode. @default 5 */
  durationS?: number;
  /** Warm-up seconds before each measured run (discarded). @default 2 */
  warmupS?: number;
  /** Throughput rounds over every contender; the median counts. @default 1 */
  rounds?: number;
  /** Sequential requests per contender and mode at low load. @default 400 */
  lowRequests?: number;
  /** The upstream's time to its answer (JSON) or first chunk (SSE). @default 5 */
  upstreamDelayMs?: number;
  /** SSE chunks in a streamed answer, each written in its own event-loop turn, then `[DONE]`. @default 5 */
  chunks?: number;
  /** Also measure slotgate with an unlimited channel (max_concurrency 0). @default true */
  unlimited?: boolean;
  /** slotgate's store: this Redis instead of the embedded one. */
  redisUrl?: string;
  /** Progress lines. @default none */
  progress?: (line: string) => void;
}

export interface ThroughputRow {
  contender: string;
  mode: Mode;
  requestsPerS: number;
  p50Ms: number;
  p99Ms: number;
  /** Non-2xx answers and connection errors in the median round. */
  failed: number;
  /**
   * The contender's own CPU time (user + system, every thread of its process) per answered request in that round, in
   * µs; undefined when its process cannot be asked (Portkey's).
   */
  cpuUsPerRequest?: number;
}

export interface LatencyRow {
  contender: string;
  mode: Mode;
  /** Of the answers with status 200 (NaN when none was). */
  p50Ms: number;
  p99Ms: number;
  requests: number;
  /** Answers with another status, or requests that failed. */
  failed: number;
}

export interface Target {
  target: string;
  value: string;
  verdict: 'PASS' | 'MISS';
}

export interface ProxyBenchResult {
  parameters: string;
  throughput: ThroughputRow[];
  latency: LatencyRow[];
  targets: Target[];
  notes: string[];
}

interface Contender {
  label: string;
  url: string;
  headers: Record<string, string>;
  /** The CPU time its process has used so far, in µs (process.cpuUsage()). */
  cpuUs?(): Promise<number>;
  close(): Promise<void>;
}

const BASE_HEADERS = { authorization: `Bearer ${CLIENT_TOKEN}`, 'content-type': 'application/json' };

const bodyOf = (mode: Mode): string =>
  JSON.stringify({ model: MODEL, stream: mode === 'stream', messages: [{ role: 'user', content: 'hi' }] });

async function startNode(spec: NodeSpec): Promise<{ url: string; child: Child }> {
  const child = forkChild('proxy-node');
  try {
    child.send({ type: 'start', spec });
    const { url } = await child.next<{ url: string }>('listening', 30_000);
    return { url, child };
  } catch (err) {
    await child.kill();
    throw err;
  }
}

async function stopNode(child: Child): Promise<void> {
  child.send({ type: 'stop' });
  await child.next('stopped', 10_000).catch(() => {});
  await child.kill();
}

async function forkedContender(label: string, spec: NodeSpec): Promise<Contender> {
  const { url, child } = await startNode(spec);
  const cpuUs = async () => {
    child.send({ type: 'cpu' });
    return (await child.next<{ micros: number }>('cpu', 10_000)).micros;
  };
  return { label, url, headers: BASE_HEADERS, cpuUs, close: () => stopNode(child) };
}

/** Where `@portkey-ai/gateway`'s server script is, when the package is installed (it is never a dependency). */
export function findPortkey(): { script: string; version: string } | undefined {
  const require = createRequire(import.meta.url);
  let pkgPath: string;
  try {
    pkgPath = require.resolve('@portkey-ai/gateway/package.json');
  } catch {
    try {
      // a package whose exports hide package.json: its entry point, then up to its root
      let dir = dirname(require.resolve('@portkey-ai/gateway'));
      while (!readFileSync(join(dir, 'package.json'), 'utf8').includes('"@portkey-ai/gateway"'))
        dir = dirname(dir);
      pkgPath = join(dir, 'package.json');
    } catch {
      return undefined;
    }
  }
  const pkg = JSON.parse(readFileSync(pkgPath, 'utf8')) as {
    version: string;
    bin?: string | Record<string, string>;
    main?: string;
  };
  const bin = typeof pkg.bin === 'string' ? pkg.bin : Object.values(pkg.bin ?? {})[0];
  const entry = bin ?? pkg.main;
  return entry ? { script: join(dirname(pkgPath), entry), version: pkg.version } : undefined;
}

/** Resolves once something accepts a request at `url` (any status), or rejects after `timeoutMs`. */
async function waitForHttp(url: string, proc: ChildProcess, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`exited with code ${proc.exitCode}`);
    const answered = await fetch(url).then(
      () => true,
      () => false,
    );
    if (answered) return;
    if (Date.now() > deadline) throw new Error(`nothing answered at ${url} within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Portkey's gateway (its own Node server script) routing to the upstream as an OpenAI custom host. */
async function portkeyContender(
  found: { script: string; version: string },
  upstreamUrl: string,
): Promise<Contender> {
  const port = await freePort();
  const proc = spawn(process.execPath, [found.script, `--port=${port}`, '--headless'], { stdio: 'ignore' });
  const close = async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((resolve) => proc.once('exit', resolve));
    proc.kill('SIGKILL');
    await exited;
  };
  try {
    await waitForHttp(`http://127.0.0.1:${port}/`, proc);
  } catch (err) {
    await close();
    throw new Error(`Portkey's gateway (${found.script}) did not start: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return {
    label: `Portkey gateway ${found.version}`,
    url: `http://127.0.0.1:${port}`,
    headers: {
      ...BASE_HEADERS,
      'x-portkey-provider': 'openai',
      'x-portkey-custom-host': `${upstreamUrl}/v1`,
    },
    close,
  };
}

async function cannon(c: Contender, mode: Mode, connections: number, durationS: number) {
  return autocannon({
    url: c.url + PATH,
    method: 'POST',
    headers: c.headers,
    body: bodyOf(mode),
    connections,
    duration: durationS,
    timeout: 10,
  });
}

/** One POST on `agent`, timed from the request to the last byte of the answer; undefined unless it was a 200. */
function timedRequest(agent: Agent, c: Contender, mode: Mode): Promise<number | undefined> {
  const body = bodyOf(mode);
  return new Promise((resolve) => {
    const t0 = performance.now();
    const req = request(c.url + PATH, { method: 'POST', headers: c.headers, agent }, (res) => {
      res.resume();
      res.once('end', () => resolve(res.statusCode === 200 ? performance.now() - t0 : undefined));
      res.once('error', () => resolve(undefined));
    });
    req.once('error', () => resolve(undefined));
    req.end(body);
  });
}

export async function runProxyBench(options: ProxyBenchOptions = {}): Promise<ProxyBenchResult> {
  const connections = options.connections ?? 50;
  const durationS = options.durationS ?? 5;
  const warmupS = options.warmupS ?? 2;
  const rounds = options.rounds ?? 1;
  const lowRequests = options.lowRequests ?? 400;
  const delayMs = options.upstreamDelayMs ?? 5;
  const chunks = options.chunks ?? 5;
  const progress = options.progress ?? (() => {});
  const notes: string[] = [];
  const loadBefore = os.loadavg()[0]!;

  const upstream = await startNode({ role: 'upstream', delayMs, chunks });
  const direct: Contender = {
    label: 'direct to the upstream',
    url: upstream.url,
    headers: BASE_HEADERS,
    close: async () => {},
  };
  const contenders: Contender[] = [];
  try {
    const store = options.redisUrl ? 'Redis' : 'embedded store';
    const specs: [string, NodeSpec][] = [
      ['minimal Node proxy', { role: 'minimal', target: upstream.url }],
      [FASTIFY, { role: 'fastify', target: upstream.url }],
      [
        `slotgate, bounded channel (max ${BOUNDED_MAX}, ${store})`,
        {
          role: 'slotgate',
          target: upstream.url,
          maxConcurrency: BOUNDED_MAX,
          ...(options.redisUrl ? { redisUrl: options.redisUrl } : {}),
        },
      ],
    ];
    if (options.unlimited ?? true) {
      specs.push([
        'slotgate, unlimited channel',
        { role: 'slotgate', target: upstream.url, maxConcurrency: 0 },
      ]);
    }
    // started together (tsx compiles each child), pushed in order as each one is up, so every one is closed
    const started = await Promise.allSettled(specs.map(([label, spec]) => forkedContender(label, spec)));
    for (const s of started) if (s.status === 'fulfilled') contenders.push(s.value);
    const failed = started.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    const portkey = findPortkey();
    if (portkey) {
      contenders.push(await portkeyContender(portkey, upstream.url));
      notes.push(
        `Portkey gateway ${portkey.version}: its own server script (\`--port=N --headless\`), sent ` +
          '`x-portkey-provider: openai` and `x-portkey-custom-host: <upstream>/v1` on top of the common headers.',
      );
    } else
      notes.push(
        'Portkey gateway: not measured (`@portkey-ai/gateway` is not installed; it is never a dependency).',
      );

    // 1. throughput
    const samples = new Map<string, ThroughputRow[]>();
    for (let round = 1; round <= rounds; round++) {
      for (const mode of MODES) {
        for (const c of contenders) {
          progress(`round ${round}/${rounds}, ${mode}: ${c.label}`);
          if (warmupS > 0) await cannon(c, mode, connections, warmupS);
          const cpuBefore = await c.cpuUs?.();
          const r = await cannon(c, mode, connections, durationS);
          const cpuAfter = await c.cpuUs?.();
          const key = `${c.label}\0${mode}`;
          samples.set(key, [
            ...(samples.get(key) ?? []),
            {
              contender: c.label,
              mode,
              requestsPerS: r['2xx'] / r.duration,
              p50Ms: r.latency.p50,
              p99Ms: r.latency.p99,
              failed: r.non2xx + r.errors,
              ...(cpuBefore !== undefined && cpuAfter !== undefined && r['2xx'] > 0
                ? { cpuUsPerRequest: (cpuAfter - cpuBefore) / r['2xx'] }
                : {}),
            },
          ]);
        }
      }
    }
    const throughput = [...samples.values()].map((runs) => {
      const sorted = [...runs].sort((a, b) => a.requestsPerS - b.requestsPerS);
      return sorted[Math.floor(sorted.length / 2)]!;
    });

    // 2. low load: one connection per target, blocks of 50 interleaved across the targets
    const targets = [direct, ...contenders];
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
          const block = Math.min(50, lowRequests - done);
          for (const [i, t] of targets.entries()) {
            for (let k = 0; k < block; k++) {
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
        latency.push({
          contender: t.label,
          mode,
          p50Ms: percentile(sorted, 0.5),
          p99Ms: percentile(sorted, 0.99),
          requests: sorted.length + failures[i]!,
          failed: failures[i]!,
        });
      }
    }

    const parameters =
      `Upstream on 127.0.0.1 answering after ${delayMs} ms (JSON; or ${chunks} SSE chunks, each in its own ` +
      `event-loop turn, then [DONE]); upstream, each contender and the load generator in separate processes. ` +
      `Throughput: autocannon ${connections} connections, ${warmupS} s warm-up then ${durationS} s per contender ` +
      `and mode, ${rounds} round(s) (median round shown); CPU µs per request: each contender's own process ` +
      `(user + system, all threads) over that run, per answered request. Low load: 1 connection, ${lowRequests} sequential ` +
      `requests per contender and mode after ${Math.min(50, lowRequests)} warm-up, interleaved in blocks of 50. slotgate: one openai ` +
      `channel, ${store}, logger off; the minimal proxy and the Fastify + undici pass-through (the gateway's own ` +
      `HTTP stack with none of its work) log nothing either. Machine: ${os.cpus().length} × ` +
      `${os.cpus()[0]?.model.trim()}, Node ${process.version}; 1-minute load average ${fmt(loadBefore, 1)} at the ` +
      `start, ${fmt(os.loadavg()[0]!, 1)} at the end` +
      (Math.max(loadBefore, os.loadavg()[0]!) > os.cpus().length
        ? ' (above the core count: other work shared the machine).'
        : '.');
    return { parameters, throughput, latency, targets: targetsOf(throughput, latency), notes };
  } finally {
    await Promise.all([...contenders.map((c) => c.close()), stopNode(upstream.child)]);
  }
}

const MINIMAL = 'minimal Node proxy';
const FASTIFY = 'Fastify + undici pass-through';
const isSlotgateBounded = (label: string) => label.startsWith('slotgate, bounded');

function targetsOf(throughput: readonly ThroughputRow[], latency: readonly LatencyRow[]): Target[] {
  const out: Target[] = [];
  for (const mode of MODES) {
    const floor = throughput.find((r) => r.contender === MINIMAL && r.mode === mode);
    const ours = throughput.find((r) => isSlotgateBounded(r.contender) && r.mode === mode);
    if (floor && ours) {
      const ratio = ours.requestsPerS / floor.requestsPerS;
      out.push({
        target: `${mode}: slotgate requests/s ≥ 0.95 × the minimal proxy's`,
        value: `${fmt(ratio, 2)} ×`,
        verdict: ratio >= 0.95 ? 'PASS' : 'MISS',
      });
    }
    const low = latency.find((r) => isSlotgateBounded(r.contender) && r.mode === mode);
    // "added" read two ways: over going direct (the whole extra hop), and over the minimal proxy (slotgate's own part)
    for (const [base, name] of [
      ['direct to the upstream', 'direct'],
      [MINIMAL, 'the minimal proxy'],
    ] as const) {
      const ref = latency.find((r) => r.contender === base && r.mode === mode);
      if (!ref || !low) continue;
      const added = low.p50Ms - ref.p50Ms;
      out.push({
        target: `${mode}: slotgate's added p50 at low load ≤ 1 ms (over ${name})`,
        value: `${fmt(added, 3)} ms`,
        verdict: added <= 1 ? 'PASS' : 'MISS',
      });
    }
  }
  return out;
}

/** The result as markdown: parameters, the two tables, the targets, the notes. */
export function proxyBenchReport(r: ProxyBenchResult): string {
  const lines = [`# slotgate beside a minimal proxy`, '', r.parameters, ''];
  lines.push(
    '| contender | mode | requests/s | p50 ms | p99 ms | failed | × minimal proxy | × Fastify + undici | added p50 ms ' +
      '| CPU µs per request |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  );
  for (const row of r.throughput) {
    const floor = r.throughput.find((x) => x.contender === MINIMAL && x.mode === row.mode);
    const stack = r.throughput.find((x) => x.contender === FASTIFY && x.mode === row.mode);
    const ratio = (base: ThroughputRow | undefined) =>
      base ? fmt(row.requestsPerS / base.requestsPerS, 2) : '–';
    lines.push(
      `| ${row.contender} | ${row.mode} | ${fmt(row.requestsPerS, 0)} | ${fmt(row.p50Ms, 0)} | ${fmt(row.p99Ms, 0)} | ` +
        `${row.failed} | ${ratio(floor)} | ${ratio(stack)} | ${floor ? fmt(row.p50Ms - floor.p50Ms, 0) : '–'} | ` +
        `${row.cpuUsPerRequest === undefined ? '–' : fmt(row.cpuUsPerRequest, 0)} |`,
    );
  }
  lines.push(
    '',
    '| at low load (1 connection) | mode | p50 ms | p99 ms | failed | added p50 ms over direct | over minimal proxy |',
  );
  lines.push('| --- | --- | --- | --- | --- | --- | --- |');
  for (const row of r.latency) {
    const direct = r.latency.find((x) => x.contender === 'direct to the upstream' && x.mode === row.mode)!;
    const floor = r.latency.find((x) => x.contender === MINIMAL && x.mode === row.mode);
    lines.push(
      `| ${row.contender} | ${row.mode} | ${fmt(row.p50Ms, 3)} | ${fmt(row.p99Ms, 3)} | ${row.failed} | ` +
        `${row === direct ? '–' : fmt(row.p50Ms - direct.p50Ms, 3)} | ` +
        `${floor && row !== floor && row !== direct ? fmt(row.p50Ms - floor.p50Ms, 3) : '–'} |`,
    );
  }
  lines.push('', '| target | measured | verdict |', '| --- | --- | --- |');
  for (const t of r.targets) lines.push(`| ${t.target} | ${t.value} | ${t.verdict} |`);
  for (const note of r.notes) lines.push('', note);
  return lines.join('\n');
}
