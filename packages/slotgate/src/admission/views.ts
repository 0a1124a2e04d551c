/** What operators read: channels and clients from the store or the load view (unlimited channels from here), and the stats. */
import { isBounded, type Candidate } from '../core/channel.js';
import {
  CLIENT_RESOURCE_PREFIX,
  clientIdOf,
  isClientResource,
  isLimited,
  validateClient,
  type Client,
} from '../core/client.js';
import type { ChannelPeak } from '../store/peak.js';
import type { ChannelLoad } from '../store/store.js';
import type { Engine } from './engine.js';
import type { LocalShare } from './leases/local-share.js';
import type { AdmissionStats, ChannelStats } from './stats.js';

/** Adds the unlimited channels' loads: this instance's tickets and cooldowns. */
function withUnlimited(engine: Engine, channels: readonly Candidate[], loads: Map<string, ChannelLoad>) {
  const { tickets, cooldowns } = engine;
  for (const c of channels) {
    if (isBounded(c)) continue;
    const cooling = cooldowns.localMs(c.id);
    const active = tickets.unlimitedActive.get(c.id) ?? 0;
    loads.set(c.id, { active, waiting: 0, coolingDown: cooling > 0, cooldownRemainingMs: cooling });
  }
  return loads;
}

const boundedIds = (channels: readonly Candidate[]) => channels.filter(isBounded).map((c) => c.id);

export async function readLoads(
  engine: Engine,
  channels: readonly Candidate[],
): Promise<Map<string, ChannelLoad>> {
  const ids = boundedIds(channels);
  return withUnlimited(engine, channels, ids.length ? await engine.store.readLoads(ids) : new Map());
}

export async function viewLoads(
  engine: Engine,
  channels: readonly Candidate[],
): Promise<Map<string, ChannelLoad>> {
  return withUnlimited(engine, channels, await engine.view.read(boundedIds(channels)));
}

/** The bounded channels' high-water marks (an unlimited channel has no slots in the store). */
export async function readPeaks(
  engine: Engine,
  channels: readonly Candidate[],
): Promise<Map<string, ChannelPeak>> {
  const ids = boundedIds(channels);
  return ids.length ? engine.store.readPeaks(ids) : new Map();
}

export async function readHolders(
  engine: Engine,
  instanceId: string,
  channels: readonly Candidate[],
): Promise<Map<string, Map<string, number>>> {
  const ids = boundedIds(channels);
  const holders = ids.length ? await engine.store.readHolders(ids) : new Map<string, Map<string, number>>();
  for (const c of channels) {
    if (isBounded(c)) continue;
    const active = engine.tickets.unlimitedActive.get(c.id) ?? 0;
    holders.set(c.id, new Map(active > 0 ? [[instanceId, active]] : []));
  }
  return holders;
}

export async function readClients(
  engine: Engine,
  clients: readonly Client[],
): Promise<Map<string, ChannelLoad>> {
  for (const client of clients) validateClient(client);
  const ids = clients.filter(isLimited).map((c) => CLIENT_RESOURCE_PREFIX + c.id);
  const loads = ids.length ? await engine.store.readLoads(ids) : new Map<string, ChannelLoad>();
  return new Map([...loads].map(([id, load]) => [clientIdOf(id), load]));
}

export function statsOf(engine: Engine, instanceId: string, localShare: LocalShare): AdmissionStats {
  const { leases, tickets, inbox, recorder: r, store, view, handoff } = engine;
  const channels: Record<string, ChannelStats> = {};
  const clients: Record<string, ChannelStats> = {};
  const touch = (id: string) =>
    isClientResource(id)
      ? (clients[clientIdOf(id)] ??= { active: 0, waiting: 0 })
      : (channels[id] ??= { active: 0, waiting: 0 });
  for (const lease of leases.leases()) touch(lease.channelId).active++;
  for (const [id, n] of tickets.unlimitedActive) touch(id).active += n;
  for (const id of inbox.channels()) touch(id).waiting = inbox.count(id);
  return {
    instanceId,
    store: store.kind,
    commands: { ...store.commands },
    outcomes: { ...r.outcomes },
    acquireAttempts: r.acquireAttempts,
    acquireCalls: r.acquireCalls,
    firstTries: r.firstTries,
    firstTriesFull: r.firstTriesFull,
    handoffs: handoff.count,
    grants: r.grants,
    admissionLatencyMs: r.admissionLatency.snapshot(),
    waitTimeMs: r.waitTime.snapshot(),
    loadView: { ...view.counters },
    leasesLost: r.leasesLost,
    liveLeases: leases.size,
    localShare: { mode: localShare.mode, active: localShare.active, admitted: localShare.admitted },
    channels,
    clients,
  };
}
