/**
 * The faults a schedule injects on real Redis: an instance crash, its connections killed, Redis paused, Redis
 * restarted empty. Restarts and pauses need a server of the test's own (`server`); the shared Cluster gets crashes
 * and drops only, which touch nobody else's connections.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { RedisServer } from '../helpers/redis-server.js';
import type { RedisBackend } from './backends.js';
import type { Restart } from './bounds.js';
import { deadOwnerProblems, type DeadOwner } from './leftovers.js';
import type { Runner } from './runner.js';
import type { Op } from './schedule.js';

export interface FaultLimits {
  leaseTtlMs: number;
  /** A registration's lifetime: `wait_timeout_ms` + 2 s. */
  lifetimeMs: number;
  claimMs: number;
  restartGraceMs: number;
}

export class Faults {
  readonly dead: DeadOwner[] = [];
  private readonly restarts: Restart[] = [];

  constructor(
    readonly redis: RedisBackend,
    private readonly limits: FaultLimits,
    private readonly server?: RedisServer,
  ) {}

  async apply(runner: Runner, op: Op): Promise<void> {
    const inst = 'inst' in op ? runner.instances[op.inst % runner.schedule.instances] : undefined;
    switch (op.kind) {
      case 'crash':
        if (inst && !inst.dead) await this.crash(runner, inst);
        return;
      case 'drop':
        if (inst && !inst.dead) await this.redis.drop(inst.id);
        return;
      case 'pause':
        await this.redis.pause(op.ms);
        await sleep(op.ms);
        return;
      case 'restart':
        return this.restart(runner);
      default:
        throw new Error(`not a fault: ${op.kind}`);
    }
  }

  /**
   * Its requests stop at once (a dead process calls no upstream); it sends nothing more. Its leases may stay live
   * for a lease TTL from the crash; a registration for its lifetime, and a grant to it until a claim deadline later.
   */
  private async crash(runner: Runner, inst: Runner['instances'][number]): Promise<void> {
    for (const r of runner.requests) {
      if (r.inst !== inst || (r.state !== 'held' && r.state !== 'pending')) continue;
      if (r.state === 'held') runner.bounds.noteEnded(r.ch);
      r.state = 'dead';
    }
    await inst.crash();
    await this.redis.gone(inst.id);
    const diedAt = await this.redis.time();
    const { leaseTtlMs, lifetimeMs, claimMs } = this.limits;
    const liveUntil = diedAt + Math.max(leaseTtlMs, lifetimeMs + claimMs);
    for (const r of runner.requests) if (r.inst === inst) r.liveUntil = liveUntil;
    this.dead.push({ id: inst.id, diedAt, liveUntil });
  }

  private async restart(runner: Runner): Promise<void> {
    const held = new Map(runner.live.map((inst) => [inst, runner.held().filter((r) => r.inst === inst)]));
    const inFlight = (ch: string) => runner.live.reduce((n, inst) => n + inst.calls.of(ch), 0);
    this.restarts.push(runner.bounds.noteRestart(held, inFlight));
    await this.server!.restart();
    await this.readGrace();
  }

  /**
   * The grace of the last restart runs from the new epoch's creation, by the first instance that checks the epoch
   * (one with leases at once, an idle one at its next admitting command): until then nobody admits.
   */
  async readGrace(): Promise<void> {
    const restart = this.restarts.at(-1);
    if (!restart || restart.graceEnd !== undefined) return;
    const createdAt = await this.redis.epochCreatedAt();
    if (createdAt !== undefined) restart.graceEnd = createdAt + this.limits.restartGraceMs;
  }

  /** What crashed instances still hold past their bound. */
  deadOwnerProblems(channels: readonly string[]): Promise<string[]> {
    return deadOwnerProblems(this.redis, channels, this.dead);
  }
}
