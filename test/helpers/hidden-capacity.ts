/**
 * An upstream with a hidden capacity K(t), as a FakeUpstream handler: what adaptive limits are measured and tested
 * against (docs/admission.md, "Adaptive limits"). It serves up to K requests at once, each held `holdMs`; K changes
 * with time by the `capacity` schedule. Past K it either refuses at once (`mode: '429'`, 429 with `Retry-After`, as
 * the hidden-capacity upstream of issue 36) or queues the request until one of its K places frees (`mode:
 * 'latency'`: an upstream that signals only by a slower first byte). It counts what it served and refused per
 * second, so a run reads its goodput and its 429 share against K.
 */
import type { Handler, ReceivedRequest, Reply } from './fake-upstream.js';

/** K at `ms` after the upstream's start. */
export type CapacitySchedule = (ms: number) => number;

/** K steps through `values`, each held `everyMs`; the last one stays. */
export const steps =
  (values: readonly number[], everyMs: number): CapacitySchedule =>
  (ms) =>
    values[Math.min(values.length - 1, Math.floor(ms / everyMs))]!;

/**
 * K moves in a straight line between `points` ([ms, K] in time order), rounded down, and stays at the last point's K:
 * a capacity that drifts rather than steps.
 */
export const drift =
  (points: ReadonlyArray<readonly [ms: number, k: number]>): CapacitySchedule =>
  (ms) => {
    const next = points.findIndex(([at]) => at > ms);
    if (next === -1) return points.at(-1)![1];
    if (next === 0) return points[0]![1];
    const [a, ka] = points[next - 1]!;
    const [b, kb] = points[next]!;
    return Math.floor(ka + ((kb - ka) * (ms - a)) / (b - a));
  };

export interface HiddenCapacityOptions {
  capacity: CapacitySchedule;
  /** How long a served request is held before its answer. @default 200 */
  holdMs?: number;
  /** @default '429' */
  mode?: '429' | 'latency';
  /** `Retry-After` of a refusal, in seconds. @default 1 */
  retryAfterS?: number;
  /** The served answer's body. @default a chat completion naming the channel */
  json?: (request: ReceivedRequest) => unknown;
  /** @default performance.now */
  now?: () => number;
}

export interface CapacityEvent {
  /** ms since the start */
  at: number;
  kind: 'served' | 'refused';
  /** Requests being served when it came (K is not exceeded: a served one counts itself). */
  serving: number;
  capacity: number;
}

export class HiddenCapacity {
  private readonly start: number;
  private readonly now: () => number;
  private serving = 0;
  /** Waiters for a place, in arrival order (latency mode). */
  private readonly queue: Array<() => void> = [];
  readonly events: CapacityEvent[] = [];
  /** The most requests served at once. */
  peak = 0;

  constructor(private readonly options: HiddenCapacityOptions) {
    this.now = options.now ?? (() => performance.now());
    this.start = this.now();
  }

  /** ms since the start. */
  elapsed(): number {
    return this.now() - this.start;
  }

  capacityNow(): number {
    return this.options.capacity(this.elapsed());
  }

  /** Requests being served now (queued ones, in latency mode, not counted). */
  servingNow(): number {
    return this.serving;
  }

  /** Requests waiting for a place now (latency mode). */
  queuedNow(): number {
    return this.queue.length;
  }

  /** The mean of K over [fromMs, toMs), sampled every `stepMs`: a drifting K's capacity over a window. */
  meanCapacity(fromMs: number, toMs: number, stepMs = 10): number {
    let total = 0;
    let n = 0;
    for (let t = fromMs + stepMs / 2; t < toMs; t += stepMs, n++) total += this.options.capacity(t);
    return n === 0 ? this.options.capacity(fromMs) : total / n;
  }

  /** The handler to install with `upstream.on(channel, …)`. */
  readonly handler: Handler = async (request): Promise<Reply> => {
    const { holdMs = 200, mode = '429', retryAfterS = 1 } = this.options;
    if (this.serving >= this.capacityNow()) {
      if (mode === '429') {
        this.note('refused');
        return {
          status: 429,
          headers: { 'retry-after': String(retryAfterS) },
          json: { error: { type: 'rate_limit_error', message: 'too many requests in flight' } },
        };
      }
      // placed by free(), which counts it in
      await new Promise<void>((resolve) => this.queue.push(resolve));
    } else {
      this.serving++;
    }
    this.peak = Math.max(this.peak, this.serving);
    this.note('served');
    const json = this.options.json?.(request) ?? {
      id: `chatcmpl-${request.channel}`,
      object: 'chat.completion',
      choices: [{ index: 0, message: { role: 'assistant', content: `hello from ${request.channel}` } }],
    };
    // the place frees once the answer is on its way (held for holdMs before its headers)
    setTimeout(() => this.free(), holdMs).unref?.();
    return { delayMs: holdMs, json };
  };

  private free(): void {
    this.serving--;
    // a lowered K lets the queue move only once the upstream is under it
    while (this.queue.length > 0 && this.serving < this.capacityNow()) {
      this.serving++;
      this.queue.shift()!();
    }
  }

  private note(kind: CapacityEvent['kind']): void {
    this.events.push({ at: this.elapsed(), kind, serving: this.serving, capacity: this.capacityNow() });
  }

  /**
   * Goodput (served per second) and the share refused, over [fromMs, toMs): what a phase of a run is judged by.
   * `ideal`: K ÷ hold, the most that phase's capacity can serve (K read at the window's middle).
   */
  window(fromMs: number, toMs: number): { goodput: number; ideal: number; refusedShare: number } {
    const inside = this.events.filter((e) => e.at >= fromMs && e.at < toMs);
    const served = inside.filter((e) => e.kind === 'served').length;
    const refused = inside.length - served;
    const seconds = (toMs - fromMs) / 1000;
    const k = this.options.capacity((fromMs + toMs) / 2);
    return {
      goodput: served / seconds,
      ideal: k / ((this.options.holdMs ?? 200) / 1000),
      refusedShare: inside.length === 0 ? 0 : refused / inside.length,
    };
  }
}
