/**
 * Runs one schedule against a backend and records what happened, step by step: each operation and the outcomes it
 * caused (a request granted, turned away, aborted, timed out, a lease lost). The in-flight counter stands for the
 * upstream: a request counts from its admission until its call ends (before its release, at its `lost` signal, or
 * when its instance dies), and every admission is checked against the channel's bound at that instant.
 *
 * `exact`: after every operation the runner waits until the store's loads equal its own books (every grant delivered,
 * every waiter registered), so the outcomes are a function of the schedule: the memory model's and Redis's traces
 * must be equal. Otherwise (faults) it waits for that only a little, then goes on; the checks stand alone.
 */
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import type { Ticket } from '../../packages/slotgate/src/admission/types.js';
import { until } from '../helpers/until.js';
import { Bounds, type Holder } from './bounds.js';
import { Instance, type Backend, type InstanceSettings } from './fleet.js';
import { channelId, formatOp, type Op, type Schedule } from './schedule.js';
import type { Faults } from './faults.js';
import { LagMonitor } from './lag.js';

export interface Request extends Holder {
  readonly id: number;
  readonly startedAt: number;
  /** The step it began in. */
  readonly step: number;
  readonly abort: AbortController;
  /** `dead`: its instance crashed (pending or held then); it may keep a lease in the store until `liveUntil`. */
  state: 'pending' | 'held' | 'ended' | 'dead';
  liveUntil?: number;
  ticket?: Ticket<Candidate>;
  /** Settles when the acquire has. */
  settled?: Promise<void>;
  endedAt?: number;
}

export interface RunOptions {
  backend: Backend;
  settings: InstanceSettings;
  exact: boolean;
  /** Unique per run: names the instances and their connections. */
  tag: string;
  faults?: Faults;
}

/** The longest an exact settle may take before the run fails as stuck (a healthy one takes milliseconds). */
const SETTLE_MS = 10_000;
/** How long a fault run waits for the store to match its books between operations. */
const LOOSE_SETTLE_MS = 1_500;

export class Runner {
  readonly trace: string[][] = [];
  readonly violations: string[] = [];
  readonly requests: Request[] = [];
  readonly instances: Instance[] = [];
  readonly bounds: Bounds;
  readonly channels: string[];
  private readonly candidates = new Map<string, Candidate[]>();
  private readonly generations: number[] = [];
  private readonly lag = new LagMonitor();
  private step: string[] = [];
  /** Admissions above the bound in this step, judged at its end (a stall of this process may excuse them). */
  private readonly overs = new Map<string, string>();

  constructor(
    readonly schedule: Schedule,
    readonly options: RunOptions,
  ) {
    this.channels = schedule.maxes.map((_, i) => channelId(i));
    this.channels.forEach((ch, i) => this.setCandidates(ch, schedule.maxes[i]!));
    this.bounds = new Bounds(
      new Map(this.channels.map((ch, i) => [ch, schedule.maxes[i]!])),
      options.settings.lease_ttl_ms,
    );
  }

  private setCandidates(ch: string, max: number): void {
    this.candidates.set(ch, [{ id: ch, maxConcurrency: max, maxWaiting: this.schedule.maxWaiting }]);
  }

  /** The instance at `index`, started (again) if it never ran or crashed. */
  instance(index: number): Instance {
    const i = index % this.schedule.instances;
    const current = this.instances[i];
    if (current && !current.dead) return current;
    const generation = (this.generations[i] = (this.generations[i] ?? -1) + 1);
    const inst = new Instance(
      this.options.backend,
      `${this.options.tag}i${i}g${generation}`,
      this.options.settings,
    );
    this.instances[i] = inst;
    return inst;
  }

  get live(): Instance[] {
    return this.instances.filter((i) => !i.dead);
  }

  held(ch?: string): Request[] {
    return this.requests.filter((r) => r.state === 'held' && (ch === undefined || r.ch === ch));
  }

  pending(ch?: string): Request[] {
    return this.requests.filter((r) => r.state === 'pending' && (ch === undefined || r.ch === ch));
  }

