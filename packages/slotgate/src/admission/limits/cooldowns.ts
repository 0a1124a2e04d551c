/**
 * Cooldowns after an upstream rate limit: in the store for a bounded channel, in this process for an unlimited one.
 * This instance remembers those it set, for the load view's fallback and the handoff rules.
 */
import { isBounded, type Candidate } from '../../core/channel.js';
import type { Clock } from '../../core/clock.js';
import type { Settings } from '../../core/settings.js';
import type { ChannelLoad, SlotStore } from '../../store/store.js';
import type { CandidateSets } from '../pass/candidates.js';

export class Cooldowns {
  private readonly local = new Map<string, number>();

  constructor(
    private readonly deps: {
      store: SlotStore;
      clock: Clock;
      settings: () => Settings;
      candidates: CandidateSets;
    },
  ) {}

  /** Remaining cooldown this instance set on the channel, 0 when none. */
  localMs(id: string): number {
    const until = this.local.get(id);
    if (until === undefined) return 0;
    const remaining = until - this.deps.clock.now();
    if (remaining > 0) return remaining;
    this.local.delete(id);
    return 0;
  }

  /** Whether selection skips the channel: a bounded one by the load snapshot, an unlimited one by this process. */
  isCooling(c: Candidate, loads?: ReadonlyMap<string, ChannelLoad>): boolean {
    if (!this.deps.settings().cooldown_enabled) return false;
    return isBounded(c) ? loads?.get(c.id)?.coolingDown === true : this.localMs(c.id) > 0;
  }

  /** Whether a released slot may pass to the channel: not cooling by the snapshot or by this instance. */
  allowsHandoff(c: Candidate, loads?: ReadonlyMap<string, ChannelLoad>): boolean {
    if (this.isCooling(c, loads)) return false;
    return !(this.deps.settings().cooldown_enabled && this.localMs(c.id) > 0);
  }

  /** Starts a cooldown (in the store for a bounded channel): the channel, its length, and the store's write. */
  set(
    channel: string | Candidate,
    opts: { ms?: number; reason?: string } = {},
  ): { id: string; ms: number; stored: Promise<void> } | undefined {
    const settings = this.deps.settings();
    if (!settings.cooldown_enabled) return undefined;
    const { id, bounded } = this.deps.candidates.resolve(channel);
    const ms = Math.max(1, Math.round(opts.ms ?? settings.cooldown_seconds * 1000));
    this.local.set(id, this.deps.clock.now() + ms);
    const stored = bounded
      ? this.deps.store.setCooldown(id, ms, opts.reason ?? 'cooldown')
      : Promise.resolve();
    return { id, ms, stored };
  }

  /** Ends a cooldown: the channel, and the store's write. */
  clear(channel: string | Candidate): { id: string; stored: Promise<void> } {
    const { id, bounded } = this.deps.candidates.resolve(channel);
    this.local.delete(id);
    return { id, stored: bounded ? this.deps.store.clearCooldown(id) : Promise.resolve() };
  }
}
