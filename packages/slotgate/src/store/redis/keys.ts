/**
 * The only place Redis key names are built. Layout (docs/redis.md):
 *
 *   <prefix>:v1:{<channel>}:slots     sorted set  member = lease token,  score = lease expiry (ms, Redis clock)
 *   <prefix>:v1:{<channel>}:fifo      sorted set  member = "<max>|<token>", score = arrival (µs, Redis clock): the
 *                                                 wait queue, FIFO; a registration lives a set time past its arrival
 *   <prefix>:v1:{<channel>}:cooldown  string      value = reason, PX = cooldown length
 *   <prefix>:v1:settings              hash        settings overrides shared by every instance
 *   <prefix>:v1:settings:record:{<prefix>:v1:settings}
 *                                     hash        the overrides' last change (version, who, when, digest); the tag
 *                                                 puts it in the overrides' Cluster slot, so one script writes both
 *   <prefix>:v1:settings:changed      pub/sub     announces settings changes
 *   <prefix>:v1:instances             hash        gateway instance id → JSON heartbeat (dashboard's instance list)
 *   <prefix>:v1:grants:<instanceId>   pub/sub     grants and queue news for one instance's waiters
 *   <prefix>:v1:epoch                 string      "<id>|<created at, Redis ms>|<kind>|<run_id>": changes when Redis lost data
 *   <prefix>:v1:loads:counts:{<prefix>:v1:loads}
 *                                     hash        the load summary (load-summary.ts): instance id → its own counts per
 *                                                 channel, one JSON value each, with when they lapse
 *   <prefix>:v1:loads:snapshot:v2:<max age>:{<prefix>:v1:loads}
 *                                     string      the counts summed over the live instances (JSON), rebuilt when it
 *                                                 expired (lua/exchangeLoads-3.lua)
 *   <prefix>:v1:loads:cooling:{<prefix>:v1:loads}
 *                                     hash        channel → the end of its cooldown (Redis ms), for the summary's readers
 *   (releases before the per-instance counts wrote `<prefix>:v1:loads` (channel → sum), `:loads:reporters:{…}`,
 *   `:loads:by:<instance>:{…}` and `:loads:snapshot:<max age>:{…}`; they expire by themselves, and doctor knows them)
 *
 * The `{<channel>}` hash tag puts all keys of one channel in the same Redis Cluster slot, so every per-channel script
 * is cluster-legal. Channel ids are percent-encoded where they hold `{`, `}` or `%`, so no id can break out of its tag.
 * A limited client's slots and queue use the same layout under `{%00client:<client id>}` (no channel id encodes to a
 * bare `%00`). Releases before the queue moved to `:fifo` kept it in `:queue` with the registrations in `:waiters`
 * (parse() names them `legacy_queue`: an older gateway sharing the Redis still writes them).
 */

export const SCHEMA_VERSION = 'v1';

