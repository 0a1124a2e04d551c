/** MemoryStore: RedisStore's semantics in one process; operations count as the Redis commands would. */
import { effectiveLimit, nextLimit, type LimitState } from '../../core/adaptive.js';
import { systemClock, type Clock } from '../../core/clock.js';
import {
  BATCH_SIZE,
  emptyCounts,
  type AcquireOptions,
  type AcquireReply,
  type AcquireTarget,
  type ChannelLoad,
  type EnqueueOptions,
  type EnqueueReply,
  type LeaseRef,
  type LimitRelease,
  type LoadExchange,
  type Listening,
  type PendingRelease,
  type Purpose,
  type QueueListener,
  type ReclaimRef,
  type SlotStore,
  type StoreHealth,
  type WaiterRef,
  type WaiterState,
} from '../store.js';
import { type Presence, type SharedSettings, type SharedSettingsOptions } from '../fleet.js';
import { ExpiringSet } from './expiring-set.js';
import { holdersOf } from '../holders.js';
import { LocalPresence, LocalSharedSettings } from './local-fleet.js';
import { MemoryQueues } from './memory-queues.js';
import { PeakMark, type ChannelPeak } from '../peak.js';

export interface MemoryStoreOptions {
  /** @default the system clock */
  clock?: Clock;
  /** How long a slot granted to a waiter waits to be claimed before it passes on. @default 5000 */
  claimMs?: number;
}

interface Cooldown {
  reason: string;
  until: number;
}

export class MemoryStore implements SlotStore {
  readonly kind = 'memory' as const;
  readonly maxChannelsPerAcquire = Number.MAX_SAFE_INTEGER;
  private readonly clock: Clock;
  private readonly slots = new Map<string, ExpiringSet>();
  private readonly queues: MemoryQueues;
  private readonly cooldowns = new Map<string, Cooldown>();
  private readonly peaks = new Map<string, PeakMark>();
  /** Adaptive limits (lua/includes/limit.lua's hash); they lapse as the Redis key would not: a test store is short-lived. */
  private readonly limits = new Map<string, LimitState>();
  private readonly counts = emptyCounts();
  readonly presence: Presence;

  constructor(options: MemoryStoreOptions = {}) {
    this.clock = options.clock ?? systemClock;
    this.presence = new LocalPresence(this.clock);
    this.queues = new MemoryQueues(
      this.clock,
      (id) => this.slotsOf(id),
      (id, floor, max) => effectiveLimit(this.limits.get(id)?.limit, floor, max),
      options.claimMs ?? 5000,
    );
  }

  async health(): Promise<StoreHealth> {
    return { healthy: true, latencyMs: 0 };
  }

  sharedSettings<T extends object>(options: SharedSettingsOptions<T>): SharedSettings<T> {
    return new LocalSharedSettings(options, this.clock);
  }

  get commands(): Readonly<Record<Purpose, number>> {
    return this.counts;
  }

  private slotsOf(id: string): ExpiringSet {
    let set = this.slots.get(id);
    if (!set)
      this.slots.set(id, (set = new ExpiringSet((held) => this.peakOf(id).note(held, this.clock.now()))));
    return set;
  }

  private peakOf(id: string): PeakMark {
    let mark = this.peaks.get(id);
    if (!mark) this.peaks.set(id, (mark = new PeakMark()));
    return mark;
  }

  private cooling(id: string, now: number): Cooldown | undefined {
    const c = this.cooldowns.get(id);
    if (c && c.until <= now) {
      this.cooldowns.delete(id);
      return undefined;
    }
    return c;
  }

  async acquireFirst(targets: readonly AcquireTarget[], opts: AcquireOptions): Promise<AcquireReply[]> {
    if (targets.length === 0) return [];
    this.counts.acquire++;
    const now = this.clock.now();
    const replies: AcquireReply[] = [];
    for (const target of targets) {
      if (opts.checkCooldown && this.cooling(target.channelId, now)) {
        replies.push('cooling');
        continue;
      }
      // a newcomer never takes a slot ahead of waiters
      this.queues.grantFree(target.channelId, undefined, target.floor);
      if (this.queues.hasQueue(target.channelId)) {
        replies.push('queued');
        continue;
      }
      const set = this.slotsOf(target.channelId);
      const max =
        target.floor === undefined
          ? target.max
          : effectiveLimit(this.limits.get(target.channelId)?.limit, target.floor, target.max);
      if (!set.full(max, now)) {
        set.members.set(opts.token, now + opts.leaseTtlMs);
        replies.push('acquired');
        return replies;
      }
      replies.push('full');
    }
    return replies;
  }

  release(lease: LeaseRef, _leaseTtlMs?: number, limit?: LimitRelease): PendingRelease {
    this.counts.release++;
    const { channelId } = lease;
    const set = this.slots.get(channelId);
    const inFlight = set?.members.size ?? 0;
    const removed = set?.remove(lease.token) ?? false;
    if (removed && limit?.report) {
      const { signal, law, heldMs } = limit.report;
      const now = this.clock.now();
      const demand = this.queues.hasQueue(channelId);
      this.limits.set(
        channelId,
        nextLimit(this.limits.get(channelId), { signal, law, heldMs, inFlight, demand, now }),
      );
    }
    this.queues.grantFree(channelId, undefined, limit?.floor);
    if (set && set.members.size === 0) this.slots.delete(channelId);
    return { done: Promise.resolve(removed), withdrawable: false, withdraw: () => false };
  }

