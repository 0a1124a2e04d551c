/**
 * Shared pieces of the benchmarks: a Redis to measure (private redis-server, or REDIS_URL), server-side deltas from
 * INFO (commandstats and CPU), percentiles, and markdown tables.
 */
import { Redis } from 'ioredis';
import { RedisServer, parseCommandstats } from '../test/helpers/redis-server.js';

export interface RedisUnderTest {
  url: string;
  /** "private redis-server 7.0.15" or "REDIS_URL" */
  label: string;
  snapshot(): Promise<ServerSnapshot>;
  close(): Promise<void>;
}

export interface ServerSnapshot {
  commands: Record<string, number>;
  cpuSeconds: number;
}

export async function redisUnderTest(): Promise<RedisUnderTest> {
  let server: RedisServer | undefined;
  let url = process.env.REDIS_URL;
  if (!url) {
    server = await RedisServer.start();
    url = server.url;
  }
  const admin = new Redis(url);
  const version = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? '?';
  return {
    url,
    label: server ? `private redis-server ${version}` : `REDIS_URL (redis ${version})`,
    async snapshot() {
      const [stats, cpu] = await Promise.all([admin.info('commandstats'), admin.info('cpu')]);
      const user = Number(/used_cpu_user:([\d.]+)/.exec(cpu)?.[1] ?? 0);
      const sys = Number(/used_cpu_sys:([\d.]+)/.exec(cpu)?.[1] ?? 0);
      return { commands: parseCommandstats(stats), cpuSeconds: user + sys };
    },
    async close() {
      admin.disconnect();
      await server?.stop();
    },
  };
}

/** Server-side commands between two snapshots, without the INFO calls the measurement itself made. */
export function commandDelta(before: ServerSnapshot, after: ServerSnapshot): Record<string, number> {
  const delta: Record<string, number> = {};
  for (const [name, calls] of Object.entries(after.commands)) {
    const d = calls - (before.commands[name] ?? 0);
    if (d > 0 && name !== 'info') delta[name] = d;
  }
  return delta;
}

export const sum = (values: Iterable<number>): number => {
  let s = 0;
  for (const v of values) s += v;
  return s;
};

export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

export function table(headers: readonly string[], rows: readonly (readonly (string | number)[])[]): string {
  const line = (cells: readonly (string | number)[]) => `| ${cells.join(' | ')} |`;
  return [line(headers), line(headers.map(() => '---')), ...rows.map(line)].join('\n');
}

export const fmt = (n: number, digits = 1): string =>
  Number.isFinite(n)
    ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 })
    : '–';

export function parseFlags(argv: readonly string[]): Record<string, string> {
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) continue;
    const [key, inline] = arg.slice(2).split('=', 2);
    if (inline !== undefined) flags[key!] = inline;
    else if (argv[i + 1] && !argv[i + 1]!.startsWith('--')) flags[key!] = argv[++i]!;
    else flags[key!] = 'true';
  }
  return flags;
}
