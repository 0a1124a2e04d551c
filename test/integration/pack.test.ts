/**
 * Both packages as a user gets them: `npm pack` the two workspaces (prepack builds dist/), check what the tarballs
 * hold, install them into an empty project — where no `slotgate-source` condition exists, so everything runs from
 * dist/ — and run them there: the README's library quick start (compiled by tsc) against the test Redis, TypeScript
 * on the installed types, and the installed `slotgate` command (help, the built-in demo gateway, doctor).
 */
import { execFile, type ExecFileException } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { delimiter, dirname, join, relative } from 'node:path';
import { Redis } from 'ioredis';
import { beforeAll, describe, expect, it } from 'vitest';
import { useCleanups } from '../helpers/cleanups.js';
import { ROOT, cleanEnv, logLines, spawnGateway, tempDir } from '../helpers/gw-gateway.js';
import { readmeQuickStart } from '../helpers/readme.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';

/** Bounds, not expectations: a cold build and a fresh install on a busy 2-core machine take tens of seconds. */
const PACK_MS = 240_000;
const INSTALL_MS = 240_000;
const COMMAND_MS = 60_000;
/** The quick start must end on its own: a process kept alive by an open handle is killed here and fails the test. */
const QUICK_START_MS = 20_000;
const TSC_MS = 120_000;
/** Every test's own bound: above the bounds of the commands it runs. */
const TEST_MS = 180_000;

const PACKAGES = [
  { name: 'slotgate', dir: 'packages/slotgate' },
  { name: 'slotgate-gateway', dir: 'packages/gateway' },
] as const;

interface RunResult {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  /** The command line, the exit and everything printed, for failure messages. */
  report: string;
}

/** Runs a command to its end, or SIGKILLs it after timeoutMs; never rejects. */
function run(
  command: string,
  args: string[],
  opts: { cwd: string; env?: NodeJS.ProcessEnv; timeoutMs?: number },
): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(
      command,
      args,
      {
        cwd: opts.cwd,
        env: opts.env ?? consumerEnv(),
        timeout: opts.timeoutMs ?? COMMAND_MS,
        killSignal: 'SIGKILL',
        maxBuffer: 64 * 1024 * 1024,
      },
      (err: ExecFileException | null, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : null) : 0;
        const signal = err?.signal ?? null;
        const exit = err && code === null && !signal ? err.message : `exit ${code}, signal ${signal}`;
        const report = `$ ${[command, ...args].join(' ')} (${exit})\n${stdout}\n${stderr}`;
        resolve({ code, signal, stdout, stderr, report });
      },
    );
  });
}

/**
 * A user's environment: this Node first on the PATH (for `#!/usr/bin/env node`), and none of what the repository's
 * own runs may set (REDIS_URL, SLOTGATE_CONFIG, NODE_OPTIONS carrying the slotgate-source condition).
 */
function consumerEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = cleanEnv(extra);
  delete env.NODE_OPTIONS;
  env.PATH = [dirname(process.execPath), env.PATH].filter(Boolean).join(delimiter);
  return env;
}

/** Paths of every file below dir, relative to it, with `/` separators. */
function filesBelow(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)).split('\\').join('/'));
}

/** What dist/ must hold for a package's src/: a module and its types per source file, and every runtime asset. */
function expectedDist(packageDir: string): string[] {
  const expected: string[] = [];
  for (const file of filesBelow(join(ROOT, packageDir, 'src'))) {
    if (file.endsWith('.ts')) expected.push(`dist/${file.slice(0, -3)}.js`, `dist/${file.slice(0, -3)}.d.ts`);
    else if (/\.(lua|yaml|html|css)$/.test(file)) expected.push(`dist/${file}`);
  }
  return expected;
}

interface Packed {
  tarball: string;
  /** Paths inside the tarball, without the leading `package/`. */
  files: string[];
}

/**
 * `npm pack` of both workspaces into dir (prepack rebuilds each package's dist/). This is the only test that builds:
 * every other one runs the sources, so nothing pulls dist/ from under it.
 */
async function packWorkspaces(dir: string): Promise<Map<string, Packed>> {
  const workspaces = PACKAGES.flatMap((p) => ['--workspace', p.name]);
  const pack = await run('npm', ['pack', ...workspaces, '--pack-destination', dir, '--json'], {
    cwd: ROOT,
    env: cleanEnv(),
    timeoutMs: PACK_MS,
  });
  if (pack.code !== 0) throw new Error(`npm pack failed:\n${pack.report}`);
  const packed = new Map<string, Packed>();
  for (const { name, filename } of JSON.parse(pack.stdout) as Array<{ name: string; filename: string }>) {
    const tarball = join(dir, filename);
    const list = await run('tar', ['-tzf', tarball], { cwd: dir });
    if (list.code !== 0) throw new Error(`tar failed:\n${list.report}`);
    const files = list.stdout
      .split('\n')
      .filter(Boolean)
      .map((path) => path.replace(/^package\//, ''));
    packed.set(name, { tarball, files });
  }
  const missing = PACKAGES.filter((p) => !packed.has(p.name)).map((p) => p.name);
  if (missing.length) throw new Error(`npm pack made no tarball for ${missing.join(', ')}:\n${pack.report}`);
  return packed;
}

/** An empty ESM project in dir with the tarballs installed; returns the install's run. */
async function installIntoEmptyProject(dir: string, tarballs: string[]): Promise<RunResult> {
  for (const args of [
    ['init', '-y'],
    ['pkg', 'set', 'type=module'],
  ]) {
    const step = await run('npm', args, { cwd: dir });
    if (step.code !== 0) throw new Error(`npm ${args.join(' ')} failed:\n${step.report}`);
  }
  const install = await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', ...tarballs], {
    cwd: dir,
    timeoutMs: INSTALL_MS,
  });
  if (install.code !== 0) throw new Error(`npm install failed:\n${install.report}`);
  return install;
}