  note(event: string): void {
    this.step.push(event);
  }

  violation(what: string): void {
    this.violations.push(`step ${this.trace.length}: ${what}`);
  }

  async run(): Promise<void> {
    this.lag.start();
    try {
      for (const op of this.schedule.ops) {
        this.bounds.nextStep();
        this.lag.reset();
        this.step = [formatOp(op, this.schedule)];
        await this.apply(op);
        await this.settle();
        this.closeStep();
      }
    } finally {
      this.lag.stop();
    }
  }

  private closeStep(): void {
    // A lease whose fence fell in a stall of this process is aborted late, by the stall (docs/redis.md): the
    // excess is excused then, once the late aborts came.
    const stalled = this.lag.stalledPast(this.options.settings.lease_ttl_ms);
    for (const [ch, what] of this.overs) {
      const over = this.held(ch).length - this.bounds.upstream(ch, this.requests);
      if (!stalled || over > 0)
        this.violation(stalled ? `${what}, still ${over} over after the stall` : what);
    }
    this.overs.clear();
    // a request still pending at the end of its own step waits (exact: registered in the store)
    for (const r of this.pending()) if (r.step === this.trace.length) this.note(`r${r.id} waiting`);
    const [op, ...events] = this.step;
    this.trace.push([op!, ...events.sort()]);
  }

  private async apply(op: Op): Promise<void> {
    const faults = this.options.faults;
    switch (op.kind) {
      case 'acquire':
        return this.acquire(this.instance(op.inst), this.channels[op.ch % this.channels.length]!);
      case 'release': {
        const held = this.held();
        if (held.length > 0) await this.release(held[op.pick % held.length]!);
        return;
      }
      case 'abort': {
        const pending = this.pending();
        if (pending.length === 0) return;
        const r = pending[op.pick % pending.length]!;
        r.abort.abort();
        await this.ended(r);
        return;
      }
      case 'reload': {
        const ch = this.channels[op.ch % this.channels.length]!;
        this.bounds.setMax(ch, op.max);
        this.setCandidates(ch, op.max);
        for (const inst of this.live) inst.admission.configChanged();
        return;
      }
      case 'sleep':
        return new Promise((resolve) => setTimeout(resolve, op.ms));
      default:
        return faults!.apply(this, op);
    }
  }

  private acquire(inst: Instance, ch: string): void {
    const r: Request = {
      id: this.requests.length,
      inst,
      ch,
      startedAt: Date.now(),
      step: this.trace.length,
      abort: new AbortController(),
      state: 'pending',
      get holding() {
        return this.state === 'held';
      },
    };
    this.requests.push(r);
    const candidates = () => this.candidates.get(ch)!;
    r.settled = inst.admission
      .acquire({ candidates: candidates(), resolve: candidates, signal: r.abort.signal })
      .then(
        (ticket) => this.admitted(r, ticket),
        (err: unknown) => this.refused(r, (err as { reason?: string }).reason ?? (err as Error).name),
      );
  }

  /** Counted at the upstream from here; checked against the bound at this instant. */
  private admitted(r: Request, ticket: Ticket<Candidate>): void {
    if (r.inst.dead) return; // a dead process calls no upstream
    r.state = 'held';
    r.ticket = ticket;
    this.note(`r${r.id} granted`);
    const inFlight = this.held(r.ch);
    const bound = this.bounds.upstream(r.ch, this.requests);
    if (inFlight.length > bound) {
      this.overs.set(r.ch, `r${r.id} admitted on ${r.ch} with ${inFlight.length} in flight, bound ${bound}`);
    }
    // the caller's call ends at `lost`, and its `finally` releases the ticket, as the gateway's does
    ticket.lost.addEventListener('abort', () => {
      if (r.state !== 'held') return;
      this.note(`r${r.id} lost`);
      void this.release(r);
    });
  }

