/**
 * Client limits (tokens[].max_concurrency, acquire({ client })) on real Redis and real gateway processes. The upstream
 * here counts each client's requests in flight itself — by the `user-agent` the gateway forwards as it is, which
 * each test sets to the client's name — so a test asserts what the upstream saw, not what a gateway believes.
 *
 * Every upstream request can be held at a gate the test opens: while it is closed, the requests at the upstream, in
 * the clients' queues and refused are counted exactly, so the assertions are about states reached (polled for) and
 * bounds, never about time windows. Once the gate is open each request is held a short while more, so the requests
 * that follow overlap and the limit is exercised through grants and releases across the gateways.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { stringify as toYaml } from 'yaml';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import type { Admission } from '../../packages/slotgate/src/admission/types.js';
import { ClientLimitError } from '../../packages/slotgate/src/core/errors.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { within } from '../helpers/acquirer-process.js';
import { FakeUpstream, gate, type Handler } from '../helpers/fake-upstream.js';
import {
  ROOT,
  killAllGateways,
  spawnGateway,
  tempDir,
  writeConfig,
  type GwProcess,
} from '../helpers/gw-gateway.js';
import { parsePrometheusText, select } from '../helpers/prom-text.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';

const ADMIN_TOKEN = 'adm-client-limits-test-token';
const UPSTREAM_KEY = 'sk-upstream-client-limits';
const MODEL = 'gpt-test';

type Json = Record<string, unknown>;

interface Answer {
  status: number;
  headers: Headers;
  json: Json;
  text: string;
}

async function call(
  gw: GwProcess,
  method: string,
  path: string,
  opts: { body?: unknown; token?: string; userAgent?: string } = {},
): Promise<Answer> {
  const res = await fetch(gw.url + path, {
    method,
    headers: {
      ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}),
      ...(opts.userAgent ? { 'user-agent': opts.userAgent } : {}),
      ...(opts.body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(opts.body !== undefined ? { body: JSON.stringify(opts.body) } : {}),
  });
  const text = await res.text();
  let json: Json = {};
  try {
    json = JSON.parse(text) as Json;
  } catch {
    // not JSON
  }
  return { status: res.status, headers: res.headers, json, text };
}

/** A chat completion of `client` (its name as the user-agent, which the upstream counts by) with `token`. */
const chat = (gw: GwProcess, token: string, client: string, i: number) =>
  call(gw, 'POST', '/v1/chat/completions', {
    token,
    userAgent: client,
    body: { model: MODEL, messages: [{ role: 'user', content: `${client} request ${i}` }] },
  });

interface ClientView {
  client: string;
  tokens: string[];
  max_concurrency: number;
  weight: number;
  active: number | null;
  waiting: number | null;
  this_instance: { active: number; waiting: number } | null;
}

async function clientsOf(gw: GwProcess): Promise<{ text: string; clients: Map<string, ClientView> }> {
  const res = await call(gw, 'GET', '/admin/clients', { token: ADMIN_TOKEN });
  expect(res.status, res.text).toBe(200);
  const list = res.json.clients as ClientView[];
  return { text: res.text, clients: new Map(list.map((c) => [c.client, c])) };
}

/** Polls `check` every 50 ms until it returns true; fails after `timeoutMs` with `what` and the last report. */
async function until(
  what: string,
  check: () => Promise<boolean> | boolean,
  report: () => unknown = () => '',
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) {
      throw new Error(`${what}: not reached within ${timeoutMs} ms; last seen ${JSON.stringify(report())}`);
    }
    await sleep(50);
  }
}

/**
 * The upstream's handler, counting in flight per client (by user-agent) and in total. A request counts from the
 * handler's start until right before its answer is written (the gateway can release its slots only after that) or
 * until the gateway closes it. While the gate is closed each request waits for it; then it is held `holdMs` more.
 */
class ClientCounts {
  readonly current = new Map<string, number>();
  readonly peak = new Map<string, number>();
  total = 0;
  totalPeak = 0;
  private gate = gate();
  private closed = false;