const cleanups = useCleanups('all');
let project = '';
let packed = new Map<string, Packed>();
let install: RunResult;

beforeAll(
  async () => {
    const tmp = await tempDir();
    cleanups.push(tmp.remove);
    const packDir = join(tmp.dir, 'tarballs');
    project = join(tmp.dir, 'project');
    await mkdir(packDir);
    await mkdir(project);
    packed = await packWorkspaces(packDir);
    install = await installIntoEmptyProject(
      project,
      PACKAGES.map((p) => packed.get(p.name)!.tarball),
    );
  },
  PACK_MS + INSTALL_MS + 2 * COMMAND_MS,
);

describe('npm pack', { timeout: TEST_MS }, () => {
  it.each(PACKAGES)(
    '$name: dist/ with every module, its types and assets, LICENSE, README.md; nothing else',
    (p) => {
      const files = packed.get(p.name)?.files;
      expect(files, `no tarball for ${p.name}`).toBeDefined();
      expect(files).toEqual(
        expect.arrayContaining(['package.json', 'LICENSE', 'README.md', ...expectedDist(p.dir)]),
      );
      const stray = files!.filter(
        (f) => !/^(package\.json|LICENSE|README\.md|dist\/.+\.(js|d\.ts|lua|yaml|html|css))$/.test(f),
      );
      expect(stray).toEqual([]);
      expect(files!.filter((f) => /(^|\/)(src|test|bench)\/|\.test\.|\.map$/.test(f))).toEqual([]);
    },
  );

  it('holds the entry points, the Lua scripts, the command line and the dashboard and demo config', () => {
    expect(packed.get('slotgate')?.files).toEqual(
      expect.arrayContaining([
        'dist/index.js',
        'dist/index.d.ts',
        'dist/store/redis/lua/includes/redisNow.lua',
      ]),
    );
    expect(
      packed.get('slotgate')!.files.filter((f) => /^dist\/store\/redis\/lua\/[^/]+\.lua$/.test(f)),
    ).not.toEqual([]);
    expect(packed.get('slotgate-gateway')?.files).toEqual(
      expect.arrayContaining(['dist/index.js', 'dist/cli/main.js', 'dist/dashboard.html', 'dist/demo.yaml']),
    );
  });
});

