/** The wait queues in Redis: one FIFO per channel; a release grants the slot it frees (release-call.ts). */
import type { Cluster, Redis } from 'ioredis';
import { preciseNow, type Clock } from '../../../core/clock.js';
import {
  clampArrivalLead,
  type EnqueueOptions,
  type EnqueueReply,
  type Purpose,
  type WaiterRef,
  type WaiterState,
} from '../../store.js';
import type { Deadlines } from '../connection/deadlines.js';
import type { KeyBuilder } from '../keys.js';
import { SCRIPTS } from '../scripts.js';
import { EnqueueBatch } from './enqueue-batch.js';
import { MAX_REGISTRATION_LIVE_MS, memberLifetime, type Members } from './members.js';
import type { QueueHints } from './queue-hints.js';

export interface QueueDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  deadlines: Deadlines;
  count: (purpose: Purpose, n: number) => void;
  clock: Clock;
  claimMs: number;
  hints: QueueHints;
  members: Members;
  /** Taken before a registration is sent; throws if a connection dropped meanwhile (fencing/epoch.ts). */
  inFlight: (operation: string) => () => void;
}

export class RedisQueues {
  private readonly batch: EnqueueBatch;
  /** Leaves on their way: a close waits for them, so a grant a leaving waiter holds goes back at once. */
  private readonly leaving = new Set<Promise<unknown>>();

  constructor(private readonly deps: QueueDeps) {
    this.batch = new EnqueueBatch(deps.client, deps.clock, () => deps.count('wait', 1));
  }

  private keysOf(channelId: string): string[] {
    const { keys } = this.deps;
    return [keys.slots(channelId), keys.queue(channelId), keys.peak(channelId), keys.limit(channelId)];
  }

  /** The grant arguments every queue script takes; `floor` when grants are made under an adaptive limit. */
  private grantArgs(channelId: string, leaseTtlMs: number, floor: number | undefined): (string | number)[] {
    return [this.deps.claimMs, leaseTtlMs, this.deps.keys.grants(), channelId, floor ?? ''];
  }

  enqueue(w: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply> {
    const member = this.deps.members.remember(w, Math.min(MAX_REGISTRATION_LIVE_MS, options.ttlMs));
    const arrivedAt = preciseNow(this.deps.clock) - clampArrivalLead(options.arrivedMsAgo ?? 0);
    const args = [member, ...this.grantArgs(w.channelId, options.leaseTtlMs, w.floor), options.maxWaiting];
    return this.register(w, options, () => this.batch.send(this.keysOf(w.channelId), args, arrivedAt));
  }

  /** `to` takes `from`'s place, with its lifetime. */
  async requeue(from: WaiterRef, to: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply> {
    const { members, client, count } = this.deps;
    const fromMember = members.of(from);
    const member = members.remember(to, memberLifetime(fromMember));
    const args = [
      fromMember,
      member,
      ...this.grantArgs(to.channelId, options.leaseTtlMs, to.floor),
      options.maxWaiting,
    ];
    try {
      return await this.register(
        to,
        options,
        () => {
          count('wait', 1);
          return SCRIPTS.requeueWaiter.call(client, this.keysOf(to.channelId), args);
        },
        fromMember,
      );
    } finally {
      members.forget(from.channelId, from.token);
    }
  }

  private async register(
    w: WaiterRef,
    options: EnqueueOptions,
    send: () => Promise<EnqueueReply>,
    fromMember?: string,
  ): Promise<EnqueueReply> {
    const { hints, members, deadlines } = this.deps;
    const stamp = hints.stamp();
    const check = this.deps.inFlight('wait_register');
    try {
      const reply = await deadlines.run('wait_register', send);
      check();
      if (reply !== 'queued') members.forget(w.channelId, w.token);
      if (reply === 'granted') hints.clear(w.channelId, stamp);
      else hints.mark(w.channelId);
      return reply;
    } catch (err) {
      // The script may still run, and the caller, told it failed, will never leave: a detached removal undoes it
      // (a grant passes on); the registration's expiry is the backstop.
      this.leave(w, options.leaseTtlMs).catch(() => {});
      if (fromMember) this.leaveMember(w, fromMember, options.leaseTtlMs).catch(() => {});
      throw err;
    }
  }

  async poll(w: WaiterRef, leaseTtlMs: number): Promise<WaiterState> {
    const { members, client, count, deadlines } = this.deps;
    count('wait', 1);
    const args = [members.of(w), ...this.grantArgs(w.channelId, leaseTtlMs, w.floor)];
    const state = await deadlines.run('wait_poll', () =>
      SCRIPTS.pollWaiter.call(client, this.keysOf(w.channelId), args),
    );
    if (state !== 'queued') members.forget(w.channelId, w.token);
    return state;
  }

  leave(w: WaiterRef, leaseTtlMs: number): Promise<boolean> {
    const member = this.deps.members.of(w);
    this.deps.members.forget(w.channelId, w.token);
    return this.leaveMember(w, member, leaseTtlMs, w.max > 0);
  }

  /**
   * A plain ZREM of the member first: a grant takes its member out of the queue in the same script, so a member
   * still queued held nothing here. Only when it was gone does the script follow, to give back a grant it holds.
   * `queued` false (a grant's give-back names no queued member): the script alone.
   */
  private leaveMember(
    w: Pick<WaiterRef, 'channelId' | 'floor'>,
    member: string,
    leaseTtlMs: number,
    queued = true,
  ): Promise<boolean> {
    const { client, count, deadlines, keys } = this.deps;
    const { channelId } = w;
    count('wait', 1);
    const left = deadlines.run('wait_unregister', async () => {
      if (queued) {
        if ((await client.zrem(keys.queue(channelId), member)) === 1) return false;
        count('wait', 1);
      }
      return SCRIPTS.leaveQueue.call(client, this.keysOf(channelId), [
        member,
        ...this.grantArgs(channelId, leaseTtlMs, w.floor),
      ]);
    });
    this.leaving.add(left);
    const done = () => void this.leaving.delete(left);
    left.then(done, done);
    return left;
  }

  /** Settles once every leave sent so far has (each is bounded by the store's time-out). */
  async leavesSent(): Promise<void> {
    await Promise.allSettled([...this.leaving]);
  }
}
