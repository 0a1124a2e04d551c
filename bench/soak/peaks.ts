/**
 * The upstream's in-flight peaks per channel against the max in force. After a reload lowers a max, the slots taken
 * under the old one drain: from the reload's start until both gateways run the new config and the upstream has no
 * more than the new max in flight, the bound is the higher of the two ("transition"); otherwise it is the max.
 */
import type { FakeUpstream, Handler, ReceivedRequest } from '../../test/helpers/fake-upstream.js';

export interface ChannelPeaks {
  /** Highest in flight while one max was in force. */
  steady: number;
  /** Highest in flight during reload transitions, and the highest bound of those. */
  transition: number;
  transitionBound: number;
}

/**
 * An arrival that put the upstream over the bound in force. It is `explained` when at least as many of the calls in
 * flight with it as it went over were later closed early by the gateway (a client abort, a fenced slot): calls whose
 * slot was already given back but whose close had not reached the upstream yet (docs/redis.md, failure bounds: "a
 * client goes away, or a slot is fenced, mid-call"). `lagMs`: from the arrival until the last of those closes came.
 */
export interface Excess {
  atS: number;
  channel: string;
  inFlight: number;
  bound: number;
  explained: boolean;
  lagMs?: number;
}

export class Peaks {
  readonly byChannel: Record<string, ChannelPeaks> = {};
  readonly excess: Excess[] = [];
  private readonly max = new Map<string, number>();
  /** The bound of a channel in transition. */
  private readonly draining = new Map<string, number>();
  /** Per channel, the calls that reached its handler and are not over. */
  private readonly live = new Map<string, Set<ReceivedRequest>>();
  private readonly checks = new Set<Promise<void>>();

  constructor(
    private readonly upstream: FakeUpstream,
    initial: Readonly<Record<string, number>>,
    private readonly clock: () => number,
  ) {
    for (const [id, max] of Object.entries(initial)) {
      this.max.set(id, max);
      this.byChannel[id] = { steady: 0, transition: 0, transitionBound: 0 };
      upstream.record(id);
    }
  }

  /** `handler`, checking first whether each arrival puts its channel over the bound in force. */
  watch(handler: Handler): Handler {
    return (request) => {
      this.arrive(request);
      return typeof handler === 'function' ? handler(request) : handler;
    };
  }

  /** Resolves once every excess seen so far has been explained or not (every call in flight with it has ended). */
  async checked(): Promise<void> {
    await Promise.all(this.checks);
  }

  /** Closes the interval since the last fold on every channel: its peak goes to the phase in force. */
  fold(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const id of this.max.keys()) out[id] = this.foldOne(id);
    return out;
  }

  /** A reload to `next` maxes starts: until `settle`, each changed channel is bounded by the higher max. */
  begin(next: Readonly<Record<string, number>>): void {
    for (const [id, max] of Object.entries(next)) {
      const old = this.max.get(id)!;
      if (old === max) continue;
      this.foldOne(id);
      this.draining.set(id, Math.max(old, max));
      this.max.set(id, max);
    }
  }

  /** Both gateways run the new config: resolves once each channel in transition has drained to its new max. */
  async settle(pollMs = 20): Promise<void> {
    while (this.draining.size) {
      for (const id of [...this.draining.keys()]) {
        if (this.upstream.record(id).current > this.max.get(id)!) continue;
        this.foldOne(id);
        this.draining.delete(id);
      }
      if (this.draining.size) await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  private foldOne(id: string): number {
    const record = this.upstream.record(id);
    const peak = record.max;
    record.max = record.current; // the next interval starts from what is in flight now
    const p = this.byChannel[id]!;
    const transit = this.draining.get(id);
    if (transit === undefined) p.steady = Math.max(p.steady, peak);
    else {
      p.transition = Math.max(p.transition, peak);
      p.transitionBound = Math.max(p.transitionBound, transit);
    }
    return peak;
  }

  private arrive(request: ReceivedRequest): void {
    const { channel } = request;
    let live = this.live.get(channel);
    if (!live) this.live.set(channel, (live = new Set()));
    live.add(request);
    void request.done.then(() => live.delete(request));
    const bound = this.draining.get(channel) ?? this.max.get(channel)!;
    const others = [...live].filter((r) => r !== request && r.endedAt === undefined);
    const over = others.length + 1 - bound;
    if (over <= 0) return;
    const at = performance.now();
    const excess: Excess = {
      atS: this.clock(),
      channel,
      inFlight: others.length + 1,
      bound,
      explained: false,
    };
    this.excess.push(excess);
    const check = Promise.all(others.map((r) => r.done)).then(() => {
      const lags = others.filter((r) => r.aborted).map((r) => r.endedAt! - at);
      if (lags.length < over) return;
      excess.explained = true;
      excess.lagMs = lags.sort((a, b) => a - b)[over - 1];
    });
    this.checks.add(check);
    void check.finally(() => this.checks.delete(check));
  }
}