  /** Resolves once the request is no longer pending; a request still pending after an abort is a violation. */
  async ended(r: Request): Promise<void> {
    await until(() => r.state !== 'pending', `r${r.id} ending`, { timeoutMs: 15_000, intervalMs: 5 }).catch(
      () => this.violation(`r${r.id} still pending 15 s after its abort`),
    );
  }

  private refused(r: Request, outcome: string): void {
    if (r.state !== 'pending') return;
    this.note(`r${r.id} ${outcome}`);
    r.state = 'ended';
    r.endedAt = Date.now();
  }

  /** The upstream call ends: the request stops counting. */
  end(r: Request): void {
    r.state = 'ended';
    r.endedAt = Date.now();
    this.bounds.noteEnded(r.ch);
  }

  async release(r: Request): Promise<void> {
    this.end(r);
    await r.ticket!.release();
  }

  /** The oldest start among the requests that may still have a lease or a registration in the store. */
  oldestLive(ch: string): number {
    const ttl = this.options.settings.lease_ttl_ms;
    const now = Date.now();
    const live = this.requests.filter(
      (r) =>
        r.ch === ch &&
        (r.state === 'pending' ||
          r.state === 'held' ||
          (r.state === 'dead' && now < r.liveUntil!) ||
          // a release may land after it resolved (or be retried): its lease counts until it would have expired
          (r.state === 'ended' && now < r.endedAt! + ttl)),
    );
    return Math.min(Date.now(), ...live.map((r) => r.startedAt));
  }

  /** The store's live leases against the bound, on every channel. */
  async checkStore(): Promise<Map<string, { active: number; waiting: number }>> {
    await this.options.faults?.readGrace();
    const loads = await this.options.backend.observer.readLoads(this.channels);
    for (const ch of this.channels) {
      const bound = this.bounds.store(ch, this.oldestLive(ch), this.requests);
      const active = loads.get(ch)!.active;
      if (active > bound) this.violation(`${active} live leases on ${ch} in the store, bound ${bound}`);
    }
    return loads;
  }

  /** Waits until the store's loads equal the runner's books (exact), or a little (faults). */
  async settle(): Promise<void> {
    const { exact, backend } = this.options;
    const matches = async () => {
      const loads = await this.checkStore();
      if (exact) {
        for (const ch of this.channels) {
          const { active, waiting } = loads.get(ch)!;
          if (active !== this.held(ch).length || waiting !== this.pending(ch).length) return false;
          const maxes = (await backend.queuedMaxes?.(ch)) ?? [];
          if (maxes.some((max) => max !== this.bounds.maxOf(ch))) return false; // a reload still on its way
        }
        return true;
      }
      // faults: every grant in the store to a live instance delivered, every waiter registered (the leases and
      // registrations of dead instances may linger)
      const holders = await backend.observer.readHolders(this.channels);
      const heldBy = (ch: string, inst: Instance) => this.held(ch).filter((r) => r.inst === inst).length;
      return this.channels.every(
        (ch) =>
          loads.get(ch)!.waiting >= this.pending(ch).length &&
          this.live.every((inst) => (holders.get(ch)?.get(inst.id) ?? 0) === heldBy(ch, inst)),
      );
    };
    if (this.options.exact) {
      await until(matches, 'the store and the runner agreeing', { timeoutMs: SETTLE_MS, intervalMs: 5 });
      return;
    }
    await until(matches, 'settled', { timeoutMs: LOOSE_SETTLE_MS, intervalMs: 25 }).catch(() => {});
  }

  /** Every waiter ends, every ticket goes back, every instance closes gracefully. */
  async finish(): Promise<void> {
    this.bounds.nextStep();
    this.step = ['end: abort every waiter, release every ticket, close every instance'];
    const pending = this.pending();
    for (const r of pending) r.abort.abort();
    await Promise.all(pending.map((r) => this.ended(r)));
    await Promise.all(this.held().map((r) => this.release(r)));
    if (this.options.exact) await this.settle();
    else await this.checkStore().catch(() => {});
    for (const inst of this.live) await inst.close();
    this.closeStep();
  }
}