  constructor(readonly holdMs: number) {}

  now(client: string): number {
    return this.current.get(client) ?? 0;
  }

  highest(client: string): number {
    return this.peak.get(client) ?? 0;
  }

  /** Requests arriving from now on wait for open(). */
  hold(): void {
    if (!this.closed) this.gate = gate();
    this.closed = true;
  }

  open(): void {
    this.closed = false;
    this.gate.open();
  }

  /** Forgets the peaks (the counts in flight stay). */
  resetPeaks(): void {
    this.peak.clear();
    for (const [client, n] of this.current) this.peak.set(client, n);
    this.totalPeak = this.total;
  }

  snapshot(): Json {
    return {
      current: Object.fromEntries(this.current),
      peak: Object.fromEntries(this.peak),
      total: this.total,
      totalPeak: this.totalPeak,
    };
  }

  readonly handler: Handler = async (request) => {
    const client = String(request.headers['user-agent'] ?? '(none)');
    this.current.set(client, this.now(client) + 1);
    this.peak.set(client, Math.max(this.highest(client), this.now(client)));
    this.total++;
    this.totalPeak = Math.max(this.totalPeak, this.total);
    let counted = true;
    const leave = () => {
      if (!counted) return;
      counted = false;
      this.current.set(client, this.now(client) - 1);
      this.total--;
    };
    void request.done.then(leave);
    if (this.closed) await Promise.race([this.gate.promise, request.done]);
    await Promise.race([sleep(this.holdMs), request.done]);
    leave(); // the answer is written right after this returns, with no I/O in between
    return {
      json: {
        id: `chatcmpl-${client}`,
        object: 'chat.completion',
        model: MODEL,
        choices: [
          { index: 0, message: { role: 'assistant', content: `hello ${client} from ${request.channel}` } },
        ],
      },
    };
  };
}

/** An OpenAI channel of the upstream (told apart by path). */
const channel = (upstream: FakeUpstream, id: string, max: number) => ({
  id,
  type: 'openai',
  base_url: upstream.url(id),
  key: UPSTREAM_KEY,
  models: [MODEL],
  max_concurrency: max,
});

/** The gateway's 429 for a client at its limit: its code, the client named, and a Retry-After. */
function expectRefusal(r: Answer, client: string): void {
  expect(r.status, r.text).toBe(429);
  const error = r.json.error as Json;
  expect(error.code, r.text).toBe('client_concurrency_exceeded');
  expect(String(error.message), r.text).toContain(`client ${JSON.stringify(client)}`);
  expect(Number(r.headers.get('retry-after')), r.text).toBeGreaterThanOrEqual(1);
}

/** A complete answer of the upstream to a request of `client`. */
function expectServed(r: Answer, client: string): void {
  expect(r.status, r.text).toBe(200);
  const choices = r.json.choices as Array<{ message: { content: string } }>;
  expect(choices[0]!.message.content, r.text).toMatch(new RegExp(`^hello ${client} from `));
}

/** Fires one request and files its answer, as it settles, under its client. */
class Burst {
  readonly settled = new Map<string, Answer[]>();
  readonly pending: Array<Promise<Answer>> = [];

  fire(gw: GwProcess, token: string, client: string, i: number): void {
    this.pending.push(
      chat(gw, token, client, i)
        // a request the gateway never answered (it died, or the test failed and killed it) is status 0
        .catch((err: unknown) => ({ status: 0, headers: new Headers(), json: {}, text: String(err) }))
        .then((r) => {
          const list = this.settled.get(client) ?? [];
          list.push(r);
          this.settled.set(client, list);
          return r;
        }),
    );
  }

  of(client: string): Answer[] {
    return this.settled.get(client) ?? [];
  }

  refused(client: string): Answer[] {
    return this.of(client).filter((r) => r.status !== 200);
  }

  async all(): Promise<Answer[]> {
    return Promise.all(this.pending);
  }