describe('npm install of both tarballs into an empty project', { timeout: TEST_MS }, () => {
  it('prints no engine warning; the library depends on ioredis, zod and cluster-key-slot only', async () => {
    expect(install.report).not.toMatch(/EBADENGINE/);
    const library = JSON.parse(
      await readFile(join(project, 'node_modules/slotgate/package.json'), 'utf8'),
    ) as Record<string, Record<string, string> | undefined>;
    expect(Object.keys(library.dependencies ?? {}).sort()).toEqual(['cluster-key-slot', 'ioredis', 'zod']);
    expect(library.peerDependencies).toBeUndefined();
    expect(library.optionalDependencies).toBeUndefined();

    // The tree as installed: under slotgate only those three, and the gateway uses this very slotgate.
    const ls = await run('npm', ['ls', '--all', '--json'], { cwd: project });
    expect(ls.code, ls.report).toBe(0);
    type Node = { version?: string; dependencies?: Record<string, Node> };
    const tree = JSON.parse(ls.stdout) as Node;
    expect(Object.keys(tree.dependencies?.slotgate?.dependencies ?? {}).sort()).toEqual([
      'cluster-key-slot',
      'ioredis',
      'zod',
    ]);
    expect(tree.dependencies?.['slotgate-gateway']?.dependencies?.slotgate?.version).toBe('0.2.0');
    await expect(
      stat(join(project, 'node_modules/slotgate-gateway/node_modules/slotgate')),
    ).rejects.toThrow();
  });

  /** tsc in the consumer project, on the installed packages' dist/ types, with a user's strict options. */
  const tsc = (args: string[]) =>
    run(
      process.execPath,
      [
        join(ROOT, 'node_modules/typescript/bin/tsc'),
        ...['--strict', '--target', 'es2023', '--module', 'nodenext'],
        ...['--types', 'node', '--typeRoots', join(ROOT, 'node_modules/@types')],
        ...args,
      ],
      { cwd: project, timeoutMs: TSC_MS },
    );

  it("runs the README's library quick start as written, which ends on its own and leaves no lease", async () => {
    const quickStart = await readmeQuickStart();
    await writeFile(join(project, 'quick-start.ts'), quickStart.code);
    const compiled = await tsc(['--outDir', 'out', 'quick-start.ts']);
    expect(compiled.code, compiled.report).toBe(0);
    const redis = new Redis(redisUrl());
    cleanups.push(() => redis.disconnect());
    // The quick start uses the default prefix; its keys are cleared first so the check below sees only this run.
    const keys = ['slots', 'fifo', 'cooldown'].map((k) => `slotgate:v1:{openai-a}:${k}`);
    await redis.del(...keys);
    try {
      const result = await run(process.execPath, ['out/quick-start.js'], {
        cwd: project,
        env: consumerEnv({ REDIS_URL: redisUrl() }),
        timeoutMs: QUICK_START_MS,
      });
      expect(result.signal, `still running after ${QUICK_START_MS} ms:\n${result.report}`).toBeNull();
      expect(result.code, result.report).toBe(0);
      expect(result.stdout).toBe(quickStart.expected);
      expect(await redis.zcard(keys[0]!)).toBe(0);
      expect(await redis.zcard(keys[1]!)).toBe(0);
    } finally {
      await redis.del(...keys);
    }
  });

  it('TypeScript resolves both packages to their dist/ types and accepts the quick start', async () => {
    await writeFile(join(project, 'quick-start.ts'), (await readmeQuickStart()).code);
    await writeFile(
      join(project, 'consumer.ts'),
      "export type { Admission, Ticket } from 'slotgate';\nexport type { Gateway, GatewayOptions } from 'slotgate-gateway';\n",
    );
    const checked = await tsc(['--noEmit', 'consumer.ts', 'quick-start.ts']);
    expect(checked.code, checked.report).toBe(0);
  });
});

describe('the installed slotgate command', { timeout: TEST_MS }, () => {
  it('is an executable node script that lists serve and doctor', async () => {
    const main = join(project, 'node_modules/slotgate-gateway/dist/cli/main.js');
    expect((await readFile(main, 'utf8')).split('\n')[0]).toBe('#!/usr/bin/env node');
    expect((await stat(main)).mode & 0o111).toBe(0o111);
    const help = await run(join(project, 'node_modules/.bin/slotgate'), ['--help'], { cwd: project });
    expect(help.code, help.report).toBe(0);
    expect(help.stdout).toMatch(/^\s+serve\b/m);
    expect(help.stdout).toMatch(/^\s+doctor\b/m);
  });

  it('serve without a config runs the built-in demo, streams a chat completion, and exits 0 on SIGTERM', async () => {
    const gw = await spawnGateway({ bin: join(project, 'node_modules/.bin/slotgate'), cwd: project });
    try {
      await gw.ready;
      const listening = logLines(gw.output()).find((l) => String(l.msg).startsWith('slotgate listening'));
      expect(listening).toMatchObject({ store: 'memory', config: '<built-in demo>' });

      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: 'Bearer sk-slotgate-demo', 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'gpt-4o-mini',
          stream: true,
          messages: [{ role: 'user', content: 'Hi' }],
        }),
        signal: AbortSignal.timeout(COMMAND_MS),
      });
      const text = await res.text();
      expect(res.status, text).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
      expect(events.at(-1)).toBe('data: [DONE]');
      const chunks = events
        .slice(0, -1)
        .map(
          (e) =>
            JSON.parse(e.slice(6)) as { object: string; choices: Array<{ delta: { content?: string } }> },
        );
      expect(chunks.length, text).toBeGreaterThan(1);
      for (const c of chunks) expect(c.object).toBe('chat.completion.chunk');
      expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toMatch(/^Hello from .*slotgate/);

      // The demo has client tokens: no token, no answer.
      const anonymous = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }] }),
        signal: AbortSignal.timeout(COMMAND_MS),
      });
      expect(anonymous.status).toBe(401);
      expect(((await anonymous.json()) as { error: { code: string } }).error.code).toBe('invalid_api_key');

      gw.proc.kill('SIGTERM');
      let timer: NodeJS.Timeout | undefined;
      const exit = await Promise.race([
        gw.exited,
        new Promise((resolve) => (timer = setTimeout(resolve, COMMAND_MS, 'still running'))),
      ]).finally(() => clearTimeout(timer));
      expect(exit, gw.output()).toEqual({ code: 0, signal: null });
    } finally {
      await gw.kill();
    }
  });

  it('doctor on a clean prefix of the test Redis exits 0 with "clean"', async () => {
    const doctor = await run(
      join(project, 'node_modules/.bin/slotgate'),
      ['doctor', '--redis', redisUrl(), '--prefix', uniquePrefix('pack')],
      { cwd: project },
    );
    expect(doctor.code, doctor.report).toBe(0);
    expect(doctor.stdout).toContain('clean');
  });
});
