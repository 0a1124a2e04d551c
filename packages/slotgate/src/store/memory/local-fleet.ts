/**
 * The fleet capabilities of a store for a single process: settings overrides and the instance list live in this
 * process, so an application uses the same calls whether or not it shares a Redis with other instances.
 */
import type { Clock } from '../../core/clock.js';
import type { InstanceInfo, Presence, SharedSettings, SharedSettingsOptions } from '../store.js';

export class LocalSharedSettings<T extends object> implements SharedSettings<T> {
  private overrides: Record<string, unknown> = {};

  constructor(private readonly opts: SharedSettingsOptions<T>) {}

  async start(): Promise<void> {
    this.opts.onOverrides(this.opts.parse(this.overrides));
  }

  async write(update: T): Promise<void> {
    const valid = this.opts.parse(update);
    if (Object.keys(valid).length === 0) return;
    this.overrides = { ...this.overrides, ...valid };
    this.opts.onOverrides(this.opts.parse(this.overrides));
  }

  async reset(): Promise<void> {
    this.overrides = {};
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