  summary(): Json {
    return Object.fromEntries(
      [...this.settled].map(([client, list]) => [client, list.map((r) => r.status).join(',')]),
    );
  }
}

let dir: { dir: string; remove(): Promise<void> };
let redis: Redis;
const prefixes: string[] = [];
let upstream: FakeUpstream | undefined;
let counts: ClientCounts | undefined;
const children: ChildProcess[] = [];

beforeAll(async () => {
  dir = await tempDir();
  redis = new Redis(redisUrl());
});

afterEach(async () => {
  counts?.open();
  counts = undefined;
  for (const child of children.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  await killAllGateways();
  await upstream?.close();
  upstream = undefined;
});

afterAll(async () => {
  await killAllGateways();
  await dir?.remove();
  if (redis) {
    for (const prefix of prefixes) {
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length) await redis.del(...keys);
    }
    redis.disconnect();
  }
});

function newPrefix(name: string): string {
  const prefix = uniquePrefix(name);
  prefixes.push(prefix);
  return prefix;
}

async function startUpstream(holdMs: number): Promise<{ up: FakeUpstream; counts: ClientCounts }> {
  const c = (counts = new ClientCounts(holdMs));
  const up = (upstream = await FakeUpstream.start({ reply: c.handler, keepRequests: false }));
  return { up, counts: c };
}

async function startGateways(path: string, n: number): Promise<GwProcess[]> {
  const gateways = await Promise.all(Array.from({ length: n }, () => spawnGateway({ configPath: path })));
  await Promise.all(gateways.map((g) => g.ready));
  return gateways;
}

/** One request of `client` through each gateway, so none is still connecting when a burst starts. */
async function warmUp(gateways: GwProcess[], token: string, client: string): Promise<void> {
  for (const [i, gw] of gateways.entries()) expectServed(await chat(gw, token, client, -1 - i), client);
}

