/**
 * A private redis-server child process on a free port (`--save '' --appendonly no`), for the tests and the
 * benchmark, with the controls outage tests need: stop, start again on the same port, pause (SIGSTOP) and resume
 * (SIGCONT), and INFO commandstats.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';

export const INSTALL_HINT =
  'redis-server was not found on PATH. A real Redis is needed: install it with `apt-get install -y redis-server` ' +
  '(Debian/Ubuntu) or `brew install redis` (macOS), or set REDIS_URL to a Redis you own.';

export function assertRedisServerInstalled(): void {
  const probe = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) throw new Error(INSTALL_HINT);
}

/** A port nobody listens on right now (the OS picks it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** INFO commandstats as { command: calls }; the commands run inside Lua scripts count too. */
export function parseCommandstats(info: string): Record<string, number> {
  const stats: Record<string, number> = {};
  for (const line of info.split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
    if (m) stats[m[1]!] = Number(m[2]);
  }
  return stats;
}

/** Resolves once the server at `url` answers PING; rejects as soon as `failed()` names a reason, or after `timeoutMs`. */
async function waitForPing(url: string, failed: () => Error | undefined, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => {});
    let error: unknown;
    try {
      await client.connect();
      await client.ping();
      return;
    } catch (err) {
      error = err;
    } finally {
      client.disconnect();
    }
    const failure = failed();
    if (failure)
      throw new Error(`redis-server for ${url} did not start: ${failure.message}`, { cause: failure });
    if (Date.now() > deadline) {
      throw new Error(`redis-server at ${url} did not answer: ${(error as Error).message}`, { cause: error });
    }
    await sleep(25);
  }
}

export class RedisServer {
  private child: ChildProcess | undefined;
  private constructor(
    readonly port: number,
    /** Extra redis-server arguments (a cluster node's, a replica's). */
    private readonly extraArgs: readonly string[] = [],
  ) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  static async start(port?: number, extraArgs: readonly string[] = []): Promise<RedisServer> {
    assertRedisServerInstalled();
    const server = new RedisServer(port ?? (await freePort()), extraArgs);
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
        ...this.extraArgs,
      ],
      { stdio: 'ignore' },
    );
    this.child = child;
    let failure: Error | undefined;
    child.on('error', (err) => (failure ??= err));
    child.on('exit', (code, signal) => {
      failure ??= new Error(`it exited (code ${code}, signal ${signal})`);
      if (this.child === child) this.child = undefined;
    });
    try {
      await waitForPing(this.url, () => failure);
    } catch (err) {
      await this.stop();
      throw err;
    }
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child) return;
    this.child = undefined;
    if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return; // never ran or gone
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

  /** INFO commandstats as { command: calls }. */
  async commandstats(): Promise<Record<string, number>> {
    const client = new Redis(this.url, { maxRetriesPerRequest: 0 });
    try {
      return parseCommandstats(await client.info('commandstats'));
    } finally {
      client.disconnect();
    }
  }
}
