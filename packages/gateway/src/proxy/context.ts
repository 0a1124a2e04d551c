/** The gateway's parts that request handlers use, and what a client API request's result reports. */
import type { Admission } from 'slotgate';
import type { ChannelRegistry } from '../channels.js';
import type { GatewayConfig } from '../config-schema.js';
import type { Drain } from '../drain.js';
import type { UpstreamMetrics } from '../metrics/traffic.js';
import type { GatewaySettings } from '../settings.js';
import type { UpstreamClient } from '../upstream.js';

export interface HandlerContext {
  admission: Admission;
  /** Getters: a config reload swaps the registry and the config between two requests. */
  registry: () => ChannelRegistry;
  config: () => GatewayConfig;
  settings: () => GatewaySettings;
}

export interface ProxyContext extends HandlerContext {
  upstream: UpstreamClient;
  /** Ends the waits for a slot when a shutdown's drain delay is over. */
  drain: Drain;
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