describe('three gateway processes on one Redis', () => {
  it("each client's requests in flight at the upstream stay within its max, fleet-wide; past its queue it gets 429", async () => {
    const prefix = newPrefix('cl-fleet');
    const { up, counts } = await startUpstream(150);
    const HEAVY = ['sk-client-heavy-a-7c1e', 'sk-client-heavy-b-3f90'];
    const LIGHT = 'sk-client-light-52ad';
    const QUEUE = 4;
    const config = {
      redis: { url: redisUrl(), prefix },
      admin: { token: ADMIN_TOKEN },
      tokens: [
        { key: HEAVY[0], name: 'heavy-a', client: 'heavy', max_concurrency: 3 },
        { key: HEAVY[1], name: 'heavy-b', client: 'heavy', max_concurrency: 3 },
        { key: LIGHT, name: 'light', max_concurrency: 1 },
      ],
      channels: [channel(up, 'ch', 50)],
      // a client's queue is bounded like a channel's: by max_waiting_per_channel
      settings: { wait_timeout_ms: 30_000, max_waiting_per_channel: QUEUE },
    };
    const path = await writeConfig(dir.dir, `${prefix}.yaml`, config);
    const gateways = await startGateways(path, 3);
    await warmUp(gateways, LIGHT, 'light');
    await warmUp(gateways, HEAVY[0]!, 'heavy');
    await warmUp(gateways, HEAVY[1]!, 'heavy');
    expect(counts.total).toBe(0);
    counts.resetPeaks();

    // Round 1, gate closed: 30 heavy requests over three gateways and both tokens, 6 light ones.
    counts.hold();
    const round1 = new Burst();
    for (let i = 0; i < 30; i++) round1.fire(gateways[i % 3]!, HEAVY[i % 2]!, 'heavy', i);
    for (let i = 0; i < 6; i++) round1.fire(gateways[i % 3]!, LIGHT, 'light', i);

    // Every request is accounted for: at the upstream, waiting in its client's queue (fleet-wide), or refused.
    let view = new Map<string, ClientView>();
    const report = () => ({
      upstream: counts.snapshot(),
      clients: Object.fromEntries(view),
      answers: round1.summary(),
    });
    await until(
      'every request at the upstream, queued or refused',
      async () => {
        view = (await clientsOf(gateways[0]!)).clients;
        return (
          counts.now('heavy') === 3 &&
          counts.now('light') === 1 &&
          3 + (view.get('heavy')?.waiting ?? 0) + round1.refused('heavy').length === 30 &&
          1 + (view.get('light')?.waiting ?? 0) + round1.refused('light').length === 6
        );
      },
      report,
    );
    // The queues filled up to their bound (nothing leaves them while the gate is closed); the rest was refused.
    expect(view.get('heavy'), JSON.stringify(report())).toMatchObject({ active: 3, waiting: QUEUE });
    expect(view.get('light'), JSON.stringify(report())).toMatchObject({ active: 1, waiting: QUEUE });
    expect(round1.refused('heavy').length).toBe(30 - 3 - QUEUE);
    expect(round1.refused('light').length).toBe(6 - 1 - QUEUE);
    for (const r of round1.refused('heavy')) expectRefusal(r, 'heavy');
    for (const r of round1.refused('light')) expectRefusal(r, 'light');
    // the three gateways' own counts add up to the fleet's
    const local = await Promise.all(gateways.map(async (gw) => (await clientsOf(gw)).clients));
    expect(local.reduce((n, v) => n + v.get('heavy')!.this_instance!.active, 0)).toBe(3);
    expect(local.reduce((n, v) => n + v.get('heavy')!.this_instance!.waiting, 0)).toBe(QUEUE);
    expect(local.reduce((n, v) => n + v.get('light')!.this_instance!.active, 0)).toBe(1);

    counts.open();
    await within(round1.all(), 60_000, 'round 1 finishing');
    expect(round1.of('heavy').filter((r) => r.status === 200).length).toBe(3 + QUEUE);
    expect(round1.of('light').filter((r) => r.status === 200).length).toBe(1 + QUEUE);
    for (const r of round1.of('heavy')) if (r.status === 200) expectServed(r, 'heavy');
    for (const r of round1.of('light')) if (r.status === 200) expectServed(r, 'light');
    expect(counts.snapshot(), 'round 1').toMatchObject({ peak: { heavy: 3, light: 1 } });

    // Round 2, no gate: queues long enough for everyone, so every request is served through the clients' queues,
    // slots passing between the three gateways at each release.
    const put = await call(gateways[0]!, 'PUT', '/admin/settings', {
      token: ADMIN_TOKEN,
      body: { max_waiting_per_channel: 40 },
    });
    expect(put.status, put.text).toBe(200);
    for (const gw of gateways) {
      await until('the new queue bound in force on every gateway', async () => {
        const res = await call(gw, 'GET', '/admin/settings', { token: ADMIN_TOKEN });
        return (res.json.settings as Json).max_waiting_per_channel === 40;
      });
    }
    counts.resetPeaks();
    const received = up.total();
    const round2 = new Burst();
    for (let i = 0; i < 30; i++) round2.fire(gateways[i % 3]!, HEAVY[i % 2]!, 'heavy', 100 + i);
    for (let i = 0; i < 6; i++) round2.fire(gateways[i % 3]!, LIGHT, 'light', 100 + i);
    const answers = await within(round2.all(), 60_000, 'round 2');
    for (const r of round2.of('heavy')) expectServed(r, 'heavy');
    for (const r of round2.of('light')) expectServed(r, 'light');
    expect(answers.length).toBe(36);
    expect(up.total() - received).toBe(36);
    const peaks = counts.snapshot();
    expect(counts.highest('heavy'), JSON.stringify(peaks)).toBeLessThanOrEqual(3);
    expect(counts.highest('light'), JSON.stringify(peaks)).toBeLessThanOrEqual(1);
    expect(counts.highest('heavy'), JSON.stringify(peaks)).toBeGreaterThan(0);
    // nobody else reached the upstream, and nothing is left in flight
    expect([...counts.peak.keys()].sort()).toEqual(['heavy', 'light']);
    expect(counts.total).toBe(0);
    expect(up.bad).toEqual([]);
    console.info(`client limits, 3 gateways: round 2 peaks ${JSON.stringify(peaks.peak)}`);

    // every slot was given back: no client holds or waits for one on any gateway
    await until('every client slot released', async () => {
      const v = (await clientsOf(gateways[1]!)).clients;
      return v.get('heavy')!.active === 0 && v.get('light')!.active === 0 && v.get('heavy')!.waiting === 0;
    });
    for (const gw of gateways) expect(gw.proc.exitCode, gw.output()).toBeNull();
  }, 120_000);
});