export function encodeChannelId(id: string): string {
  // NUL starts the engine's own resource ids (a client's slots: `\0client:<id>` → `{%00client:<id>}`)
  // eslint-disable-next-line no-control-regex -- NUL is one of the characters encoded
  return id.replace(/[{}%\u0000]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`);
}

export function decodeChannelId(encoded: string): string {
  return encoded.replace(/%(7B|7D|25|00)/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

interface ChannelKeys {
  slots: string;
  queue: string;
  cooldown: string;
}

/** A channel key's kind by its suffix (`:queue` and `:waiters`, an older release's queue, are the rest). */
const CHANNEL_KINDS: Record<string, 'slots' | 'queue' | 'cooldown'> = {
  slots: 'slots',
  fifo: 'queue',
  cooldown: 'cooldown',
};

/** Channel key strings are built once per channel id (the acquire path asks for them on every call). */
const CACHE_LIMIT = 10_000;

export class KeyBuilder {
  readonly base: string;
  private readonly cache = new Map<string, ChannelKeys>();

  constructor(prefix = 'slotgate') {
    if (!prefix || /[{}\s]/.test(prefix)) {
      throw new TypeError(
        `Expected \`prefix\` to be a non-empty string without braces or spaces, got ${JSON.stringify(prefix)}`,
      );
    }
    this.base = `${prefix}:${SCHEMA_VERSION}`;
  }

  private channel(id: string): ChannelKeys {
    let keys = this.cache.get(id);
    if (!keys) {
      const tag = `${this.base}:{${encodeChannelId(id)}}`;
      keys = {
        slots: `${tag}:slots`,
        queue: `${tag}:fifo`,
        cooldown: `${tag}:cooldown`,
      };
      if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
      this.cache.set(id, keys);
    }
    return keys;
  }

  slots(id: string): string {
    return this.channel(id).slots;
  }

  /** The channel's wait queue (lua/includes/queue.lua). */
  queue(id: string): string {
    return this.channel(id).queue;
  }

  cooldown(id: string): string {
    return this.channel(id).cooldown;
  }

  /** The pub/sub channel of one instance's grants (its prefix is passed to the scripts). */
  grants(instanceId = ''): string {
    return `${this.base}:grants:${instanceId}`;
  }

  settings(): string {
    return `${this.base}:settings`;
  }

  /** The record of the overrides' last change, in the same hash slot as `settings()` (its hash tag is that key). */
  settingsRecord(): string {
    return `${this.base}:settings:record:{${this.settings()}}`;
  }

  instances(): string {
    return `${this.base}:instances`;
  }

  /** The store's epoch (epoch.ts): a new one means Redis restarted empty or another redis-server took over. */
  epoch(): string {
    return `${this.base}:epoch`;
  }

  /**
   * The load summary's hash tag (and, before the per-instance counts, its key): every key of the summary carries
   * `{<this>}`, so on Cluster the whole summary lives in one slot.
   */
  loadSummary(): string {
    return `${this.base}:loads`;
  }

  /** The load summary: instance id → that instance's counts per channel and when they lapse (summary's slot). */
  loadCounts(): string {
    return `${this.base}:loads:counts:{${this.loadSummary()}}`;
  }

  /** The cooldown ends the load summary's readers see (summary's slot). */
  loadCooling(): string {
    return `${this.base}:loads:cooling:{${this.loadSummary()}}`;
  }

  /**
   * The load summary's non-zero counts as one string its readers share for up to `maxAgeMs` (summary's slot): one key
   * per greatest age, so a reader that allows less never gets an older snapshot.
   */
  loadSnapshot(maxAgeMs: number): string {
    return `${this.base}:loads:snapshot:v2:${maxAgeMs}:{${this.loadSummary()}}`;
  }

  /** Before the per-instance counts: the instances contributing to the summary (doctor still knows the key). */
  loadReporters(): string {
    return `${this.base}:loads:reporters:{${this.loadSummary()}}`;
  }

  /** Before the per-instance counts: one instance's contributions, `prefix + <encoded id> + suffix`. */
  loadReporterParts(): { prefix: string; suffix: string } {
    return { prefix: `${this.base}:loads:by:`, suffix: `:{${this.loadSummary()}}` };
  }

  loadReporter(instanceId: string): string {
    const { prefix, suffix } = this.loadReporterParts();
    return `${prefix}${encodeChannelId(instanceId)}${suffix}`;
  }

  settingsChannel(): string {
    return `${this.base}:settings:changed`;
  }

  /** A SCAN pattern matching every key this builder makes. */
  pattern(): string {
    return `${this.base}:*`;
  }

  /** Splits a key made by this builder into its channel and kind; null for a key of another shape. */
  parse(key: string):
    | { channelId: string; kind: 'slots' | 'queue' | 'cooldown' | 'legacy_queue' }
    | {
        kind:
          | 'settings'
          | 'instances'
          | 'epoch'
          | 'load_summary'
          | 'load_counts'
          | 'load_reporters'
          | 'load_reporter'
          | 'load_cooling'
          | 'load_snapshot';
      }
    | null {
    if (key === this.settings() || key === this.settingsRecord()) return { kind: 'settings' };
    if (key === this.loadSummary()) return { kind: 'load_summary' };
    if (key === this.loadCounts()) return { kind: 'load_counts' };
    if (key === this.loadReporters()) return { kind: 'load_reporters' };
    if (key === this.loadCooling()) return { kind: 'load_cooling' };
    if (key.startsWith(`${this.base}:loads:snapshot:`) && key.endsWith(`:{${this.loadSummary()}}`))
      return { kind: 'load_snapshot' };
    const { prefix, suffix } = this.loadReporterParts();
    if (key.startsWith(prefix) && key.endsWith(suffix)) return { kind: 'load_reporter' };
    if (key === this.instances()) return { kind: 'instances' };
    if (key === this.epoch() || key.startsWith(`${this.epoch()}:{`)) return { kind: 'epoch' };
    if (!key.startsWith(`${this.base}:{`)) return null;
    const m = /^\{([^{}]*)\}:(slots|fifo|cooldown|queue|waiters)$/.exec(key.slice(this.base.length + 1));
    if (!m) return null;
    return { channelId: decodeChannelId(m[1]!), kind: CHANNEL_KINDS[m[2]!] ?? 'legacy_queue' };
  }
}
