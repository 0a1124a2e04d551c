/**
 * The bench's child processes: sibling modules forked with an IPC channel and run by tsx, the child's side of the
 * channel, and the clock they share (wall time at monotonic resolution).
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
  const inbox: { type: string }[] = [];
  const waiting: { type: string; resolve: (m: unknown) => void; reject: (e: Error) => void }[] = [];
  // the child's error message, else its exit: every waiter left gets it
  let failed: Error | undefined;
  const deliver = () => {
    for (const w of [...waiting]) {
      const k = inbox.findIndex((m) => m.type === w.type);
      if (k < 0 && !failed) continue;
      waiting.splice(waiting.indexOf(w), 1);
      if (k >= 0) w.resolve(inbox.splice(k, 1)[0]);
      else w.reject(failed!);
    }
  };
  proc.on('message', (m: { type: string; message?: unknown }) => {
    if (m.type === 'error') failed ??= new Error(`${name} (pid ${proc.pid}) failed: ${String(m.message)}`);
    else inbox.push(m);
    deliver();
  });
  proc.on('exit', (code, signal) => {
    failed ??= new Error(`${name} (pid ${proc.pid}) exited (code ${code}, signal ${signal})`);
    deliver();
  });
  return {
    send: (message) => proc.send(message as object),
    next<T>(type: string, timeoutMs = 60_000) {
      let timer: NodeJS.Timeout | undefined;
      return new Promise<T>((resolve, reject) => {
        timer = setTimeout(
          () => reject(new Error(`${name}: no "${type}" within ${timeoutMs} ms`)),
          timeoutMs,
        );
        waiting.push({ type, resolve: resolve as (m: unknown) => void, reject });
        deliver();
      }).finally(() => clearTimeout(timer));
    },
    async kill() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const done = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGKILL');
      await done;
    },
  };
}
