/**
 * Real `slotgate serve` child processes for the integration tests: write a config file, start the CLI (through tsx
 * from src/, or an installed package's bin) on a port picked by freePort(), wait for its
 * "slotgate listening" log line, and kill whatever is still running when a test ends — or when the test process
 * itself exits, so a crashed run leaves no gateway behind.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify as toYaml } from 'yaml';
import { freePort } from './redis-server.js';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface GwProcess {
  proc: ChildProcess;
  port: number;
  url: string;
  /** Everything the process wrote so far (stdout and stderr, interleaved as received). */
  output(): string;
  /** Resolves when the process has exited (never rejects). */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Resolves on the "slotgate listening" log line; rejects if the process exits or hangs first. */
  ready: Promise<void>;
  /** SIGKILL if still running, then wait for the exit. */
  kill(): Promise<void>;
}

export interface SpawnOptions {
  /** Path of the config file; omitted = no --config (the bundled demo, unless SLOTGATE_CONFIG is set). */
  configPath?: string;
  /**
   * A `slotgate` command to run, e.g. the bin of an installed package. By default the CLI's source runs through tsx
   * with the library's source (the `slotgate-source` condition: without it the gateway's `import 'slotgate'` would
   * load the library's dist/, which may be missing, stale, or being rebuilt by the pack test).
   */
  bin?: string;
  /** The child's working directory. @default the repository root */
  cwd?: string;
  /** @default freePort() */
  port?: number;
  /** Extra arguments after `serve`. */
  args?: string[];
  /** The child's environment. @default process.env without REDIS_URL and SLOTGATE_CONFIG */
  env?: NodeJS.ProcessEnv;
  /** How long to wait for the listening line. @default 15000 */
  readyTimeoutMs?: number;
}

const running = new Set<ChildProcess>();

function killNow(proc: ChildProcess): void {
  if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
}

process.once('exit', () => {
  for (const proc of running) killNow(proc);
});

/** What `slotgate serve` would pick up on its own (REDIS_CLUSTER_NODES may be set for the test harness itself). */
const SERVE_ENV = [
  'REDIS_URL',
  'REDIS_CLUSTER_NODES',
  'REDIS_SENTINELS',
  'REDIS_SENTINEL_MASTER',
  'SLOTGATE_CONFIG',
] as const;

/** The test process's environment minus what `slotgate serve` would pick up on its own. */
export function cleanEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env = { ...process.env, ...extra };
  for (const name of SERVE_ENV) if (!(name in extra)) delete env[name];
  return env;
}

export async function spawnGateway(opts: SpawnOptions = {}): Promise<GwProcess> {
  const port = opts.port ?? (await freePort());
  const entry = opts.bin
    ? [opts.bin]
    : ['--conditions=slotgate-source', '--import', 'tsx', join(ROOT, 'packages/gateway/src/cli/main.ts')];
  const args = [
    ...entry,
    'serve',
    ...(opts.configPath ? ['--config', opts.configPath] : []),
    '--port',
    String(port),
    ...(opts.args ?? []),
  ];
  const proc = spawn(process.execPath, args, {
    cwd: opts.cwd ?? ROOT,
    env: opts.env ?? cleanEnv(),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(proc);
  let output = '';
  const onData = (d: string) => (output += d);
  proc.stdout!.setEncoding('utf8').on('data', onData);
  proc.stderr!.setEncoding('utf8').on('data', onData);

  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    // 'close', not 'exit': it comes once stdout and stderr have been read to their end, so output() is whole
    proc.once('close', (code, signal) => {
      running.delete(proc);
      resolve({ code, signal });
    });
  });

  const ready = new Promise<void>((resolve, reject) => {
    const timeoutMs = opts.readyTimeoutMs ?? 15_000;
    const timer = setTimeout(() => {
      reject(new Error(`gateway on port ${port} did not start within ${timeoutMs} ms; output:\n${output}`));
    }, timeoutMs);
    const check = () => {
      if (/"msg":"slotgate listening on /.test(output)) {
        clearTimeout(timer);
        proc.stdout!.off('data', check);
        resolve();
      }
    };
    proc.stdout!.on('data', check);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(
        new Error(`gateway exited (code ${code}, signal ${signal}) before listening; output:\n${output}`),
      );
    });
  });
  ready.catch(() => {}); // callers that only want the exit need not handle it

  return {
    proc,
    port,
    url: `http://127.0.0.1:${port}`,
    output: () => output,
    exited,
    ready,
    async kill() {
      killNow(proc);
      await exited;
    },
  };
}

/** SIGKILLs every gateway still running and waits for them to exit. */
export async function killAllGateways(): Promise<void> {
  const exits = [...running].map(
    (proc) =>
      new Promise<void>((resolve) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
        proc.once('exit', () => resolve());
        killNow(proc);
      }),
  );
  await Promise.all(exits);
}

/** A temporary directory for config files; remove() deletes it. */
export async function tempDir(): Promise<{ dir: string; remove(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'slotgate-gw-'));
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

/** Writes `config` as YAML to dir/name and returns the path. */
export async function writeConfig(dir: string, name: string, config: unknown): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, typeof config === 'string' ? config : toYaml(config), 'utf8');
  return path;
}

/** Parsed pino log lines of a process's output (non-JSON lines skipped). */
export function logLines(output: string): Array<Record<string, unknown>> {
  const lines: Array<Record<string, unknown>> = [];
  for (const line of output.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // a partial line or a non-log line
    }
  }
  return lines;
}

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * One run of the `slotgate` command from source (through tsx, as spawnGateway), to its exit: its exit code (-1 when
 * it was killed) and output. `env` defaults to cleanEnv(): no Redis of the test process's own.
 */
export function runCli(args: readonly string[], env: NodeJS.ProcessEnv = cleanEnv()): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [
        '--conditions=slotgate-source',
        '--import',
        'tsx',
        join(ROOT, 'packages/gateway/src/cli/main.ts'),
        ...args,
      ],
      { cwd: ROOT, env, timeout: 20_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** 'refused' when nothing listens on the port any more, 'accepted' while something does. */
export function tryConnect(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve('accepted');
    });
    socket.once('error', (err: NodeJS.ErrnoException) =>
      resolve(err.code === 'ECONNREFUSED' ? 'refused' : `error ${err.code}`),
    );
  });
}
