/**
 * The `slotgate` command line as a person meets it, run as child processes: `--version`; doctor's `--help` with its
 * heartbeat thresholds; one-line errors with the
 * cause and what to do, exit 2 for usage errors (a bad --port, a bad Redis URL, an unknown option or command) and for
 * doctor's unreachable Redis (named without its password, with the socket error); serve's unreachable Redis named with
 * the socket error, its repeated sync errors logged once; exit 1 when the port is in use — with nothing left in the
 * private Redis by that failed start; the start-up line (listening URL, dashboard, store in use); a drain that ends
 * with "shutdown complete" and exit 0, and a second SIGINT that ends it at once with exit 130.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import { freePort, RedisServer } from '../helpers/redis-server.js';
import { killAllGateways, runCli, spawnGateway, tempDir, writeConfig } from '../helpers/gw-gateway.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
afterEach(killAllGateways);

const cli = (...args: string[]) => runCli(args);

/** stderr is one line, with no stack trace. */
function expectOneLine(stderr: string): void {
  expect(stderr.trimEnd().split('\n'), stderr).toHaveLength(1);
  expect(stderr).not.toMatch(/^\s+at /m);
}

// each test starts the CLI through tsx one or more times: seconds each on a busy machine
describe('slotgate command line', { timeout: 60_000 }, () => {
  it('--version prints the gateway package version', async () => {
    const { version } = JSON.parse(
      readFileSync(new URL('../../packages/gateway/package.json', import.meta.url), 'utf8'),
    ) as { version: string };
    const run = await cli('--version');
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout.trim()).toBe(version);
  });

  it('doctor --help states the heartbeat period and both thresholds: late after 7.5 s, presumed dead after 15 s', async () => {
    const run = await cli('doctor', '--help');
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain('every 5 s');
    expect(run.stdout).toMatch(/late +its last heartbeat is older than 7\.5 s/);
    expect(run.stdout).toMatch(/dead +older than 15 s \(three missed\)/);
  });

  it('usage errors: one line naming the flag and the value, exit 2, never a password', async () => {
    const [port, url, secretUrl] = await Promise.all([
      cli('serve', '--port', 'abc'),
      cli('doctor', '--redis', 'localhost:6399x'),
      cli('serve', '--redis', 'redis://user:s3cret-pw@localhost:99999'),
    ]);
    expect(port.code).toBe(2);
    expectOneLine(port.stderr);
    expect(port.stderr).toContain('slotgate serve: --port must be an integer 1–65535');
    expect(port.stderr).toContain('got "abc"');

    expect(url.code).toBe(2);
    expectOneLine(url.stderr);
    expect(url.stderr).toContain('slotgate doctor: --redis: expected redis://');
    expect(url.stderr).toContain('got "localhost:6399x"');

    expect(secretUrl.code).toBe(2);
    expectOneLine(secretUrl.stderr);
    expect(secretUrl.stderr).toContain('--redis: expected redis://');
    expect(secretUrl.stderr).not.toContain('s3cret-pw');
  });

  it('an unknown option or command is a usage error: exit 2, what was wrong and where help is', async () => {
    const [option, command] = await Promise.all([cli('serve', '--bogus'), cli('frobnicate')]);
    for (const run of [option, command]) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).not.toMatch(/\n\s+at /); // no stack
      expect(run.stderr).toContain('(add --help for usage)');
    }
    expect(option.stderr).toContain("slotgate: unknown option '--bogus'");
    expect(command.stderr).toContain("slotgate: unknown command 'frobnicate'");
  });

  it('doctor with an unreachable Redis names it (without its password) and the socket error, exit 2', async () => {
    const port = await freePort(); // nothing listens there
    const run = await cli('doctor', '--redis', `redis://:s3cret-pw@127.0.0.1:${port}`);
    expect(run.code).toBe(2);
    expectOneLine(run.stderr);
    expect(run.stderr).toContain(`slotgate doctor: cannot reach Redis redis://127.0.0.1:${port}`);
    expect(run.stderr).toContain('ECONNREFUSED');
    expect(run.stderr).not.toContain('s3cret-pw');
  });

  it('serve with an unreachable Redis names it with the socket error and logs each sync error once', async () => {
    const port = await freePort(); // nothing listens there
    const gw = await spawnGateway({ args: ['--redis', `redis://:s3cret-pw@127.0.0.1:${port}`] });
    await gw.ready;
    const lines = () =>
      gw
        .output()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as { level: number; msg: string; err?: string });
    // the health check follows the start-up line; the settings subscription retries meanwhile (each retry fails, and
    // without the once-a-minute rule each failure was a line)
    for (let i = 0; i < 100 && !lines().some((l) => l.msg.startsWith('cannot reach')); i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await new Promise((resolve) => setTimeout(resolve, 1500));
    await gw.kill();
    const unreachable = lines().find((l) => l.msg.startsWith('cannot reach'));
    expect(unreachable?.msg, gw.output()).toContain(
      `cannot reach Redis redis://127.0.0.1:${port}: connect ECONNREFUSED`,
    );
    expect(unreachable?.msg).toContain('store_failure_mode fail_closed applies until it answers');
    const syncErrors = lines().filter((l) => l.msg === 'settings sync' && l.level >= 50);
    expect(syncErrors.length).toBeGreaterThan(0);
    expect(new Set(syncErrors.map((l) => l.err)).size, JSON.stringify(syncErrors)).toBe(syncErrors.length);
    expect(gw.output()).not.toContain('s3cret-pw');
  });

  it('a port in use: one line with the address and what to do, exit 1, nothing left in Redis', async () => {
    const redisServer = await RedisServer.start();
    cleanups.push(() => redisServer.stop());
    const redis = new Redis(redisServer.url);
    cleanups.push(() => void redis.disconnect());
    const busy = createServer();
    busy.listen(0, '127.0.0.1');
    await once(busy, 'listening');
    cleanups.push(() => void busy.close());
    const port = (busy.address() as { port: number }).port;

    const gw = await spawnGateway({ port, args: ['--redis', redisServer.url] });
    const { code } = await gw.exited;
    expect(code).toBe(1);
    const stderr = gw
      .output()
      .split('\n')
      .filter((l) => l.startsWith('slotgate serve:'));
    expect(stderr, gw.output()).toHaveLength(1);
    expect(stderr[0]).toContain(`cannot listen on 127.0.0.1:${port}: the address is in use (EADDRINUSE)`);
    expect(stderr[0]).toContain('--port');
    expect(gw.output()).not.toMatch(/^\s+at /m);
    // the instance had announced itself before listening: the failed start took its entry out again
    expect(await redis.hlen('slotgate:v1:instances')).toBe(0);
  });

  it('the start-up line names the listening URL, the dashboard and the store in use', async () => {
    const redisServer = await RedisServer.start();
    cleanups.push(() => redisServer.stop());
    const [memory, withRedis] = await Promise.all([
      spawnGateway(),
      spawnGateway({ args: ['--redis', redisServer.url.replace('redis://', 'redis://:pw@')] }),
    ]);
    await Promise.all([memory.ready, withRedis.ready]);
    const line = (gw: typeof memory) =>
      gw
        .output()
        .split('\n')
        .find((l) => l.includes('slotgate listening on'))!;
    expect(line(memory)).toContain(
      `slotgate listening on ${memory.url} — dashboard ${memory.url}/dashboard — store: embedded in-process store`,
    );
    // the password is not shown (this Redis has none: it answers the AUTH with an error and serves anyway)
    const redisPort = new URL(redisServer.url).port;
    expect(line(withRedis)).toContain(`store: Redis redis://127.0.0.1:${redisPort}`);
    expect(line(withRedis)).toContain('prefix \\"slotgate\\"');
    expect(withRedis.output()).not.toContain(':pw@');
  });

  describe('shutdown', () => {
    /** A gateway whose only channel answers after a minute, with a minute to drain. */
    async function slowGateway() {
      const dir = await tempDir();
      cleanups.push(() => dir.remove());
      const configPath = await writeConfig(dir.dir, 'slow.yaml', {
        server: { host: '127.0.0.1', drain_timeout_ms: 60_000 },
        tokens: [{ key: 'sk-test', name: 'test', group: 'default' }],
        channels: [
          { id: 'slow', type: 'mock', models: ['m'], max_concurrency: 1, mock: { latency_ms: 60_000 } },
        ],
      });
      const gw = await spawnGateway({ configPath });
      await gw.ready;
      return gw;
    }

    const messages = (output: string) =>
      output
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => (JSON.parse(l) as { msg: string }).msg);

    it('one SIGINT drains and logs "shutdown complete" last, exit 0', async () => {
      const gw = await slowGateway();
      gw.proc.kill('SIGINT');
      const { code } = await gw.exited;
      expect(code).toBe(0);
      const msgs = messages(gw.output());
      const shutting = msgs.findIndex((m) => m.startsWith('shutting down'));
      expect(shutting, gw.output()).toBeGreaterThanOrEqual(0);
      expect(msgs.at(-1)).toBe('shutdown complete');
    });

    it('a second SIGINT during the drain ends it at once, exit 130', async () => {
      const gw = await slowGateway();
      // a request in flight that takes a minute: the drain would wait for it
      const inFlight = fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: 'Bearer sk-test', 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
      }).catch((err: unknown) => err);
      for (;;) {
        const text = await (await fetch(`${gw.url}/metrics`)).text();
        if (/^slotgate_live_leases 1$/m.test(text)) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      gw.proc.kill('SIGINT');
      while (!gw.output().includes('shutting down')) await new Promise((r) => setTimeout(r, 20));
      gw.proc.kill('SIGINT');
      const { code } = await gw.exited;
      expect(code).toBe(130);
      const msgs = messages(gw.output());
      const first = msgs.findIndex((m) => m.startsWith('shutting down'));
      const second = msgs.findIndex((m) => m.startsWith('second signal: stopping now'));
      expect(first, gw.output()).toBeGreaterThanOrEqual(0);
      expect(second).toBeGreaterThan(first);
      expect(msgs).not.toContain('shutdown complete');
      expect(await inFlight).toBeInstanceOf(Error); // cut off
    });
  });
});