describe('a client limit and channel limits together', () => {
  it('neither a channel nor a client ever has more than its max in flight, and each limit binds in turn', async () => {
    const prefix = newPrefix('cl-both');
    const { up, counts } = await startUpstream(100);
    const ALPHA = 'sk-client-alpha-90be';
    const BETA = 'sk-client-beta-1d47';
    const config = {
      redis: { url: redisUrl(), prefix },
      admin: { token: ADMIN_TOKEN },
      tokens: [
        { key: ALPHA, name: 'alpha', max_concurrency: 3 },
        { key: BETA, name: 'beta', max_concurrency: 3 },
      ],
      // two channels of max 2: room for 4, more than one client's 3
      channels: [channel(up, 'ch-a', 2), channel(up, 'ch-b', 2)],
      settings: { wait_timeout_ms: 30_000 },
    };
    const path = await writeConfig(dir.dir, `${prefix}.yaml`, config);
    const gateways = await startGateways(path, 2);
    await warmUp(gateways, ALPHA, 'alpha');
    await warmUp(gateways, BETA, 'beta');
    counts.resetPeaks();
    counts.hold();

    // alpha alone: the channels have room for 4, the client's own limit stops it at 3
    const burst = new Burst();
    for (let i = 0; i < 6; i++) burst.fire(gateways[i % 2]!, ALPHA, 'alpha', i);
    let view = new Map<string, ClientView>();
    const report = () => ({
      upstream: counts.snapshot(),
      channels: up.highest(),
      clients: Object.fromEntries(view),
      answers: burst.summary(),
    });
    await until(
      'alpha at its limit with the rest queued',
      async () => {
        view = (await clientsOf(gateways[1]!)).clients;
        return counts.now('alpha') === 3 && view.get('alpha')?.waiting === 3;
      },
      report,
    );
    expect(up.record('ch-a').current + up.record('ch-b').current).toBe(3);

    // beta too: one channel slot is left, so beta has one request at the upstream; its other client slots wait for
    // a channel slot, and the rest of its requests for a client slot
    for (let i = 0; i < 6; i++) burst.fire(gateways[i % 2]!, BETA, 'beta', i);
    await until(
      'both channels full',
      async () => {
        view = (await clientsOf(gateways[0]!)).clients;
        return (
          counts.total === 4 &&
          counts.now('beta') === 1 &&
          view.get('beta')?.active === 3 &&
          view.get('beta')?.waiting === 3
        );
      },
      report,
    );
    expect(up.record('ch-a').current, JSON.stringify(report())).toBe(2);
    expect(up.record('ch-b').current, JSON.stringify(report())).toBe(2);
    expect(counts.now('alpha')).toBe(3);
    expect(burst.settled.size, 'no answer while the gate is closed').toBe(0);

    counts.open();
    await within(burst.all(), 60_000, 'the burst finishing');
    for (const r of burst.of('alpha')) expectServed(r, 'alpha');
    for (const r of burst.of('beta')) expectServed(r, 'beta');
    expect(burst.of('alpha').length + burst.of('beta').length).toBe(12);
    const seen = JSON.stringify(report());
    expect(up.record('ch-a').max, seen).toBe(2);
    expect(up.record('ch-b').max, seen).toBe(2);
    expect(counts.highest('alpha'), seen).toBe(3);
    expect(counts.highest('beta'), seen).toBeLessThanOrEqual(3);
    expect(counts.totalPeak, seen).toBe(4);
    expect(up.bad).toEqual([]);
  }, 90_000);
});

