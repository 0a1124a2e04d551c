/**
 * The soak's clients: Poisson arrivals dealt round-robin over the gateways, half of them streamed, a share aborted by
 * the client (after a random delay: while waiting or held; or, when streamed, after the first chunk). Every answer is
 * tallied by what the client saw: its status and slotgate error code, or the error event that ended a stream.
 */
import { request } from 'undici';
import { exponentialMs, seededRandom, type Random } from '../draws.js';
import { CLIENT_TOKEN, MODELS } from './config.js';

export interface ClientFigures {
  sent: number;
  /** Answered in full with a 2xx (a stream through its `[DONE]`). */
  done: number;
  /** Arrivals not sent because `maxInFlight` requests were already out (the generator protecting itself). */
  shed: number;
  /** Outcome → count: `200`, `429 channel_capacity_exhausted`, `200 stream ended by lease_lost`, `aborted …` */
  outcomes: Record<string, number>;
  /** When each answer that is neither a success, a 429 nor a client abort came (seconds into the run). */
  failures: { atS: number; outcome: string }[];
}

export interface ClientOptions {
  ratePerS: number;
  seed: number;
  streamShare?: number;
  abortShare?: number;
  maxInFlight?: number;
}

const BODY = { messages: [{ role: 'user', content: 'hi' }] };

/** The slotgate code of an error body (OpenAI shape), if it has one. */
function codeOf(text: string): string | undefined {
  try {
    const code = (JSON.parse(text) as { error?: { code?: unknown } }).error?.code;
    return typeof code === 'string' ? code : undefined;
  } catch {
    return undefined;
  }
}

/** What ended a stream: `[DONE]`, or the error event the gateway wrote last. */
function streamEnd(text: string): string {
  if (text.trimEnd().endsWith('data: [DONE]')) return 'done';
  const last = text.trimEnd().split('\n\n').at(-1) ?? '';
  const code = codeOf(last.replace(/^(event: \w+\n)?data: /, ''));
  return code ? `ended by ${code}` : 'cut';
}

export class Clients {
  readonly figures: ClientFigures = { sent: 0, done: 0, shed: 0, outcomes: {}, failures: [] };
  private inFlight = new Set<Promise<void>>();
  private stopped = false;
  private readonly random: Random;

  constructor(
    private readonly gateways: readonly string[],
    private readonly options: ClientOptions,
    private readonly clock: () => number,
  ) {
    this.random = seededRandom(options.seed);
  }

  /** Sends arrivals until stop(); then resolves once every request sent has ended. */
  async run(): Promise<void> {
    const { ratePerS, maxInFlight = 300 } = this.options;
    for (let n = 0; !this.stopped; n++) {
      await new Promise((r) => setTimeout(r, exponentialMs(this.random, ratePerS)));
      if (this.stopped) break;
      if (this.inFlight.size >= maxInFlight) {
        this.figures.shed++;
        continue;
      }
      const one = this.send(this.gateways[n % this.gateways.length]!);
      this.inFlight.add(one);
      void one.finally(() => this.inFlight.delete(one));
    }
    await Promise.all(this.inFlight);
  }

  stop(): void {
    this.stopped = true;
  }

  private tally(outcome: string): void {
    const f = this.figures;
    f.outcomes[outcome] = (f.outcomes[outcome] ?? 0) + 1;
    if (/^2\d\d$/.test(outcome)) f.done++;
    else if (!/^(429 |aborted )/.test(outcome)) f.failures.push({ atS: this.clock(), outcome });
  }

  private model(): string {
    let r = this.random();
    for (const [model, share] of MODELS) if ((r -= share) < 0) return model;
    return MODELS[0][0];
  }

  private async send(gateway: string): Promise<void> {
    const { streamShare = 0.5, abortShare = 0.15 } = this.options;
    const stream = this.random() < streamShare;
    const model = this.model();
    const roll = this.random();
    const abortAfterMs = roll < abortShare / 2 ? this.random() * 800 : undefined;
    const abortMidStream = stream && roll >= abortShare / 2 && roll < abortShare;
    const controller = new AbortController();
    const timer = abortAfterMs === undefined ? undefined : setTimeout(() => controller.abort(), abortAfterMs);
    let stage = 'before the answer';
    this.figures.sent++;
    try {
      const res = await request(`${gateway}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${CLIENT_TOKEN}` },
        body: JSON.stringify({ ...BODY, model, stream }),
        signal: controller.signal,
      });
      stage = stream ? 'mid-stream' : 'mid-body';
      let text = '';
      for await (const chunk of res.body) {
        if (text === '' && abortMidStream) setTimeout(() => controller.abort(), this.random() * 200);
        text += (chunk as Buffer).toString('utf8');
      }
      const ok = res.statusCode >= 200 && res.statusCode < 300;
      if (!ok) this.tally(`${res.statusCode} ${codeOf(text) ?? 'without a code'}`);
      else if (!stream || streamEnd(text) === 'done') this.tally(String(res.statusCode));
      else this.tally(`${res.statusCode} stream ${streamEnd(text)}`);
    } catch (err) {
      if (controller.signal.aborted) this.tally(`aborted ${stage}`);
      else this.tally(`network error ${(err as { code?: string }).code ?? (err as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }
}
