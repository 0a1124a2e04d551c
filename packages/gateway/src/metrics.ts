/**
 * The gateway's Prometheus registry, one part per metric family (metrics/*.ts); the admission latency part is built
 * before the engine, which reports to it. docs/operations.md lists every metric.
 */
import { Counter, Registry, collectDefaultMetrics } from 'prom-client';
import { AdmissionLatency, registerAdmissionCounters } from './metrics/admission.js';
import { registerLoadGauges, type LoadSources } from './metrics/load.js';
import { scrapedGauge } from './metrics/scrape.js';
import { registerStoreMetrics, type StoreSources } from './metrics/store.js';
import { TrafficMetrics } from './metrics/traffic.js';

export interface MetricsSources extends LoadSources, Omit<StoreSources, 'stats'> {
  configVersion: () => number;
}

export class GatewayMetrics {
  readonly register: Registry;
  readonly traffic = new TrafficMetrics();
  readonly configReloadErrors: Counter;

  constructor(sources: MetricsSources, latency = new AdmissionLatency()) {
    const register = (this.register = Registry.merge([latency.registry, this.traffic.registry]));
    // The standard process_* and nodejs_* names, unprefixed, so stock dashboards and alerts work unchanged.
    collectDefaultMetrics({ register });
    this.configReloadErrors = new Counter({
      name: 'slotgate_config_reload_errors_total',
      help: 'Config file reloads rejected (the previous configuration stayed in force)',
      registers: [register],
    });
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
}