describe('a process holding a client slot dies', () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  async function engine(prefix: string): Promise<{ admission: Admission; store: RedisStore }> {
    const store = new RedisStore({ url: redisUrl(), prefix });
    const admission = createAdmission({ store, settings: { wait_enabled: false, lease_ttl_ms: 5000 } });
    cleanups.push(async () => {
      await admission.close();
      await store.close();
    });
    return { admission, store };
  }

  it("its client's slot is refused until the dead lease expires, then admitted", async () => {
    const prefix = newPrefix('cl-crash');
    const LEASE_TTL_MS = 9000; // renewed every 3 s: the dead lease lives on at least 6 s after the kill
    const solo = { id: 'solo', maxConcurrency: 1 };
    const candidates = [{ id: 'ch', maxConcurrency: 10 }];
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        'test/helpers/client-holder.ts',
        JSON.stringify({ url: redisUrl() }),
        prefix,
        solo.id,
        String(LEASE_TTL_MS),
      ],
      { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] },
    );
    children.push(child);
    let output = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (output += d));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (output += d));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    await until(
      'the child holding the client slot',
      () => output.includes('"held":"ch"'),
      () => output,
    );

    const { admission } = await engine(prefix);
    const refusal = async () => {
      const err: unknown = await admission.acquire({ candidates, client: solo }).then(
        async (ticket) => {
          await ticket.release();
          return undefined;
        },
        (e: unknown) => e,
      );
      return err;
    };
    // alive: the client's only slot is the child's
    const loads = await admission.readClients([solo]);
    expect([...loads.keys()]).toEqual(['solo']);
    expect(loads.get('solo')).toMatchObject({ active: 1, waiting: 0 });
    const whileAlive = await refusal();
    expect(whileAlive).toBeInstanceOf(ClientLimitError);
    expect(whileAlive).toMatchObject({
      code: 'client_concurrency_exceeded',
      clientId: 'solo',
      reason: 'full',
    });
    // the channel has room: only the client's own limit refuses
    expect((await admission.readLoads(candidates)).get('ch')).toMatchObject({ active: 1 });

    child.kill('SIGKILL');
    await exited;
    // right after the kill the dead lease still holds the slot
    const afterKill = await refusal();
    expect(afterKill, 'admitted right after the kill: the dead lease was not counted').toBeInstanceOf(
      ClientLimitError,
    );
    expect(afterKill).toMatchObject({ clientId: 'solo', reason: 'full' });

    // polled: refused until the lease expires, then admitted
    const errors: string[] = [];
    let ticket;
    const deadline = Date.now() + 3 * LEASE_TTL_MS;
    while (!ticket) {
      if (Date.now() > deadline)
        throw new Error(`never admitted after the kill; refusals: ${errors.join(', ')}`);
      try {
        ticket = await admission.acquire({ candidates, client: solo });
      } catch (err) {
        expect(err, String(err)).toBeInstanceOf(ClientLimitError);
        errors.push((err as ClientLimitError).reason);
        await sleep(250);
      }
    }
    expect(
      errors.every((r) => r === 'full'),
      errors.join(', '),
    ).toBe(true);
    expect(ticket.channel.id).toBe('ch');
    expect((await admission.readClients([solo])).get('solo')).toMatchObject({ active: 1 });
    // the new holder is the only one: a second request of the client is refused while it holds the slot
    expect(await refusal()).toBeInstanceOf(ClientLimitError);
    expect(ticket.lost.aborted).toBe(false);
    await ticket.release();
    expect((await admission.readClients([solo])).get('solo')).toMatchObject({ active: 0 });
  }, 60_000);
});

