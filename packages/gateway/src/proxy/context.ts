/** What the proxy's steps share: the gateway's parts they use, and what a request's result reports. */
import type { Admission } from 'slotgate';
import type { ChannelRegistry } from '../channels.js';
import type { GatewayConfig } from '../config-schema.js';
import type { UpstreamMetrics } from '../metrics/traffic.js';
import type { GatewaySettings } from '../settings.js';
import type { UpstreamClient } from '../upstream.js';

export interface ProxyContext {
  admission: Admission;
  /** Getters: a config reload swaps the registry and the config between two requests. */
  registry: () => ChannelRegistry;
  config: () => GatewayConfig;
  upstream: UpstreamClient;
  settings: () => GatewaySettings;
  metrics: UpstreamMetrics;
  onResult?: (result: ProxyResult) => void;
}

export interface ProxyResult {
  channel: string | undefined;
  status: number;
  attempts: number;
  waitedMs: number;
  /** 'upstream' when the status came from an upstream, 'gateway' when slotgate answered itself. */
  source: 'upstream' | 'gateway';
}
