/**
 * Invariant I1 across real processes (spec §9, §10 item 14): three child processes, each an admission engine with
 * 100 concurrent acquirers, share one Redis and 20 channels of max 2 (one candidate set, one priority). Every holder
 * calls an upstream run here in the test while it holds its slot; the upstream counts in-flight requests per channel
 * itself, so the assertions are about what the upstream saw, not what the engines believe.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import type { AcquirerOptions, AcquirerSummary } from '../helpers/acquirer.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const PROCESSES = 3;
const ACQUIRERS = 100;
const ADMISSIONS = 5;
const CHANNELS = 20;
const MAX = 2;

interface ChannelSeen {
  current: number;
  highest: number;
  requests: number;
  /** Times a request arrived while `MAX` were already in flight. */
  overMax: number;
}

/** The upstream: holds each request 20–30 ms, tracking current and highest in-flight count per channel. */
function startUpstream(): Promise<{
  server: Server;
  port: number;
  seen: Map<string, ChannelSeen>;
  bad: string[];
}> {
  const seen = new Map<string, ChannelSeen>();
  const bad: string[] = [];
  const server = createServer((req, res) => {
    const id = new URL(req.url ?? '/', 'http://upstream').searchParams.get('channel');
    if (!id || !/^ch\d+$/.test(id)) {
      bad.push(String(req.url));
      res.writeHead(400).end();
      return;
    }
    let s = seen.get(id);
    if (!s) seen.set(id, (s = { current: 0, highest: 0, requests: 0, overMax: 0 }));
    if (s.current >= MAX) s.overMax++;
    s.current++;
    s.requests++;
    s.highest = Math.max(s.highest, s.current);
    const channel = s;
    setTimeout(
      () => {
        // Counted out before the answer leaves, so the holder's release always follows this decrement.
        channel.current--;
        res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      },
      20 + Math.random() * 10,
    );
  });
  server.keepAliveTimeout = 5000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () =>
      resolve({ server, port: (server.address() as AddressInfo).port, seen, bad }),
    );
  });
}

interface Child {
  proc: ChildProcess;
  stdout: string;
  stderr: string;
  ready: Promise<void>;
  summary: Promise<AcquirerSummary>;
}

const children: Child[] = [];

function startChild(opts: AcquirerOptions): Child {
  const proc = spawn(
    process.execPath,
    ['--import', 'tsx', 'test/helpers/acquirer.ts', JSON.stringify(opts)],
    {
      cwd: ROOT,
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  const child = { proc, stdout: '', stderr: '' } as Child;
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const lines: Array<Record<string, unknown>> = [];
  const waiters: Array<() => void> = [];
  proc.stdout!.setEncoding('utf8');
  proc.stderr!.setEncoding('utf8');
  proc.stderr!.on('data', (d: string) => (child.stderr += d));
  proc.stdout!.on('data', (d: string) => {
    child.stdout += d;
    const parts = child.stdout.split('\n');
    child.stdout = parts.pop()!;
    for (const line of parts) {
      try {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        child.stderr += `[stdout] ${line}\n`;
      }
    }
    for (const w of waiters.splice(0)) w();
  });
  const line = (key: string) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      const check = () => {
        const found = lines.find((l) => key in l);
        if (found) resolve(found);
        else waiters.push(check);
      };
      check();
      void exited.then((code) => {
        const found = lines.find((l) => key in l);
        if (found) resolve(found);
        else
          reject(
            new Error(`acquirer exited with ${code} before printing "${key}"; stderr:\n${child.stderr}`),
          );
      });
    });
  child.ready = line('ready').then(() => undefined);
  child.summary = line('summary').then((l) => l.summary as AcquirerSummary);
  children.push(child);
  return child;
}

function killAll(): void {
  for (const c of children.splice(0)) {
    if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
  }
}

/** Rejects after `ms` with `what`, so a hang fails with a message instead of the test time-out. */
function within<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
    }),
  ]);
}

describe('several processes on one Redis', () => {
  const prefix = uniquePrefix('multiproc');
  let upstream: Awaited<ReturnType<typeof startUpstream>>;

  beforeAll(async () => {
    upstream = await startUpstream();
  });

  afterEach(() => {
    killAll(); // a failed or timed-out test never leaves children behind
  });

  afterAll(async () => {
    killAll();
    await new Promise<void>((resolve) => {
      upstream?.server.closeAllConnections();
      upstream?.server.close(() => resolve());
    });
    const admin = new Redis(redisUrl());
    try {
      const keys = await admin.keys(`${prefix}:*`);
      if (keys.length) await admin.del(...keys);
    } finally {
      admin.disconnect();
    }
  });

  it(`3 processes × ${ACQUIRERS} acquirers never exceed max ${MAX} per channel at the upstream`, async () => {
    const opts: AcquirerOptions = {
      redisUrl: redisUrl(),
      prefix,
      upstreamPort: upstream.port,
      acquirers: ACQUIRERS,
      admissions: ADMISSIONS,
      channels: CHANNELS,
      maxConcurrency: MAX,
      // Queues with room for every acquirer, short polls and short waits: the burst goes through waiting, wait
      // time-outs and retries (each loop retries a CapacityError after a short pause), and ends in a few seconds.
      settings: { max_waiting_per_channel: 20, wait_interval_ms: 10, wait_timeout_ms: 1000 },
      deadlineMs: 15_000,
    };
    const started = Array.from({ length: PROCESSES }, () => startChild(opts));
    await within(Promise.all(started.map((c) => c.ready)), 15_000, 'starting the acquirer processes');
    for (const c of started) c.proc.stdin!.write('go\n');
    const summaries = await within(Promise.all(started.map((c) => c.summary)), 25_000, 'the burst');

    const admitted = summaries.reduce((n, s) => n + s.admitted, 0);
    const waited = summaries.reduce((n, s) => n + s.waited, 0);
    const requests = [...upstream.seen.values()].reduce((n, s) => n + s.requests, 0);
    const report = {
      summaries,
      channels: Object.fromEntries([...upstream.seen].map(([id, s]) => [id, `${s.highest}/${s.requests}`])),
    };

    // I1, as the upstream saw it.
    const over = [...upstream.seen].filter(([, s]) => s.highest > MAX || s.overMax > 0);
    expect(over, JSON.stringify(report)).toEqual([]);

    // The load was real: every acquirer finished, every admission reached the upstream exactly once, the
    // channels were driven to their maximum, and the burst had to queue.
    expect(upstream.bad).toEqual([]);
    expect(new Set(summaries.map((s) => s.instanceId)).size).toBe(PROCESSES);
    for (const s of summaries) {
      expect(s.unfinished, JSON.stringify(s)).toBe(0);
      expect(s.upstreamErrors, JSON.stringify(s)).toBe(0);
      expect(s.otherErrors, JSON.stringify(s)).toEqual({});
    }
    expect(admitted).toBe(PROCESSES * ACQUIRERS * ADMISSIONS);
    expect(requests).toBe(admitted);
    const atMax = [...upstream.seen.values()].filter((s) => s.highest === MAX).length;
    expect(atMax, JSON.stringify(report)).toBeGreaterThanOrEqual(15);
    expect(waited).toBeGreaterThan(0);

    // I5: nothing left behind in Redis once every process is done.
    const store = new RedisStore({ url: redisUrl(), prefix });
    try {
      const ids = Array.from({ length: CHANNELS }, (_, i) => `ch${i}`);
      const loads = await store.readLoads(ids);
      for (const id of ids) expect(loads.get(id), id).toMatchObject({ active: 0, waiting: 0 });
    } finally {
      await store.close();
    }
  }, 45_000);
});
