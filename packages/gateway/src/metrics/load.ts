/**
 * Per-channel and per-client gauges: what is in flight and waiting, across the fleet (through the load view, so a
 * scrape costs no Redis command while its snapshot is fresh) and on this instance, against the configured limits.
 */
import type { Registry } from 'prom-client';
import type { Admission, ChannelLimit, ChannelLoad, ChannelPeak, ChannelStats } from 'slotgate';
import type { ChannelRegistry } from '../channels.js';
import { scrapedGauge, type Sample } from './scrape.js';
import { sharedRead } from '../shared-read.js';

export interface LoadSources {
  admission: () => Admission;
  channels: () => ChannelRegistry;
}

interface ChannelRow {
  id: string;
  maxConcurrency: number;
  local: number;
  /** An adaptive channel's limit as this instance last learned it. */
  limit: ChannelLimit | undefined;
  /** Undefined when the loads could not be read: the load-derived gauges then leave the channel out, not at 0. */
  load: ChannelLoad | undefined;
}

async function readChannelRows(sources: LoadSources): Promise<ChannelRow[]> {
  const channels = sources.channels().channels;
  const admission = sources.admission();
  const loads = await admission.viewLoads(channels).catch(() => undefined);
  const mine = admission.stats().channels;
  const limits = admission.limits(channels);
  return channels.map((c) => ({
    id: c.id,
    maxConcurrency: c.maxConcurrency,
    local: mine[c.id]?.active ?? 0,
    limit: limits.get(c.id),
    load: loads?.get(c.id),
  }));
}

const cooldownRemaining = (load: ChannelLoad): number =>
  !load.coolingDown ? 0 : load.cooldownRemainingMs < 0 ? -1 : load.cooldownRemainingMs / 1000;

const PER_CHANNEL: Array<[string, string, (row: ChannelRow) => number | undefined]> = [
  [
    'slotgate_channel_in_flight',
    'Requests in flight on the channel across all instances (load view)',
    (r) => r.load?.active,
  ],
  [
    'slotgate_channel_waiting',
    'Waiters queued on the channel across all instances (load view)',
    (r) => r.load?.waiting,
  ],
  [
    'slotgate_channel_cooling',
    'Whether the channel is cooling down (1) or not (0)',
    (r) => (r.load ? (r.load.coolingDown ? 1 : 0) : undefined),
  ],
  [
    'slotgate_channel_cooldown_remaining_seconds',
    'Cooldown left on the channel (-1: a cooldown without expiry)',
    (r) => (r.load ? cooldownRemaining(r.load) : undefined),
  ],
  ['slotgate_channel_max_concurrency', 'Configured max concurrency (0 = unlimited)', (r) => r.maxConcurrency],
  ['slotgate_channel_local_in_flight', 'Requests this instance has in flight on the channel', (r) => r.local],
  [
    'slotgate_channel_adaptive_limit',
    "An adaptive channel's limit, shared by the fleet, as this instance last learned it (min_concurrency to max_concurrency)",
    (r) => r.limit?.limit,
  ],
  [
    'slotgate_channel_adaptive_enforced',
    'Whether the adaptive limit admits (1) or is only observed (0, adaptive.enforce: false)',
    (r) => (r.limit ? (r.limit.enforced ? 1 : 0) : undefined),
  ],
];

/** The limited clients of the configuration (names, never keys), this instance's counts: no Redis command. */
const PER_CLIENT: Array<[string, string, (stats: ChannelStats, max: number) => number]> = [
  [
    'slotgate_client_in_flight',
    "A limited client's requests in flight on this instance (each holds one of the client's slots)",
    (s) => s.active,
  ],
  [
    'slotgate_client_waiting',
    "A limited client's requests waiting on this instance for one of its own slots",
    (s) => s.waiting,
  ],
  [
    'slotgate_client_max_concurrency',
    "A limited client's max concurrency across the fleet (tokens[].max_concurrency)",
    (_, max) => max,
  ],
];

const IDLE: ChannelStats = { active: 0, waiting: 0 };

/** The bounded channels' high-water marks, one store read per scrape; none when it fails (no series, not 0). */
async function readPeaks(sources: LoadSources): Promise<Map<string, ChannelPeak>> {
  const bounded = sources.channels().channels.filter((c) => c.maxConcurrency > 0);
  return sources
    .admission()
    .readPeaks(bounded)
    .catch(() => new Map());
}

const PEAKS: Array<[string, string, (peak: ChannelPeak) => number]> = [
  [
    'slotgate_channel_in_flight_peak',
    'The most requests in flight on the channel at once across all instances, over the window below (store)',
    (p) => p.peak,
  ],
  [
    'slotgate_channel_in_flight_peak_window_seconds',
    'How far back slotgate_channel_in_flight_peak reaches: 60 to 120 s',
    (p) => p.windowMs / 1000,
  ],
];

export function registerLoadGauges(register: Registry, sources: LoadSources): void {
  for (const [name, help, value] of PER_CLIENT) {
    scrapedGauge(register, {
      name,
      help,
      labelNames: ['client'],
      read: () => {
        const mine = sources.admission().stats().clients;
        return sources
          .channels()
          .clients()
          .filter(({ client }) => (client.maxConcurrency ?? 0) > 0)
          .map(({ client }): Sample<'client'> => [
            { client: client.id },
            value(mine[client.id] ?? IDLE, client.maxConcurrency!),
          ]);
      },
    });
  }
  const rows = sharedRead(() => readChannelRows(sources));
  for (const [name, help, value] of PER_CHANNEL) {
    scrapedGauge(register, {
      name,
      help,
      labelNames: ['channel'],
      read: async () =>
        (await rows()).flatMap((row): Sample<'channel'>[] => {
          const v = value(row);
          return v === undefined ? [] : [[{ channel: row.id }, v]];
        }),
    });
  }
  const peaks = sharedRead(() => readPeaks(sources));
  for (const [name, help, value] of PEAKS) {
    scrapedGauge(register, {
      name,
      help,
      labelNames: ['channel'],
      read: async () =>
        [...(await peaks())].map(([channel, peak]): Sample<'channel'> => [{ channel }, value(peak)]),
    });
  }
  scrapedGauge(register, {
    name: 'slotgate_channels',
    help: 'Configured channels',
    read: async () => [[{}, (await rows()).length]],
  });
}
