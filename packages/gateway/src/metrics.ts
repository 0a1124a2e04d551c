/**
 * The gateway's Prometheus registry, composed of one part per metric family (metrics/*.ts). Parts that count as
 * requests go are built first (the engine reports admission latency to one); the parts read at scrape time follow.
 * docs/operations.md lists every metric.
 */
import { Counter, Registry, collectDefaultMetrics } from 'prom-client';
import type { Admission, NodeHealth } from 'slotgate';
import type { ChannelRegistry } from './channels.js';
import { AdmissionLatency, registerAdmissionCounters } from './metrics/admission.js';
import { registerLoadGauges } from './metrics/load.js';
import { scrapedGauge } from './metrics/scrape.js';
import { registerStoreMetrics } from './metrics/store.js';
import { TrafficMetrics } from './metrics/traffic.js';

export interface MetricsSources {
  admission: () => Admission;
  channels: () => ChannelRegistry;
  storeUp: () => Promise<boolean>;
  storeKind: string;
  /** A Redis store's nodes (every Cluster master, or the one node), each PINGed; undefined for another store. */
  storeNodes?: () => Promise<NodeHealth[]>;
  configVersion: () => number;
}

export class GatewayMetrics {
  readonly register = new Registry();
  readonly traffic = new TrafficMetrics();
  readonly configReloadErrors = new Counter({
    name: 'slotgate_config_reload_errors_total',
    help: 'Config file reloads rejected (the previous configuration stayed in force)',
    registers: [this.register],
  });

  constructor(sources: MetricsSources, latency = new AdmissionLatency()) {
    const register = this.register;
    // The standard process_* and nodejs_* names, unprefixed, so stock dashboards and alerts work unchanged.
    collectDefaultMetrics({ register });
    latency.register(register);
    this.traffic.register(register);
    const stats = () => sources.admission().stats();
    registerAdmissionCounters(register, stats);
    registerStoreMetrics(register, { stats, ...sources });
    registerLoadGauges(register, sources);
    scrapedGauge(register, {
      name: 'slotgate_config_version',
      help: 'Configuration version in force (increments on every accepted reload)',
      read: () => [[{}, sources.configVersion()]],
    });
  }

  async text(): Promise<string> {
    return this.register.metrics();
  }
}
