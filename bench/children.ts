/** Child processes of the benchmark: its sibling modules, forked with an IPC channel and run from source by tsx. */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export interface Child {
  proc: ChildProcess;
  send(message: unknown): void;
  /** The next message of this type (rejects on an error message or an early exit). */
  next<T>(type: string, timeoutMs?: number): Promise<T>;
  kill(): Promise<void>;
}

/** Forks bench/<name>.ts. */
export function forkChild(name: string): Child {
  const proc = fork(fileURLToPath(new URL(`./${name}.ts`, import.meta.url)), [], {
    execArgv: ['--conditions=slotgate-source', '--import', 'tsx'],
    serialization: 'advanced',
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const inbox: { type: string; [k: string]: unknown }[] = [];
  const waiting: { type: string; resolve: (m: unknown) => void; reject: (e: Error) => void }[] = [];
  let exited: Error | undefined;
  const deliver = () => {
    for (let i = 0; i < waiting.length; i++) {
      const w = waiting[i]!;
      const error = inbox.findIndex((m) => m.type === 'error');
      if (error >= 0) {
        const [m] = inbox.splice(error, 1);
        waiting.splice(i--, 1);
        w.reject(new Error(`${name} (pid ${proc.pid}) failed: ${String(m!.message)}`));
        continue;
      }
      const k = inbox.findIndex((m) => m.type === w.type);
      if (k >= 0) {
        waiting.splice(i--, 1);
        w.resolve(inbox.splice(k, 1)[0]);
      } else if (exited) {
        waiting.splice(i--, 1);
        w.reject(exited);
      }
    }
  };
  proc.on('message', (m: { type: string }) => {
    inbox.push(m);
    deliver();
  });
  proc.on('exit', (code, signal) => {
    exited = new Error(`${name} (pid ${proc.pid}) exited (code ${code}, signal ${signal})`);
    deliver();
  });
  return {
    proc,
    send: (message) => proc.send(message as object),
    next<T>(type: string, timeoutMs = 60_000) {
      return new Promise<T>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`${name}: no "${type}" within ${timeoutMs} ms`)),
          timeoutMs,
        );
        waiting.push({
          type,
          resolve: (m) => {
            clearTimeout(timer);
            resolve(m as T);
          },
          reject: (e) => {
            clearTimeout(timer);
            reject(e);
          },
        });
        deliver();
      });
    },
    async kill() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const done = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGKILL');
      await done;
    },
  };
}
