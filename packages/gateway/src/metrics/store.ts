/** The admission store as this instance sees it: the commands it issued by purpose, the load view, store health. */
import type { Registry } from 'prom-client';
import { PURPOSES, type AdmissionStats, type NodeHealth } from 'slotgate';
import { scrapedCounter, scrapedGauge } from './scrape.js';
import { sharedRead } from '../shared-read.js';

export interface StoreSources {
  stats: () => AdmissionStats;
  storeKind: string;
  storeUp: () => Promise<boolean>;
  /** A Redis store's nodes (every Cluster master, or the one node), each PINGed; undefined for another store. */
  storeNodes?: () => Promise<NodeHealth[]>;
}

export function registerStoreMetrics(register: Registry, sources: StoreSources): void {
  const { stats } = sources;
  scrapedCounter(register, {
    name: 'slotgate_redis_commands_total',
    help: 'Store commands issued by this instance, by purpose (a script call counts as one)',
    labelNames: ['purpose'],
    read: () => {
      const c = stats().commands;
      return PURPOSES.map((p) => [{ purpose: p }, c[p]]);
    },
  });
  scrapedCounter(register, {
    name: 'slotgate_load_view_events_total',
    help: 'Load view: cache hits, misses, coalesced joins, fresh reads, fallbacks, fetches, direct reads, summary reports',
    labelNames: ['event'],
    read: () => Object.entries(stats().loadView).map(([k, v]) => [{ event: k }, v]),
  });
  scrapedGauge(register, {
    name: 'slotgate_store_up',
    help: 'Whether the admission store answers (1) or not (0)',
    labelNames: ['store'],
    read: async () => [[{ store: sources.storeKind }, (await sources.storeUp()) ? 1 : 0]],
  });
  if (sources.storeNodes) registerNodeGauges(register, sources.storeNodes);
}

/** One PING round per scrape, shared by both gauges; the masters only, so the label set stays small. */
function registerNodeGauges(register: Registry, readNodes: () => Promise<NodeHealth[]>): void {
  const nodes = sharedRead(() => readNodes().catch((): NodeHealth[] => []));
  scrapedGauge(register, {
    name: 'slotgate_redis_node_up',
    help: 'Whether each Redis node the store writes to (every Cluster master, or the one node) answers PING (1) or not (0)',
    labelNames: ['node', 'role'],
    read: async () => (await nodes()).map((n) => [{ node: n.address, role: n.role }, n.healthy ? 1 : 0]),
  });
  scrapedGauge(register, {
    name: 'slotgate_redis_node_latency_seconds',
    help: 'PING round trip to each Redis node the store writes to (nodes that answered)',
    labelNames: ['node'],
    read: async () =>
      (await nodes()).flatMap((n) =>
        n.latencyMs === undefined ? [] : [[{ node: n.address }, n.latencyMs / 1000]],
      ),
  });
}
