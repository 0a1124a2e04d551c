/**
 * One holder at a time for the packages' dist/ folders. `npm run build`, and `npm pack` through prepack, delete
 * dist/ before they write it again, so two test files (run in parallel worker processes) that build the packages or
 * run what was built would pull dist/ from under each other. Each holds this lock from its build until it no longer
 * needs dist/. The lock is a file holding the holder's pid; a holder that died leaves one that the next taker removes.
 */
import { readFileSync, rmSync, statSync } from 'node:fs';
import { mkdir, open } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ROOT } from './gw-gateway.js';

const LOCK = join(ROOT, 'node_modules', '.cache', 'slotgate-dist.lock');
/** A lock file still empty this long after it was made belongs to a process that died while taking it. */
const EMPTY_GRACE_MS = 5_000;

function holderIsGone(): boolean {
  let pid: number;
  try {
    const text = readFileSync(LOCK, 'utf8');
    if (!text) return Date.now() - statSync(LOCK).mtimeMs > EMPTY_GRACE_MS;
    pid = Number(text);
  } catch {
    return false; // released meanwhile: the next try takes it
  }
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** Waits for the lock (at most timeoutMs) and returns its release, which is safe to call more than once. */
export async function lockBuiltPackages(timeoutMs = 240_000): Promise<() => void> {
  await mkdir(dirname(LOCK), { recursive: true });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const file = await open(LOCK, 'wx');
      await file.writeFile(String(process.pid));
      await file.close();
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    if (holderIsGone()) {
      rmSync(LOCK, { force: true });
      continue;
    }
    if (Date.now() > deadline) {
      throw new Error(`the packages' dist/ stayed locked (${LOCK}) for ${timeoutMs} ms`);
    }
    await sleep(200);
  }
  let held = true;
  const release = () => {
    if (!held) return;
    held = false;
    process.off('exit', release);
    rmSync(LOCK, { force: true });
  };
  process.once('exit', release);
  return release;
}
