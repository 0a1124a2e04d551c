/**
 * Settings shared through Redis (spec §6): admin overrides live in one hash, a change is announced on a pub/sub
 * channel, and every instance re-reads the hash on the announcement — with a periodic re-read as the fallback for a
 * lost message. A hash whose content does not validate is rejected whole: the instance keeps what it has.
 */
import type { Redis } from 'ioredis';
import { parseSettingsUpdate, type SettingsUpdate } from '../../core/settings.js';
import type { RedisStore } from './redis-store.js';

export interface SettingsSyncOptions {
  store: RedisStore;
  /** Called with the overrides read from Redis (validated), on start, on every announcement and every re-read. */
  onOverrides: (overrides: SettingsUpdate) => void;
  onError?: (err: Error) => void;
  /** Fallback re-read period. @default 5000 */
  rereadMs?: number;
}

export class RedisSettingsSync {
  private subscriber: Redis | undefined;
  private timer: NodeJS.Timeout | undefined;
  private last = '';

  constructor(private readonly opts: SettingsSyncOptions) {}

  private get client(): Redis {
    return this.opts.store.client as Redis;
  }

  /** Reads and validates the overrides hash (throws SettingsError when it holds anything invalid). */
  async read(): Promise<SettingsUpdate> {
    this.opts.store.countCommands('settings', 1);
    const raw = await this.client.hgetall(this.opts.store.keys.settings());
    const parsed: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(raw)) {
      try {
        parsed[key] = JSON.parse(value);
      } catch {
        parsed[key] = value;
      }
    }
    return parseSettingsUpdate(parsed);
  }

  /** Validates, stores and announces an update (merged into the existing overrides). */
  async write(update: SettingsUpdate): Promise<void> {
    const valid = parseSettingsUpdate(update);
    const fields = Object.entries(valid).flatMap(([k, v]) => [k, JSON.stringify(v)]);
    if (fields.length === 0) return;
    const keys = this.opts.store.keys;
    this.opts.store.countCommands('settings', 4); // MULTI, HSET, PUBLISH, EXEC
    await this.client
      .multi()
      .hset(keys.settings(), ...fields)
      .publish(keys.settingsChannel(), 'changed')
      .exec();
  }

  /** Removes every override (back to the configured values) and announces it. */
  async reset(): Promise<void> {
    const keys = this.opts.store.keys;
    this.opts.store.countCommands('settings', 4); // MULTI, DEL, PUBLISH, EXEC
    await this.client.multi().del(keys.settings()).publish(keys.settingsChannel(), 'changed').exec();
  }

  /**
   * Reads the overrides once, then listens. Never waits on Redis beyond the first read's own time-out: with Redis
   * down at start the instance runs on its configured settings and picks the overrides up when Redis answers.
   */
  async start(): Promise<void> {
    await this.refresh();
    const subscriber = this.client.duplicate({ enableOfflineQueue: true, maxRetriesPerRequest: null });
    subscriber.on('error', (err: Error) => this.opts.onError?.(err));
    subscriber.on('message', () => void this.refresh());
    // After a reconnect, messages sent meanwhile are lost: re-read at once.
    subscriber.on('ready', () => void this.refresh());
    subscriber
      .subscribe(this.opts.store.keys.settingsChannel())
      .catch((err: Error) => this.opts.onError?.(err));
    this.subscriber = subscriber;
    this.timer = setInterval(() => void this.refresh(), this.opts.rereadMs ?? 5000);
    this.timer.unref();
  }

  private async refresh(): Promise<void> {
    try {
      const overrides = await this.read();
      const text = JSON.stringify(overrides);
      if (text === this.last) return;
      this.last = text;
      this.opts.onOverrides(overrides);
    } catch (err) {
      this.opts.onError?.(err as Error);
    }
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    this.subscriber?.disconnect();
    this.subscriber = undefined;
  }
}