describe('a config reload changes a client limit', () => {
  it('max_concurrency 1 → 2 by SIGHUP: afterwards two requests of the client are in flight at once', async () => {
    const prefix = newPrefix('cl-reload');
    const { counts } = await startUpstream(50);
    const SOLO = 'sk-client-solo-6b2f';
    const config = (max: number) => ({
      redis: { url: redisUrl(), prefix },
      admin: { token: ADMIN_TOKEN },
      tokens: [{ key: SOLO, name: 'solo', max_concurrency: max }],
      channels: [channel(upstream!, 'ch', 10)],
      settings: { wait_timeout_ms: 30_000 },
    });
    const path = await writeConfig(dir.dir, `${prefix}.yaml`, config(1));
    const [gw] = await startGateways(path, 1);
    await warmUp([gw!], SOLO, 'solo');
    const version = async () => {
      const res = await call(gw!, 'GET', '/admin/status', { token: ADMIN_TOKEN });
      return (res.json.config as { version: number }).version;
    };
    expect(await version()).toBe(1);

    /** Three requests with the gate closed: returns once `inFlight` are at the upstream and the rest queued. */
    const heldBurst = async (inFlight: number) => {
      counts.resetPeaks();
      counts.hold();
      const burst = new Burst();
      for (let i = 0; i < 3; i++) burst.fire(gw!, SOLO, 'solo', i);
      let view: ClientView | undefined;
      await until(
        `${inFlight} in flight`,
        async () => {
          view = (await clientsOf(gw!)).clients.get('solo');
          return counts.now('solo') === inFlight && view?.waiting === 3 - inFlight;
        },
        () => ({ upstream: counts.snapshot(), view, answers: burst.summary() }),
      );
      counts.open();
      const answers = await within(burst.all(), 30_000, 'the burst');
      for (const r of answers) expectServed(r, 'solo');
      return counts.highest('solo');
    };

    expect(await heldBurst(1)).toBe(1);

    // the new file replaces the old in one rename (a reader never sees it half written), then SIGHUP
    const next = join(dir.dir, `${prefix}.next.yaml`);
    await writeFile(next, toYaml(config(2)), 'utf8');
    await rename(next, path);
    gw!.proc.kill('SIGHUP');
    await until('the reload in force', async () => {
      const solo = (await clientsOf(gw!)).clients.get('solo');
      return (await version()) >= 2 && solo?.max_concurrency === 2;
    });

    expect(await heldBurst(2)).toBe(2);
    expect(gw!.proc.exitCode, gw!.output()).toBeNull();
  }, 60_000);

  it('a raised limit reaches the requests already waiting for a slot of the client, in their place', async () => {
    const prefix = newPrefix('cl-reload-wait');
    const { counts } = await startUpstream(50);
    const SOLO = 'sk-client-solo-wait-91c4';
    const config = (max: number) => ({
      redis: { url: redisUrl(), prefix },
      admin: { token: ADMIN_TOKEN },
      tokens: [{ key: SOLO, name: 'solo', max_concurrency: max }],
      channels: [channel(upstream!, 'ch', 10)],
      settings: { wait_timeout_ms: 30_000 },
    });
    const path = await writeConfig(dir.dir, `${prefix}.yaml`, config(1));
    const [gw] = await startGateways(path, 1);
    await warmUp([gw!], SOLO, 'solo');

    counts.resetPeaks();
    counts.hold();
    const burst = new Burst();
    for (let i = 0; i < 3; i++) burst.fire(gw!, SOLO, 'solo', i);
    await until(
      '1 in flight, 2 waiting',
      async () => counts.now('solo') === 1 && (await clientsOf(gw!)).clients.get('solo')?.waiting === 2,
      () => ({ upstream: counts.snapshot(), answers: burst.summary() }),
    );

    const next = join(dir.dir, `${prefix}.next.yaml`);
    await writeFile(next, toYaml(config(2)), 'utf8');
    await rename(next, path);
    gw!.proc.kill('SIGHUP');
    // the oldest waiter is admitted under the new limit while the first request still holds its slot
    await until(
      '2 in flight, 1 waiting, with the gate still closed',
      async () => counts.now('solo') === 2 && (await clientsOf(gw!)).clients.get('solo')?.waiting === 1,
      () => ({ upstream: counts.snapshot(), answers: burst.summary() }),
    );
    counts.open();
    const answers = await within(burst.all(), 30_000, 'the burst');
    for (const r of answers) expectServed(r, 'solo');
    expect(counts.highest('solo')).toBe(2);
  }, 60_000);
});

