/**
 * Sentinel client children (test/helpers/sentinel-client.ts) for the failover tests: start them, wait for their ready
 * lines, start and stop their load, read their summaries, and kill whatever is still running when a test ends.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { SentinelClientOptions, SentinelClientSummary } from './sentinel-client.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

export interface SentinelClient {
  proc: ChildProcess;
  ready: Promise<void>;
  summary: Promise<SentinelClientSummary>;
  stderr(): string;
}

const children: ChildProcess[] = [];

export function startSentinelClient(opts: SentinelClientOptions): SentinelClient {
  const proc = spawn(
    process.execPath,
    ['--import', 'tsx', 'test/helpers/sentinel-client.ts', JSON.stringify(opts)],
    { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  children.push(proc);
  let stdout = '';
  let stderr = '';
  const lines: Record<string, unknown>[] = [];
  const waiters: (() => void)[] = [];
  proc.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  proc.stdout!.setEncoding('utf8').on('data', (d: string) => {
    const parts = (stdout + d).split('\n');
    stdout = parts.pop()!;
    for (const line of parts) {
      try {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        stderr += `[stdout] ${line}\n`;
      }
    }
    for (const w of waiters.splice(0)) w();
  });
  const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
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
        else reject(new Error(`sentinel client exited with ${code} before "${key}"; stderr:\n${stderr}`));
      });
    });
  const ready = line('ready').then(() => undefined);
  const summary = line('summary').then((l) => l.summary as SentinelClientSummary);
  // a test that fails first never reads them: their rejection (the child killed) is no error of its own
  ready.catch(() => {});
  summary.catch(() => {});
  return {
    proc,
    ready,
    summary,
    stderr: () => stderr,
  };
}

/** Tells a client to start (`go`) or to finish its calls and report (`stop`). */
export function tell(client: SentinelClient, what: 'go' | 'stop'): void {
  client.proc.stdin!.write(`${what}\n`);
}

/** SIGKILLs every client still running (a failed or timed-out test never leaves children behind). */
export function killSentinelClients(): void {
  for (const proc of children.splice(0)) {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
  }
}
