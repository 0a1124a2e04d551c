/**
 * Child processes of the bench: its sibling modules forked with an IPC channel and run from source by tsx, the
 * child's side of the channel, and the clock they share (wall time at monotonic resolution, one time base for every
 * process of the machine).
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export const wallNow = (): number => performance.timeOrigin + performance.now();

export const sleepUntil = (wallMs: number): Promise<void> =>
  new Promise((r) => setTimeout(r, Math.max(0, wallMs - wallNow())));

/** In a child: sends a message to the parent; resolves once it is written. */
export const sendToParent = (message: unknown): Promise<void> =>
  new Promise((resolve, reject) =>
    process.send!(message, undefined, {}, (err) => (err ? reject(err) : resolve())),
  );

/** In a child: handles the parent's messages; a failure goes to the parent as { type: 'error' } and ends the child. */
export function serveParent<M>(handle: (message: M) => Promise<void>): void {
  process.on('message', (message: M) => {
    handle(message).catch(async (err: unknown) => {
      await sendToParent({
        type: 'error',
        message: err instanceof Error ? (err.stack ?? err.message) : String(err),
      }).catch(() => {});
      process.exit(1);
    });
  });
  process.on('disconnect', () => process.exit(0));
}

export interface Child {
  send(message: unknown): void;
  /** The next message of this type (rejects on an error message or an early exit). */
  next<T>(type: string, timeoutMs?: number): Promise<T>;
  kill(): Promise<void>;
}

/** Sends each child its message (by index) and waits for every child's reply of type `reply`. */
export function askAll<T>(
  children: readonly Child[],
  message: (i: number) => unknown,
  reply: string,
  timeoutMs?: number,
): Promise<T[]> {
  return Promise.all(
    children.map((child, i) => {
      child.send(message(i));
      return child.next<T>(reply, timeoutMs);
    }),
  );
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
