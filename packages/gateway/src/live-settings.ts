/**
 * The hot settings of a running gateway: the config file's, under the overrides an admin writes, which the store
 * shares with every instance. Whichever side changes, the result applies to the admission engine at once.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { Admission, SharedSettings, SlotStore } from 'slotgate';
import type { ConfigInForce } from './reload.js';
import {
  admissionPart,
  gatewaySettings,
  settingsInForce,
  settingsSource,
  type GatewaySettings,
  type GatewaySettingsUpdate,
} from './settings.js';

/** The same settings-sync error is logged at error level once per this long at most. */
const SYNC_ERROR_REPEAT_MS = 60_000;

export class LiveSettings {
  /** Shared through the store; they win over the config file's. */
  overrides: GatewaySettingsUpdate = {};
  /** The settings in force. */
  value: GatewaySettings;
  private readonly sync: SharedSettings<GatewaySettingsUpdate>;
  /** Set by start(): no store callback comes before. */
  private log: FastifyBaseLogger | undefined;
  private readonly errorsSeen = new Map<string, number>();

  constructor(
    store: SlotStore,
    private readonly admission: Admission,
    private readonly current: ConfigInForce,
  ) {
    this.value = settingsInForce(current.config.settings);
    this.sync = store.sharedSettings({
      parse: gatewaySettings.parse,
      instanceId: admission.instanceId,
      onOverrides: (o) => {
        this.overrides = o;
        this.apply();
        this.log?.info({ overrides: o }, 'settings applied');
      },
      onRestore: (o, origin) =>
        this.log?.warn(
          { event: 'settings_restored', overrides: o, version: origin.version, changed_by: origin.changedBy },
          'settings overrides restored: the store had lost them',
        ),
      onError: (err) => this.syncError(err.message),
    });
  }

  /** Follows the overrides shared through the store; without them, the configured settings stay in force. */
  async start(log: FastifyBaseLogger): Promise<void> {
    this.log = log;
    try {
      await this.sync.start();
    } catch (err) {
      log.error(
        { err: (err as Error).message },
        'settings sync could not start; using the configured settings',
      );
    }
  }

  /** Recomputes the settings after the overrides or the config file changed. */
  apply = (): GatewaySettings => {
    this.value = settingsInForce(this.current.config.settings, this.overrides);
    this.admission.updateSettings(admissionPart(this.value));
    return this.value;
  };

  /** Writes an update for every instance; a bad combination is rejected before anything changes. */
  put = async (update: GatewaySettingsUpdate): Promise<GatewaySettings> => {
    const merged = { ...this.overrides, ...update };
    await this.sync.write(update);
    this.overrides = merged;
    return this.apply();
  };

  /** Where each setting in force comes from, and the overrides' last change. */
  source = (): Record<string, unknown> =>
    settingsSource(this.current.config.settings, this.overrides, this.sync.origin);

  close(): Promise<void> {
    return this.sync.close();
  }

  /** While Redis is unreachable the subscription fails again on every retry: the repeats are logged at debug. */
  private syncError(message: string): void {
    const now = Date.now();
    const seen = this.errorsSeen.get(message);
    if (seen !== undefined && now - seen < SYNC_ERROR_REPEAT_MS) {
      this.log?.debug({ err: message }, 'settings sync (repeated)');
      return;
    }
    if (this.errorsSeen.size > 100) this.errorsSeen.clear();
    this.errorsSeen.set(message, now);
    this.log?.error({ err: message }, 'settings sync');
  }
}
