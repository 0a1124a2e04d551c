/**
 * Settings overrides shared through Redis: they live in one hash, a change is announced on a pub/sub channel, and
 * every instance re-reads the hash on the announcement, with a periodic re-read as the fallback for a lost message.
 * A hash whose content does not validate is rejected whole: the instance keeps what it has.
 */
import type { Cluster, Redis } from 'ioredis';
import type { Clock, Timer } from '../../core/clock.js';
import type { Purpose, SharedSettings, SharedSettingsOptions } from '../store.js';
import type { KeyBuilder } from './keys.js';

export interface RedisSharedSettingsDeps {
  client: Redis | Cluster;
  keys: KeyBuilder;
  count: (purpose: Purpose, n: number) => void;
  clock: Clock;
}

export class RedisSharedSettings<T extends object> implements SharedSettings<T> {
  private subscriber: Redis | Cluster | undefined;
  private timer: Timer | undefined;
  private closed = false;
  private last = '';

  constructor(
    private readonly deps: RedisSharedSettingsDeps,
    private readonly opts: SharedSettingsOptions<T>,
  ) {}

  /** Reads and validates the overrides hash (throws when it holds anything invalid). */
  private async read(): Promise<T> {
    this.deps.count('settings', 1);
    const raw = await this.deps.client.hgetall(this.deps.keys.settings());
    const parsed: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(raw)) {
      try {
        parsed[key] = JSON.parse(value);
      } catch {
        parsed[key] = value;
      }
    }
    return this.opts.parse(parsed);
  }

  async write(update: T): Promise<void> {
    const valid = this.opts.parse(update);
    const fields = Object.entries(valid).flatMap(([k, v]) => [k, JSON.stringify(v)]);
    if (fields.length === 0) return;
    const { client, keys } = this.deps;
    this.deps.count('settings', 4); // MULTI, HSET, PUBLISH, EXEC
    await client
      .multi()
      .hset(keys.settings(), ...fields)
      .publish(keys.settingsChannel(), 'changed')
      .exec();
  }

  async reset(): Promise<void> {
    const { client, keys } = this.deps;
    this.deps.count('settings', 4); // MULTI, DEL, PUBLISH, EXEC
    await client.multi().del(keys.settings()).publish(keys.settingsChannel(), 'changed').exec();
  }

  async start(): Promise<void> {
    await this.refresh();
    const subscriber = (this.deps.client as Redis).duplicate({
      enableOfflineQueue: true,
      maxRetriesPerRequest: null,
    });
    subscriber.on('error', (err: Error) => this.opts.onError?.(err));
    subscriber.on('message', () => void this.refresh());
    // After a reconnect, messages sent meanwhile are lost: re-read at once.
    subscriber.on('ready', () => void this.refresh());
    subscriber.subscribe(this.deps.keys.settingsChannel()).catch((err: Error) => this.opts.onError?.(err));
    this.subscriber = subscriber;
    this.scheduleReread();
  }

  /** The fallback for a lost announcement: a re-read every `rereadMs`. */
  private scheduleReread(): void {
    if (this.closed) return;
    this.timer = this.deps.clock.setTimer(() => {
      void this.refresh();
      this.scheduleReread();
    }, this.opts.rereadMs ?? 5000);
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
    this.closed = true;
    this.timer?.cancel();
    this.subscriber?.disconnect();
    this.subscriber = undefined;
  }
}
