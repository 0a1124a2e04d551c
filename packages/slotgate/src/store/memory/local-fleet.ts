/** Settings overrides and the instance list of a single process, behind the same calls as the Redis ones. */
import type { Clock } from '../../core/clock.js';
import { randomInstanceId } from '../../core/ids.js';
import {
  NO_ORIGIN,
  type InstanceInfo,
  type OverridesOrigin,
  type Presence,
  type SharedSettings,
  type SharedSettingsOptions,
} from '../fleet.js';

export class LocalSharedSettings<T extends object> implements SharedSettings<T> {
  private overrides: Record<string, unknown> = {};
  private current: OverridesOrigin = NO_ORIGIN;
  private readonly instanceId: string;

  constructor(
    private readonly opts: SharedSettingsOptions<T>,
    private readonly clock: Clock,
  ) {
    this.instanceId = opts.instanceId ?? randomInstanceId();
  }

  get origin(): OverridesOrigin {
    return this.current;
  }

  async start(): Promise<void> {
    this.opts.onOverrides(this.opts.parse(this.overrides));
  }

  async write(update: T): Promise<void> {
    const valid = this.opts.parse(update);
    if (Object.keys(valid).length === 0) return;
    this.overrides = { ...this.overrides, ...valid };
    this.changed('update');
  }

  async reset(): Promise<void> {
    this.overrides = {};
    this.changed('reset');
  }

  private changed(change: 'update' | 'reset'): void {
    this.current = {
      ...NO_ORIGIN,
      version: this.current.version + 1,
      change,
      changedAt: new Date(this.clock.now()).toISOString(),
      changedBy: this.instanceId,
    };
    this.opts.onOverrides(this.opts.parse(this.overrides));
  }

  async close(): Promise<void> {}
}

export class LocalPresence implements Presence {
  private readonly seen = new Map<string, InstanceInfo & { seen_at: string }>();

  constructor(private readonly clock: Clock) {}

  async announce(info: InstanceInfo): Promise<void> {
    this.seen.set(info.id, { ...info, seen_at: new Date(this.clock.now()).toISOString() });
  }

  async list(maxAgeMs: number): Promise<Array<InstanceInfo & { seen_at: string }>> {
    const fresh = this.clock.now() - maxAgeMs;
    return [...this.seen.values()]
      .filter((i) => Date.parse(i.seen_at) >= fresh)
      .sort((a, b) => a.id.localeCompare(b.id));
  }

  async leave(id: string): Promise<void> {
    this.seen.delete(id);
  }
}
