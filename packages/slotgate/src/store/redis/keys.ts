/**
 * The only place Redis key names are built (layout: docs/redis.md, "Key layout"). The `{<channel>}` hash tag puts a
 * channel's keys in one Cluster slot, so every per-channel script is cluster-legal; ids are percent-encoded where
 * they hold `{`, `}`, `%` or NUL, so none breaks out of its tag. A limited client's keys use `{%00client:<id>}`.
 * `:queue` and `:waiters` are an older release's queue (`legacy_queue`: doctor leaves them alone).
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
  peak: string;
  limit: string;
}

/** A channel key's kind by its suffix; `:queue` and `:waiters` are `legacy_queue`. */
const CHANNEL_KINDS: Record<string, ChannelKind> = {
  slots: 'slots',
  fifo: 'queue',
  cooldown: 'cooldown',
  peak: 'peak',
  limit: 'limit',
};

type ChannelKind = 'slots' | 'queue' | 'cooldown' | 'peak' | 'limit';

/** Channel key strings are cached: the acquire path asks for them on every call. */
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
        peak: `${tag}:peak`,
        limit: `${tag}:limit`,
      };
      if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
      this.cache.set(id, keys);
    }
    return keys;
  }

  slots(id: string): string {
    return this.channel(id).slots;
  }

  queue(id: string): string {
    return this.channel(id).queue;
  }

  cooldown(id: string): string {
    return this.channel(id).cooldown;
  }

  /** The channel's high-water mark (lua/includes/peak.lua). */
  peak(id: string): string {
    return this.channel(id).peak;
  }

  /** The channel's adaptive limit (lua/includes/limit.lua). */
  limit(id: string): string {
    return this.channel(id).limit;
  }

  /** The pub/sub channel of one instance's grants (its prefix is passed to the scripts). */
  grants(instanceId = ''): string {
    return `${this.base}:grants:${instanceId}`;
  }

  settings(): string {
    return `${this.base}:settings`;
  }

  /** Tagged with `settings()`: one script writes both. */
  settingsRecord(): string {
    return `${this.base}:settings:record:{${this.settings()}}`;
  }

  instances(): string {
    return `${this.base}:instances`;
  }

  epoch(): string {
    return `${this.base}:epoch`;
  }

  /** The load summary's hash tag: all its keys carry `{<this>}`, so on Cluster the summary lives in one slot. */
  loadSummary(): string {
    return `${this.base}:loads`;
  }

  /** Instance id → its counts per channel and when they lapse. */
  loadCounts(): string {
    return `${this.base}:loads:counts:{${this.loadSummary()}}`;
  }

  /** Channel → cooldown end, for the summary's readers. */
  loadCooling(): string {
    return `${this.base}:loads:cooling:{${this.loadSummary()}}`;
  }

  /** The summed counts readers share; one key per max age, so a reader never gets one older than it allows. */
  loadSnapshot(maxAgeMs: number): string {
    return `${this.base}:loads:snapshot:v2:${maxAgeMs}:{${this.loadSummary()}}`;
  }

  settingsChannel(): string {
    return `${this.base}:settings:changed`;
  }

  /** A SCAN pattern matching every key this builder makes. */
  pattern(): string {
    return `${this.base}:*`;
  }

  /** Splits a key made by this builder into its channel and kind; null for a key of another shape. */
  parse(
    key: string,
  ):
    | { channelId: string; kind: ChannelKind | 'legacy_queue' }
    | { kind: 'settings' | 'instances' | 'epoch' | 'load_counts' | 'load_cooling' | 'load_snapshot' }
    | null {
    if (key === this.settings() || key === this.settingsRecord()) return { kind: 'settings' };
    if (key === this.loadCounts()) return { kind: 'load_counts' };
    if (key === this.loadCooling()) return { kind: 'load_cooling' };
    if (key.startsWith(`${this.base}:loads:snapshot:`) && key.endsWith(`:{${this.loadSummary()}}`))
      return { kind: 'load_snapshot' };
    if (key === this.instances()) return { kind: 'instances' };
    if (key === this.epoch() || key.startsWith(`${this.epoch()}:{`)) return { kind: 'epoch' };
    if (!key.startsWith(`${this.base}:{`)) return null;
    const m = /^\{([^{}]*)\}:(slots|fifo|cooldown|peak|limit|queue|waiters)$/.exec(
      key.slice(this.base.length + 1),
    );
    if (!m) return null;
    return { channelId: decodeChannelId(m[1]!), kind: CHANNEL_KINDS[m[2]!] ?? 'legacy_queue' };
  }
}