describe('GET /admin/clients', () => {
  it("shows on one instance the slots another instance holds, and each instance's own; never a token key", async () => {
    const prefix = newPrefix('cl-admin');
    const { counts } = await startUpstream(50);
    const TEAM = ['sk-client-team-1-e51a', 'sk-client-team-2-08cd'];
    const FREE = 'sk-client-free-c3a9';
    const keys = [...TEAM, FREE, UPSTREAM_KEY, ADMIN_TOKEN];
    const config = {
      redis: { url: redisUrl(), prefix },
      admin: { token: ADMIN_TOKEN },
      tokens: [
        { key: TEAM[0], name: 'team-1', client: 'team', max_concurrency: 2, weight: 2 },
        { key: TEAM[1], name: 'team-2', client: 'team', max_concurrency: 2, weight: 2 },
        { key: FREE, name: 'free' },
      ],
      channels: [channel(upstream!, 'ch', 10)],
      settings: { wait_timeout_ms: 30_000 },
    };
    const path = await writeConfig(dir.dir, `${prefix}.yaml`, config);
    const [a, b] = await startGateways(path, 2);
    await warmUp([a!, b!], TEAM[0]!, 'team');
    expect((await call(b!, 'GET', '/admin/clients')).status).toBe(401);

    counts.hold();
    const burst = new Burst();
    burst.fire(a!, TEAM[0]!, 'team', 0);
    burst.fire(a!, TEAM[1]!, 'team', 1);
    await until(
      'both team requests at the upstream',
      () => counts.now('team') === 2,
      () => counts.snapshot(),
    );

    const onB = await clientsOf(b!);
    const onA = await clientsOf(a!);
    expect(onB.clients.get('team')).toEqual({
      client: 'team',
      tokens: ['team-1', 'team-2'],
      max_concurrency: 2,
      weight: 2,
      active: 2,
      waiting: 0,
      this_instance: { active: 0, waiting: 0 },
    });
    expect(onA.clients.get('team')).toMatchObject({ active: 2, this_instance: { active: 2, waiting: 0 } });
    // a client without a limit holds no slot in the store
    expect(onB.clients.get('free')).toEqual({
      client: 'free',
      tokens: ['free'],
      max_concurrency: 0,
      weight: 1,
      active: null,
      waiting: null,
      this_instance: null,
    });
    for (const key of keys) {
      expect(onA.text).not.toContain(key);
      expect(onB.text).not.toContain(key);
    }

    // the gauges are each instance's own
    const gauges = async (gw: GwProcess) => {
      const res = await call(gw, 'GET', '/metrics');
      expect(res.status).toBe(200);
      const exp = parsePrometheusText(res.text);
      return {
        inFlight: select(exp, 'slotgate_client_in_flight').map((s) => [s.labels.client, s.value]),
        max: select(exp, 'slotgate_client_max_concurrency').map((s) => [s.labels.client, s.value]),
      };
    };
    expect(await gauges(a!)).toEqual({ inFlight: [['team', 2]], max: [['team', 2]] });
    expect(await gauges(b!)).toEqual({ inFlight: [['team', 0]], max: [['team', 2]] });

    counts.open();
    for (const r of await within(burst.all(), 30_000, 'the team requests')) expectServed(r, 'team');
    await until('the team slots released, seen from b', async () => {
      const team = (await clientsOf(b!)).clients.get('team');
      return team?.active === 0;
    });
  }, 60_000);
});
