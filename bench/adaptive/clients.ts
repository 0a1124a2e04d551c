/**
 * The adaptive scenario's load on the gateways: closed loop (clients that send their next request once the last is
 * answered, waiting a while after a 429 or an error first) or open loop (seeded Poisson arrivals dealt round-robin,
 * sent whatever is still in flight). Every answer is kept with its time, so each phase reads its own.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request } from 'undici';
import { exponentialMs, seededRandom } from '../draws.js';

export interface Answer {
  /** ms since the load's start, when the request was sent. */
  at: number;
  ms: number;
  /** The HTTP status; 0 when the request failed without one. */
  status: number;
}

const BODY = JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'hi' }] });

export class Load {
  readonly answers: Answer[] = [];
  private running = true;
  private readonly pending = new Set<Promise<void>>();
  // no bound on connections: an open loop's requests queued in the client would hide the gateway's own queueing
  private readonly agent = new Agent({ connections: null, keepAliveTimeout: 10_000 });

  constructor(
    private readonly gateways: readonly string[],
    private readonly now: () => number,
  ) {}

  private async send(gateway: string): Promise<number> {
    const at = this.now();
    let status = 0;
    try {
      const res = await request(`${gateway}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: BODY,
        dispatcher: this.agent,
      });
      await res.body.text();
      status = res.statusCode;
    } catch {
      // a refused or reset connection: counted with status 0
    }
    this.answers.push({ at, ms: this.now() - at, status });
    return status;
  }

  /** `perInstance` clients on each gateway until stop(); after anything but a 200 a client waits `retryWaitMs`. */
  closed(perInstance: number, retryWaitMs: number): void {
    for (const gateway of this.gateways)
      for (let i = 0; i < perInstance; i++)
        this.track(
          (async () => {
            while (this.running) if ((await this.send(gateway)) !== 200) await sleep(retryWaitMs);
          })(),
        );
  }

  /** Poisson arrivals at `ratePerS` over every gateway together (round-robin) until stop(). */
  open(ratePerS: number, seed: number): void {
    const random = seededRandom(seed);
    this.track(
      (async () => {
        const start = this.now();
        let next = start;
        for (let k = 0; this.running; k++) {
          next += exponentialMs(random, ratePerS);
          const wait = next - this.now();
          if (wait > 0) await sleep(wait);
          if (!this.running) break;
          this.track(this.send(this.gateways[k % this.gateways.length]!).then(() => {}));
        }
      })(),
    );
  }

  private track(work: Promise<void>): void {
    this.pending.add(work);
    void work.finally(() => this.pending.delete(work));
  }

  /** Stops sending and waits for every request in flight. */
  async stop(): Promise<void> {
    this.running = false;
    while (this.pending.size > 0) await Promise.all(this.pending);
    await this.agent.close();
  }
}
