/**
 * The README's library quick start runs as written: its first ```ts block under "## Library quick start" is saved as a
 * file of its own inside the repository (so `import 'slotgate'` resolves through the workspace package's exports, as
 * in an application that installed it), type-checked by tsc with the repository's compiler options, then run by tsx
 * against a private redis-server. It must exit 0 on its own (nothing left open) within a bound, print exactly the
 * output the README shows under it (the first ```text block after the code), and leave no lease in Redis.
 */
import { spawn } from 'node:child_process';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/gw-gateway.js';
import { readmeQuickStart, type QuickStart } from '../helpers/readme.js';
import { RedisServer } from '../helpers/redis-server.js';

/** Bounds, not expectations: tsc checks the library's sources too, on a machine that may be busy. */
const TSC_MS = 120_000;
/** The quick start must end on its own: a process kept alive by an open handle is killed here and fails the test. */
const RUN_MS = 30_000;

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/** Runs `node args` in the repository root; SIGKILLs it past `boundMs`. */
function run(args: string[], boundMs: number, env: NodeJS.ProcessEnv = process.env): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, boundMs);
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut });
    });
  });
}

describe("the README's library quick start", () => {
  // git-ignored, inside the repository: node_modules/slotgate (the workspace package) is found from there
  const dir = join(ROOT, 'test-artifacts', `readme-quick-start-${process.pid}`);
  const file = join(dir, 'quick-start.mts');
  let redis: RedisServer;
  let quickStart: QuickStart;

  beforeAll(async () => {
    quickStart = await readmeQuickStart();
    redis = await RedisServer.start();
    await mkdir(dir, { recursive: true });
    await writeFile(file, quickStart.code, 'utf8');
    await writeFile(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        extends: '../../tsconfig.json',
        compilerOptions: { noEmit: true },
        files: ['quick-start.mts'],
        include: [], // not the repository's own files (the base config's `include`)
      }),
      'utf8',
    );
  });
  afterAll(async () => {
    await Promise.all([redis?.stop(), rm(dir, { recursive: true, force: true })]);
  });

  it('finds the block and its expected output', () => {
    expect(quickStart.code).toMatch(/from 'slotgate'/);
    expect(quickStart.expected.trim().split('\n').length).toBeGreaterThan(0);
  });

  it('type-checks with tsc against the library', { timeout: TSC_MS + 10_000 }, async () => {
    const tsc = await run(
      [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(dir, 'tsconfig.json')],
      TSC_MS,
    );
    expect(tsc.timedOut).toBe(false);
    expect(tsc.stdout + tsc.stderr, 'tsc diagnostics').toBe('');
    expect(tsc.code).toBe(0);
  });

  it(
    'runs against Redis, prints what the README shows, exits 0 by itself, leaves no lease',
    {
      timeout: RUN_MS + 10_000,
    },
    async () => {
      const env = { ...process.env, REDIS_URL: redis.url };
      const result = await run(['--conditions=slotgate-source', '--import', 'tsx', file], RUN_MS, env);
      expect(result.timedOut, `still running after ${RUN_MS} ms (something left open)`).toBe(false);
      expect(result.stderr).toBe('');
      expect(result.code).toBe(0);
      expect(result.stdout).toBe(quickStart.expected);
      const client = new Redis(redis.url);
      try {
        expect(await client.keys('*:v1:epoch*'), 'the quick start used this Redis').not.toEqual([]);
        const slots = await client.keys('*:v1:*:slots');
        const held = await Promise.all(slots.map((key) => client.zcard(key)));
        expect(
          held.reduce((a, b) => a + b, 0),
          'leases left in Redis',
        ).toBe(0);
      } finally {
        client.disconnect();
      }
    },
  );
});
