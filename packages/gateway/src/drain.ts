/**
 * The drain a SIGTERM starts, in the order a load balancer needs (docs/operations.md, "Stopping"): /readyz fails at
 * once while the listener goes on serving for server.drain_delay_ms, long enough for the balancer to take the
 * instance out; then requests still waiting for a slot, and any new one, are answered 503 shutting_down so their
 * clients retry elsewhere, while requests in flight run on up to server.drain_timeout_ms.
 */
import { HttpError } from './http-errors.js';

export class Drain {
  #phase: 'serving' | 'draining' | 'closing' = 'serving';
  /** One per request waiting for a slot now. */
  readonly #waits = new Set<AbortController>();

  /** Since SIGTERM: /readyz fails. */
  get draining(): boolean {
    return this.#phase !== 'serving';
  }

  /** Since the delay ended: waits end and new requests are refused. */
  get closing(): boolean {
    return this.#phase === 'closing';
  }

  begin(): void {
    if (this.#phase === 'serving') this.#phase = 'draining';
  }

  close(): void {
    this.#phase = 'closing';
    for (const wait of this.#waits) wait.abort();
    this.#waits.clear();
  }

  /**
   * The signal one wait for a slot runs under: the request's own `stop`, or the drain's close. `done` once the wait
   * is over; `refused` then says whether the drain ended it (the client is still there to be told).
   */
  wait(stop: AbortSignal): { signal: AbortSignal; done: () => void; refused: () => boolean } {
    const wait = new AbortController();
    const end = () => wait.abort();
    if (stop.aborted || this.closing) wait.abort();
    else {
      stop.addEventListener('abort', end, { once: true });
      this.#waits.add(wait);
    }
    return {
      signal: wait.signal,
      done: () => {
        this.#waits.delete(wait);
        stop.removeEventListener('abort', end);
      },
      refused: () => wait.signal.aborted && !stop.aborted,
    };
  }
}

/** The answer to a request this instance will not serve because it is shutting down: retry, another will. */
export function shuttingDown(): HttpError {
  return new HttpError(
    'shutting_down',
    'slotgate: this instance is shutting down; retry the request (another instance will take it)',
    // x-should-retry: the openai SDK retries on it whatever the status
    { 'retry-after': '1', 'x-should-retry': 'true', connection: 'close' },
  );
}
