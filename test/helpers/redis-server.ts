/**
 * A private redis-server child process on a free port (`--save '' --appendonly no`), with the controls outage tests
 * need: stop, start again on the same port, pause (SIGSTOP) and resume (SIGCONT), and INFO commandstats.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { freePort, parseCommandstats } from '../../bench/redis.js';

export const INSTALL_HINT =
  'redis-server was not found on PATH. The tests need a real Redis: install it with `apt-get install -y redis-server` ' +
  '(Debian/Ubuntu) or `brew install redis` (macOS), or set REDIS_URL to a Redis you own.';

export function assertRedisServerInstalled(): void {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) throw new Error(INSTALL_HINT);
}

export { freePort };

async function waitForPing(url: string, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.ping();
      return;
    } catch (err) {
      if (Date.now() > deadline) {
        throw new Error(`redis-server at ${url} did not answer: ${(err as Error).message}`, { cause: err });
      }
      await new Promise((r) => setTimeout(r, 25));
    } finally {
      client.disconnect();
    }
  }
}

export interface CommandStat {
  calls: number;
}

export class RedisServer {
  private child: ChildProcess | undefined;
  private constructor(readonly port: number) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  static async start(port?: number): Promise<RedisServer> {
    assertRedisServerInstalled();
    const server = new RedisServer(port ?? (await freePort()));
    await server.start();
    return server;
  }

  async start(): Promise<void> {
    if (this.child) return;
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--protected-mode',
        'no',
      ],
      { stdio: 'ignore' },
    );
    this.child = child;
    child.on('exit', () => {
      if (this.child === child) this.child = undefined;
    });
    await waitForPing(this.url);
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child) return;
    this.child = undefined;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGCONT');
    child.kill('SIGKILL');
    await exited;
  }

  async restart(): Promise<void> {
    await this.stop();
    await this.start();
  }

  /** Freezes the server: connections stay open, nothing is answered until resume(). */
  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  resume(): void {
    this.child?.kill('SIGCONT');
  }

  /** INFO commandstats as { command: calls }; Lua-internal commands count too. */
  async commandstats(): Promise<Record<string, number>> {
    const client = new Redis(this.url, { maxRetriesPerRequest: 0 });
    try {
      return parseCommandstats(await client.info('commandstats'));
    } finally {
      client.disconnect();
    }
  }
}

export { parseCommandstats };
