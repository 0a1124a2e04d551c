/**
 * `slotgate doctor --config` against the test Redis prints each adaptive channel of the config with its stored limit:
 * the limit in force it makes, the value stored, "no limit stored" without a key, and why the max applies instead
 * when the channel only observes (`enforce: false`) or a settings override switched adaptive limits off. A channel
 * without `adaptive:` has no line, nor does a run without a config.
 */
import { describe, expect, it } from 'vitest';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { prefixCleanedAfter, redisUrl } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';
import { runCli } from '../helpers/gw-gateway.js';

const cleanups = useCleanups();

const prefixForTest = (name: string) => prefixCleanedAfter(name, cleanups);

const redisSection = (prefix: string) => `redis: { url: "${redisUrl()}", prefix: "${prefix}" }`;

const CHANNELS = [
  '  - { id: ad, type: openai, key: env:UNSET_KEY, models: [a], max_concurrency: 4, adaptive: {} }',
  '  - { id: big, type: openai, key: env:UNSET_KEY, models: [b], max_concurrency: 32, adaptive: { min_concurrency: 1 } }',
  '  - { id: obs, type: openai, key: env:UNSET_KEY, models: [o], max_concurrency: 8, adaptive: { min_concurrency: 2, enforce: false } }',
  '  - { id: fresh, type: openai, key: env:UNSET_KEY, models: [f], max_concurrency: 5, adaptive: {} }',
  '  - { id: off, type: openai, key: env:UNSET_KEY, models: [x], max_concurrency: 6, adaptive: { enabled: false } }',
  '  - { id: plain, type: openai, key: env:UNSET_KEY, models: [p], max_concurrency: 3 }',
];

describe('slotgate doctor: adaptive limits', () => {
  // five runs of the command line, each a process of its own
  it(
    'prints each adaptive channel’s stored limit from --config; a plain channel has no line',
    { timeout: 60_000 },
    async () => {
      const prefix = prefixForTest('doctor-adaptive');
      const keys = new KeyBuilder(prefix);
      // `ad`: an upstream refused the 4th slot in flight; the store lowered the shared limit to 3
      const store = new RedisStore({ url: redisUrl(), prefix });
      cleanups.push(() => store.close());
      const opts = (token: string) => ({ token, leaseTtlMs: 60_000, checkCooldown: true });
      for (const token of ['a:1', 'a:2', 'a:3', 'a:4'])
        expect(await store.acquireFirst([{ channelId: 'ad', max: 4, floor: 1 }], opts(token))).toEqual([
          'acquired',
        ]);
      const law = { floor: 1, ceiling: 4, probeAfter: 30, tolerance: 2 };
      const over = { signal: { kind: 'overloaded' as const }, law, heldMs: 10 };
      await store.release({ channelId: 'ad', token: 'a:1' }, 60_000, { floor: 1, report: over }).done;
      // `big` and `obs`: limits as a fleet left them (an hour's expiry, as the store gives them)
      const redis = new Redis(redisUrl());
      cleanups.push(() => void redis.disconnect());
      await redis.hset(keys.limit('big'), 'l', '7.25');
      await redis.hset(keys.limit('obs'), 'l', '2.5');
      for (const id of ['big', 'obs']) await redis.pexpire(keys.limit(id), 3_600_000);

      const dir = await mkdtemp(join(tmpdir(), 'slotgate-doctor-'));
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
      const config = join(dir, 'slotgate.yaml');
      await writeFile(config, [redisSection(prefix), 'channels:', ...CHANNELS].join('\n'));
      const run = await runCli(['doctor', '--config', config]);
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout.split('\n').filter((l) => l.includes('ADAPTIVE'))).toEqual([
        '  ADAPTIVE channel "ad" limit 3 (min 1, max 4, stored 3.000)',
        '  ADAPTIVE channel "big" limit 7 (min 1, max 32, stored 7.250)',
        '  ADAPTIVE channel "obs" limit 2 learned, not applied (enforce false): the max applies (min 2, max 8, stored 2.500)',
        '  ADAPTIVE channel "fresh" no limit stored: the max applies (min 1, max 5)',
      ]);
      const json = await runCli(['doctor', '--config', config, '--json']);
      expect(JSON.parse(json.stdout).adaptive.limits[1]).toEqual({
        channelId: 'big',
        min: 1,
        max: 32,
        stored: 7.25,
        limit: 7,
      });
      // without a config the doctor knows no channel: no line
      const bare = await runCli(['doctor', '--redis', redisUrl(), '--prefix', prefix]);
      expect(bare.code, bare.stderr).toBe(0);
      expect(bare.stdout).not.toContain('ADAPTIVE');

      // the fleet's switch, turned off by a settings override: every max applies, whatever is stored
      await redis.hset(keys.settings(), 'adaptive_enabled', 'false');
      const off = await runCli(['doctor', '--config', config]);
      expect(off.code, off.stderr).toBe(0);
      const lines = off.stdout.split('\n').filter((l) => l.includes('ADAPTIVE'));
      expect(lines[0]).toBe(
        "  ADAPTIVE switched off (adaptive_enabled false, a settings override): each channel's max applies",
      );
      expect(lines[1]).toBe(
        '  ADAPTIVE channel "ad" limit 3 learned, not applied (adaptive limits switched off): the max applies (min 1, max 4, stored 3.000)',
      );

      // or by the config file, when no override says otherwise
      await redis.hdel(keys.settings(), 'adaptive_enabled');
      const settings = 'settings: { adaptive_enabled: false }';
      await writeFile(config, [redisSection(prefix), settings, 'channels:', ...CHANNELS].join('\n'));
      const fromFile = await runCli(['doctor', '--config', config]);
      expect(fromFile.code, fromFile.stderr).toBe(0);
      expect(fromFile.stdout).toContain(
        "  ADAPTIVE switched off (adaptive_enabled false, the config file): each channel's max applies",
      );
    },
  );
});
