/**
 * One gateway instance for the HTTP scenario: the real gateway (createGateway) on a RedisStore whose client is
 * counted, `openai` channels pointing at the benchmark's upstream. Each instance runs in its own child process
 * (gateway-worker.ts).
 */
import { RedisStore, type AdmissionStats } from 'slotgate';
import { createGateway, parseConfig } from 'slotgate-gateway';
import { RoundTripCounter } from './redis.js';

export interface GatewaySpec {
  redisUrl: string;
  namespace: string;
  upstreamUrl: string;
  channels: number;
  max: number;
  cache: boolean;
}

export interface GatewayCounters {
  stats: AdmissionStats;
  requests: number;
  writes: number;
  /** process.cpuUsage() of the gateway's process, µs */
  cpuUs: number;
}

export interface GatewayNode {
  url: string;
  counters(): GatewayCounters;
  close(): Promise<void>;
}

/** The upstream identifies the channel by its key: `Bearer key-<channel id>`. */
export const channelKey = (id: string) => `key-${id}`;

export async function startGatewayNode(spec: GatewaySpec): Promise<GatewayNode> {
  const config = parseConfig(
    {
      server: { host: '127.0.0.1', port: 0, log_level: 'silent', shutdown_timeout_ms: 2000 },
      redis: { url: spec.redisUrl, prefix: spec.namespace },
      channels: Array.from({ length: spec.channels }, (_, i) => ({
        id: `c${i}`,
        type: 'openai',
        base_url: spec.upstreamUrl,
        key: channelKey(`c${i}`),
        models: ['bench'],
        max_concurrency: spec.max,
      })),
      settings: { load_cache_enabled: spec.cache },
    },
    '<bench>',
  );
  const counter = new RoundTripCounter();
  const client = counter.client(spec.redisUrl);
  const store = new RedisStore({ client, prefix: spec.namespace, timeoutMs: config.redis!.timeout_ms });
  const gateway = await createGateway({ config, store, logger: false });
  const url = await gateway.listen();
  return {
    url,
    counters: () => {
      const cpu = process.cpuUsage();
      return { stats: gateway.admission.stats(), ...counter.snapshot(), cpuUs: cpu.user + cpu.system };
    },
    async close() {
      await gateway.close();
      await store.close();
      await client.quit().catch(() => client.disconnect());
    },
  };
}
