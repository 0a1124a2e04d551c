/**
 * Settings overrides in one hash beside a record of their last change (settings-record.ts), re-read on every
 * announcement, reconnect and `rereadMs`. An instance that finds no record, or an older one than it read, keeps its
 * overrides and puts them back; resets are versioned too, so the highest version wins and no reset is undone.
 */
import type { Timer } from '../../../core/clock.js';
import { randomInstanceId } from '../../../core/ids.js';
import {
  NO_ORIGIN,
  type OverridesOrigin,
  type SharedSettings,
  type SharedSettingsOptions,
} from '../../fleet.js';
import { SETTINGS_SCRIPTS } from '../scripts.js';
import {
  decide,
  fieldValues,
  isRecorded,
  originOf,
  restoreArgs,
  type RecordedSnapshot,
  type SettingsSnapshot,
} from './settings-record.js';
import { subscriberOf, type Subscriber } from '../connection/connection.js';
import type { FleetDeps } from './presence.js';

export class RedisSharedSettings<T extends object> implements SharedSettings<T> {
  private subscriber: Subscriber | undefined;
  private timer: Timer | undefined;
  private closed = false;
  /** The overrides last handed to onOverrides, as JSON. */
  private last = '';
  /** What this instance puts back after a store loss. */
  private known: RecordedSnapshot | undefined;
  private current: OverridesOrigin = NO_ORIGIN;
  private refreshing: Promise<void> | undefined;
  private again = false;
  private readonly instanceId: string;

  constructor(
    private readonly deps: FleetDeps,
    private readonly opts: SharedSettingsOptions<T>,
  ) {
    this.instanceId = opts.instanceId ?? randomInstanceId();
  }

  get origin(): OverridesOrigin {
    return this.current;
  }

  private get keys(): string[] {
    return [this.deps.keys.settings(), this.deps.keys.settingsRecord()];
  }

  private async read(): Promise<SettingsSnapshot> {
    this.deps.count('settings', 1);
    return SETTINGS_SCRIPTS.read.call(this.deps.client, this.keys, []);
  }

  /** The version recorded, 0 or -1 (lua/writeSettings-2.lua). */
  private async record(change: string, known: number, digest: string, fields: string[]): Promise<number> {
    this.deps.count('settings', 1);
    const by = change === 'external' ? '' : this.instanceId;
    const args = [this.deps.keys.settingsChannel(), change, by, known, digest, ...fields];
    return SETTINGS_SCRIPTS.write.call(this.deps.client, this.keys, args);
  }

  async write(update: T): Promise<void> {
    const valid = this.opts.parse(update);
    const fields = Object.entries(valid).flatMap(([k, v]) => [k, JSON.stringify(v)]);
    if (fields.length === 0) return;
    // a store that lost the overrides this update builds on gets them back first
    for (let attempt = 0; attempt < 2; attempt++) {
      const known = this.known;
      if ((await this.record('update', known?.record.version ?? 0, '', fields)) > 0) return;
      if (known) await this.restore(known);
    }
    throw new Error('settings update not written: the store keeps losing the overrides it is written on');
  }

  async reset(): Promise<void> {
    await this.record('reset', this.known?.record.version ?? 0, '', []);
  }

  async start(): Promise<void> {
    await this.refresh();
    const subscriber = subscriberOf(this.deps.client);
    subscriber.on('error', (err: Error) => this.opts.onError?.(err));
    subscriber.on('message', () => void this.refresh());
    const subscribe = () =>
      subscriber.subscribe(this.deps.keys.settingsChannel()).catch((err: Error) => {
        if (!this.closed) this.opts.onError?.(err);
      });
    // subscribed on every 'ready', the first included; messages sent during a gap are lost, and a restarted Redis may
    // have lost the overrides
    subscriber.on('ready', () => {
      void subscribe();
      void this.refresh();
    });
    this.subscriber = subscriber;
    this.scheduleReread();
  }

  private scheduleReread(): void {
    if (this.closed) return;
    this.timer = this.deps.clock.setTimer(() => {
      void this.refresh();
      this.scheduleReread();
    }, this.opts.rereadMs ?? 5000);
  }

  /** One read at a time; one asked for meanwhile runs after it, so the newest read applies last. */
  private refresh(): Promise<void> {
    if (this.refreshing) {
      this.again = true;
      return this.refreshing;
    }
    const run = async () => {
      for (let pass = 0; pass < 3 && (pass === 0 || this.again) && !this.closed; pass++) {
        this.again = false;
        try {
          await this.sync();
        } catch (err) {
          this.opts.onError?.(err as Error);
        }
      }
    };
    this.refreshing = run().finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  private async sync(): Promise<void> {
    const snapshot = await this.read();
    const action = decide(this.known, snapshot);
    if (action === 'restore') {
      if (!(await this.restore(this.known!))) this.again = true;
      return;
    }
    const overrides = this.opts.parse(fieldValues(snapshot.fields));
    if (isRecorded(snapshot)) {
      this.known = snapshot;
      this.current = originOf(snapshot.record);
    } else {
      this.current = action === 'record' ? { ...NO_ORIGIN, change: 'external' } : NO_ORIGIN;
    }
    const text = JSON.stringify(overrides);
    if (text !== this.last) {
      this.last = text;
      this.opts.onOverrides(overrides);
    }
    // changed outside the scripts: the first instance there records it, and its announcement tells the rest
    if (action === 'record')
      await this.record('external', snapshot.record?.version ?? 0, snapshot.digest, []);
  }

  /** True when this instance put them back (false: the store has them or newer). */
  private async restore(known: RecordedSnapshot): Promise<boolean> {
    this.deps.count('settings', 1);
    const args = [this.deps.keys.settingsChannel(), this.instanceId, ...restoreArgs(known)];
    const at = await SETTINGS_SCRIPTS.restore.call(this.deps.client, this.keys, args);
    if (at <= 0) return false;
    const origin = {
      ...originOf(known.record),
      restoredAt: new Date(at).toISOString(),
      restoredBy: this.instanceId,
    };
    this.current = origin;
    this.opts.onRestore?.(this.opts.parse(fieldValues(known.fields)), origin);
    return true;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.timer?.cancel();
    this.subscriber?.disconnect();
    this.subscriber = undefined;
  }
}
