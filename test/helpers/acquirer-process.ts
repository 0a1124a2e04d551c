/**
 * Acquirer child processes (test/helpers/acquirer.ts) for the multi-process tests: start one, wait for its ready line,
 * read its summary, and kill whatever is still running when a test ends.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { AcquirerOptions, AcquirerSummary } from './acquirer.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export interface AcquirerProcess {
  proc: ChildProcess;
  stdout: string;
  stderr: string;
  ready: Promise<void>;
  summary: Promise<AcquirerSummary>;
}

const children: AcquirerProcess[] = [];

/** Starts one acquirer child; it prints ready, then waits for a `go` line on its stdin. */
export function startAcquirer(opts: AcquirerOptions): AcquirerProcess {
  const proc = spawn(
    process.execPath,
    ['--import', 'tsx', 'test/helpers/acquirer.ts', JSON.stringify(opts)],
    {
      cwd: ROOT,
      stdio: ['pipe', 'pipe', 'pipe'],
    },
  );
  const child = { proc, stdout: '', stderr: '' } as AcquirerProcess;
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

/** SIGKILLs every acquirer still running (a failed or timed-out test never leaves children behind). */
export function killAcquirers(): void {
  for (const c of children.splice(0)) {
    if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
  }
}

/** Rejects after `ms` with `what`, so a hang fails with a message instead of the test time-out. */
export function within<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    work.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
    }),
  ]);
}
