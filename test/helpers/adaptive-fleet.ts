/**
 * A fleet for the adaptive-limit tests: a private redis-server, `slotgate serve` child processes sharing it through
 * one config file, and an upstream in the test process that counts what each channel has in flight. Each channel's
 * model is its id. A channel is served by a hidden-capacity upstream whose K the test sets (`capacity`), or held at a
 * gate (`hold`); closed-loop clients load it (`load`); the fleet's limit is read from Redis (`limit`, `limitHash`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { Agent, request } from 'undici';
import { FakeUpstream, gate } from './fake-upstream.js';
import { spawnGateway, tempDir, writeConfig, type GwProcess } from './gw-gateway.js';
import { HiddenCapacity } from './hidden-capacity.js';
import { RedisServer } from './redis-server.js';

const CLIENT_TOKEN = 'sk-client-adaptive-fleet';
const ADMIN_TOKEN = 'adm-adaptive-fleet';
const PREFIX = 'adaptive';
const CONFIG = 'slotgate.yaml';

export interface FleetChannel {
  id: string;
  max_concurrency: number;
  adaptive?: Record<string, unknown>;
}

/** Closed-loop clients on one channel: each sends its next request once the last is answered. */
export interface Load {
  /** Answers by status. */
  statuses: Map<number, number>;
  stop(): Promise<void>;
}

export class AdaptiveFleet {
  private readonly agent = new Agent({ connections: 64 });

  private constructor(
    readonly redis: RedisServer,
    readonly upstream: FakeUpstream,
    readonly gateways: GwProcess[],
    private readonly dir: { dir: string; remove(): Promise<void> },
    /** Reads the fleet's keys; reconnects by itself after a Redis restart. */
    readonly reader: Redis,
  ) {}

  static async start(channels: FleetChannel[], instances = 2): Promise<AdaptiveFleet> {
    const redis = await RedisServer.start();
    const upstream = await FakeUpstream.start({ keepRequests: false });
    const dir = await tempDir();
    const configPath = await writeConfig(dir.dir, CONFIG, configOf(redis.url, upstream, channels));
    const gateways = await Promise.all(Array.from({ length: instances }, () => spawnGateway({ configPath })));
    const reader = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    reader.on('error', () => {});
    const fleet = new AdaptiveFleet(redis, upstream, gateways, dir, reader);
    await Promise.all(gateways.map((gw) => gw.ready));
    return fleet;
  }

  /** Serves `channel` with a hidden capacity of `k` (mode '429' unless said), held 100 ms; `set` changes K. */
  capacity(channel: string, k: number, mode: '429' | 'latency' = '429') {
    let now = k;
    const cap = new HiddenCapacity({ capacity: () => now, holdMs: 100, mode });
    this.upstream.on(channel, cap.handler);
    return { cap, set: (next: number) => void (now = next) };
  }

  /** Holds every request of `channel` at the upstream until `open`. */
  hold(channel: string): { open: () => void } {
    const held = gate();
    this.upstream.on(channel, async () => {
      await held.promise;
      return { json: { choices: [{ message: { content: 'ok' } }] } };
    });
    return held;
  }

  /** The fleet's stored limit of `channel` (undefined while none is stored). */
  async limit(channel: string): Promise<number | undefined> {
    const l = await this.reader.hget(`${PREFIX}:v1:{${channel}}:limit`, 'l');
    return l === null ? undefined : Number(l);
  }

  /** Every field of the stored limit: unchanged when nothing was reported. */
  limitHash(channel: string): Promise<Record<string, string>> {
    return this.reader.hgetall(`${PREFIX}:v1:{${channel}}:limit`);
  }

  /** One request on `channel` through gateway `i`; its status. */
  async ask(channel: string, i = 0): Promise<number> {
    const res = await request(`${this.gateways[i]!.url}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: this.agent,
      headers: { authorization: `Bearer ${CLIENT_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: channel, messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.body.text();
    return res.statusCode;
  }

  /** `n` requests at once, spread over the gateways in turn; their statuses once all are answered. */
  askMany(channel: string, n: number): Promise<number[]> {
    return Promise.all(Array.from({ length: n }, (_, i) => this.ask(channel, i % this.gateways.length)));
  }

  /** `perGateway` closed-loop clients on each gateway; an error answer pauses its client 50 ms. */
  load(channel: string, perGateway: number): Load {
    const statuses = new Map<number, number>();
    let running = true;
    const client = async (i: number) => {
      while (running) {
        const status = await this.ask(channel, i).catch(() => 0);
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        if (status !== 200) await sleep(50);
      }
    };
    const clients = this.gateways.flatMap((_, i) => Array.from({ length: perGateway }, () => client(i)));
    return {
      statuses,
      stop: async () => {
        running = false;
        await Promise.all(clients);
      },
    };
  }

  /** An admin call on gateway `i`; its status and JSON body. */
  async admin(i: number, method: 'GET' | 'PUT', path: string, body?: unknown) {
    const res = await request(`${this.gateways[i]!.url}${path}`, {
      method,
      dispatcher: this.agent,
      headers: {
        authorization: `Bearer ${ADMIN_TOKEN}`,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    return { status: res.statusCode, json: (await res.body.json()) as Record<string, unknown> };
  }

  /** `adaptive_limits` of gateway `i`'s /admin/status. */
  async statusLimits(i: number): Promise<Array<Record<string, unknown>>> {
    const { json } = await this.admin(i, 'GET', '/admin/status');
    return json.adaptive_limits as Array<Record<string, unknown>>;
  }

  /** The channel's slots in use, requests waiting and cooldown across the fleet, read from the store. */
  async fleetLoad(channel: string): Promise<{ active: number; waiting: number; cooling: boolean }> {
    const { json } = await this.admin(0, 'GET', '/admin/channels?fresh=1');
    const list = json.channels as Array<{ id: string; active: number; waiting: number; cooling: boolean }>;
    return list.find((c) => c.id === channel)!;
  }

  /** Rewrites the config file with `channels` and has every gateway reload it (SIGHUP). */
  async reconfigure(channels: FleetChannel[]): Promise<void> {
    await writeConfig(this.dir.dir, CONFIG, configOf(this.redis.url, this.upstream, channels));
    for (const gw of this.gateways) gw.proc.kill('SIGHUP');
  }

  async close(): Promise<void> {
    await Promise.all(this.gateways.map((gw) => gw.kill()));
    this.reader.disconnect();
    await this.agent.close();
    await this.upstream.close();
    await this.redis.stop();
    await this.dir.remove();
  }
}

function configOf(redisUrl: string, upstream: FakeUpstream, channels: FleetChannel[]) {
  return {
    server: { log_level: 'info' },
    redis: { url: redisUrl, prefix: PREFIX },
    admin: { token: ADMIN_TOKEN },
    tokens: [{ key: CLIENT_TOKEN, name: 'test' }],
    channels: channels.map((c) => ({
      type: 'openai',
      base_url: upstream.url(c.id),
      key: 'sk-upstream-adaptive',
      models: [c.id],
      ...c,
    })),
    // the upstream's 429 goes back to the client: each is one report, no retry on the same channel. A waiter's safety
    // poll never comes within a test: what admits a waiter is a grant or a reload's move
    settings: { retry_times: 0, wait_timeout_ms: 30_000, safety_poll_ms: 60_000 },
  };
}