  limitOf(channelId: string): number | undefined {
    const state = this.limits.get(channelId);
    return state && Math.floor(state.limit);
  }

  async readLimits(channelIds: readonly string[]): Promise<Map<string, number>> {
    this.counts.load_read += channelIds.length;
    const out = new Map<string, number>();
    for (const id of channelIds) {
      const state = this.limits.get(id);
      if (state) out.set(id, state.limit);
    }
    return out;
  }

  async enqueue(waiter: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply> {
    this.counts.wait++;
    return this.queues.enqueue(waiter, options);
  }

  async pollWaiter(waiter: WaiterRef): Promise<WaiterState> {
    this.counts.wait++;
    return this.queues.poll(waiter);
  }

  async leaveQueue(waiter: WaiterRef): Promise<boolean> {
    this.counts.wait++;
    return this.queues.leave(waiter);
  }

  async requeue(from: WaiterRef, to: WaiterRef, options: EnqueueOptions): Promise<EnqueueReply> {
    this.counts.wait++;
    return this.queues.requeue(from, to, options);
  }

  listen(instanceId: string, listener: QueueListener): Listening {
    return this.queues.listen(instanceId, listener);
  }

  queued(channelId: string): boolean {
    return this.queues.hasQueue(channelId);
  }

  async renew(leases: readonly LeaseRef[], leaseTtlMs: number): Promise<LeaseRef[]> {
    if (leases.length === 0) return [];
    this.counts.renew += Math.ceil(leases.length / BATCH_SIZE);
    const expiry = this.clock.now() + leaseTtlMs;
    const lost: LeaseRef[] = [];
    for (const lease of leases) {
      const set = this.slots.get(lease.channelId);
      if (set?.members.has(lease.token)) set.members.set(lease.token, expiry);
      else lost.push(lease);
    }
    return lost;
  }

  async reclaim(leases: readonly ReclaimRef[], leaseTtlMs: number, restore: boolean): Promise<LeaseRef[]> {
    if (leases.length === 0) return [];
    this.counts.renew += Math.ceil(leases.length / BATCH_SIZE);
    const now = this.clock.now();
    const lost: LeaseRef[] = [];
    for (const lease of leases) {
      const set = this.slotsOf(lease.channelId);
      if (!restore && !set.members.has(lease.token) && set.full(lease.max, now)) {
        lost.push(lease);
        continue;
      }
      set.members.set(lease.token, now + leaseTtlMs);
    }
    return lost;
  }

  onRestart(): () => void {
    return () => {};
  }

  onReconnect(): () => void {
    return () => {};
  }

  async readLoads(channelIds: readonly string[]): Promise<Map<string, ChannelLoad>> {
    const ids = [...new Set(channelIds)];
    this.counts.load_read += Math.ceil(ids.length / BATCH_SIZE);
    return this.loadsOf(ids);
  }

  async exchangeLoads(exchange: LoadExchange): Promise<Map<string, ChannelLoad>> {
    if (exchange.read.length > 0) this.counts.load_read++;
    return this.loadsOf([...new Set(exchange.read)]);
  }

  private loadsOf(ids: readonly string[]): Map<string, ChannelLoad> {
    const now = this.clock.now();
    const loads = new Map<string, ChannelLoad>();
    for (const id of ids) {
      const cooldown = this.cooling(id, now);
      loads.set(id, {
        active: this.slots.get(id)?.live(now) ?? 0,
        waiting: this.queues.count(id),
        coolingDown: cooldown !== undefined,
        cooldownRemainingMs: cooldown ? cooldown.until - now : 0,
      });
    }
    return loads;
  }

  async readPeaks(channelIds: readonly string[]): Promise<Map<string, ChannelPeak>> {
    const ids = [...new Set(channelIds)];
    this.counts.load_read += Math.ceil(ids.length / BATCH_SIZE);
    const now = this.clock.now();
    const live = (id: string) => this.slots.get(id)?.live(now) ?? 0;
    return new Map(ids.map((id) => [id, (this.peaks.get(id) ?? new PeakMark()).read(live(id), now)]));
  }

  async readHolders(channelIds: readonly string[]): Promise<Map<string, Map<string, number>>> {
    const ids = [...new Set(channelIds)];
    this.counts.load_read += ids.length;
    const now = this.clock.now();
    return new Map(ids.map((id) => [id, holdersOf(this.slots.get(id)?.members.entries() ?? [], now)]));
  }

  async setCooldown(channelId: string, ms: number, reason: string): Promise<void> {
    this.counts.cooldown++;
    this.cooldowns.set(channelId, { reason, until: this.clock.now() + Math.max(1, Math.round(ms)) });
  }

  async clearCooldown(channelId: string): Promise<void> {
    this.counts.cooldown++;
    this.cooldowns.delete(channelId);
  }

  async close(): Promise<void> {
    this.slots.clear();
    this.peaks.clear();
    this.limits.clear();
    this.queues.clear();
    this.cooldowns.clear();
  }
}
