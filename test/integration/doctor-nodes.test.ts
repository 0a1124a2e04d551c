/**
 * Where `slotgate doctor` looks: on a Redis Cluster, every master (leftovers planted on each of the three are all
 * found from one seed node, by the library and by `--cluster`, `--config` with `redis.cluster`, and `--fix`), and when
 * nothing is under the prefix, a hint naming the prefixes it saw instead. Bad addresses exit 2 without a stack trace.
 */
import { describe, expect, it } from 'vitest';
import { Redis, type Cluster } from 'ioredis';
import { checkLeftovers } from '../../packages/slotgate/src/store/redis/doctor/check.js';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { useCleanups } from '../helpers/cleanups.js';
import { runCli, tempDir, writeConfig } from '../helpers/gw-gateway.js';
import { clearCluster, clusterClient, clusterNodes, uniquePrefix } from '../helpers/redis.js';
import { RedisServer } from '../helpers/redis-server.js';

const cleanups = useCleanups();
/** A test that runs the CLI several times (each a tsx start of a second or more on a busy machine). */
const SEVERAL_RUNS = { timeout: 60_000 };

/** `slotgate doctor` with an environment that names no Redis of its own. */
const doctor = (...args: string[]) => runCli(['doctor', ...args]);

/** The master (host:port) that owns `key`'s slot. */
async function ownerOf(client: Cluster, key: string): Promise<string> {
  const slot = (await client.cluster('KEYSLOT', key)) as number;
  const ranges = (await client.cluster('SLOTS')) as unknown as [number, number, [string, number]][];
  const range = ranges.find(([from, to]) => slot >= from && slot <= to)!;
  return `${range[2][0]}:${range[2][1]}`;
}

/** One channel per master, each with an expired lease left behind; returns the slots keys by owner. */
async function plantOnEveryMaster(client: Cluster, prefix: string): Promise<Map<string, string>> {
  const k = new KeyBuilder(prefix);
  const byOwner = new Map<string, string>();
  for (let i = 0; byOwner.size < 3 && i < 1000; i++) {
    const key = k.slots(`ch-${i}`);
    const owner = await ownerOf(client, key);
    if (!byOwner.has(owner)) byOwner.set(owner, key);
  }
  const [sec] = await client.time();
  for (const key of byOwner.values()) {
    await client.zadd(key, Number(sec) * 1000 - 1000, 'dead:1');
    await client.pexpire(key, 60_000);
  }
  return byOwner;
}

function clusterPrefix(name: string): string {
  const prefix = uniquePrefix(name);
  cleanups.push(() => clearCluster(`${prefix}:*`));
  return prefix;
}

describe('slotgate doctor on a Redis Cluster', () => {
  it(
    'finds the leftovers on every master from one seed node, and --fix removes them',
    SEVERAL_RUNS,
    async () => {
      const nodes = clusterNodes();
      const planter = clusterClient();
      cleanups.push(() => void planter.disconnect());
      const prefix = clusterPrefix('doctor-cluster');
      const planted = await plantOnEveryMaster(planter, prefix);
      expect(planted.size).toBe(3);
      // the seed node owns one of them: the other two are only found by scanning beyond it
      expect([...planted.keys()]).toContain(nodes[0]);
      const keys = [...planted.values()].sort();

      // the library, given a Cluster client that has not connected yet
      const fresh = clusterClient();
      cleanups.push(() => void fresh.disconnect());
      const report = await checkLeftovers(fresh, prefix);
      expect(report.nodes).toBe(3);
      expect(report.findings.map((f) => f.key).sort()).toEqual(keys);

      const found = await doctor('--cluster', nodes[0]!, '--prefix', prefix);
      expect(found.code, found.stderr).toBe(1);
      expect(found.stdout).toContain(`prefix "${prefix}", 3 key(s) scanned on 3 nodes`);
      for (const key of keys) expect(found.stdout).toMatch(new RegExp(`LEFTOVER expired_members +${key}`));

      const fixed = await doctor('--cluster', nodes.join(','), '--prefix', prefix, '--fix');
      expect(fixed.code, fixed.stderr).toBe(0);
      expect(fixed.stdout).toContain('fixed: 3 removal(s) for 3 finding(s)');
      expect(await Promise.all(keys.map((key) => planter.exists(key)))).toEqual([0, 0, 0]);
    },
  );

  it('--config takes the cluster and the prefix from a gateway config file, and only its redis section', async () => {
    const planter = clusterClient();
    cleanups.push(() => void planter.disconnect());
    const prefix = clusterPrefix('doctor-config');
    const planted = await plantOnEveryMaster(planter, prefix);
    const dir = await tempDir();
    cleanups.push(() => dir.remove());
    const path = await writeConfig(dir.dir, 'gw.yaml', {
      redis: { cluster: { nodes: [clusterNodes()[1]] }, prefix },
      // a channel key from a variable this host does not have: the doctor does not need it
      channels: [
        { id: 'a', type: 'openai', base_url: 'https://x.invalid', key: 'env:NOT_SET_HERE', models: ['*'] },
      ],
    });
    const found = await doctor('--config', path);
    expect(found.code, found.stderr).toBe(1);
    expect(found.stdout).toContain(`prefix "${prefix}", 3 key(s) scanned on 3 nodes`);
    for (const key of planted.values()) expect(found.stdout).toContain(key);
  });

  it(
    'bad addresses, a conflict and an unreachable cluster exit 2 with one clear line',
    SEVERAL_RUNS,
    async () => {
      const cases: [string[], RegExp][] = [
        [['--cluster', '127.0.0.1'], /--cluster: expected host:port .*got "127\.0\.0\.1"/],
        [['--sentinel', 's:26379'], /--sentinel needs the primary's name: --master NAME/],
        [
          ['--redis', 'redis://127.0.0.1:9', '--cluster', 'a:1'],
          /give one of --redis, --cluster, --sentinel/,
        ],
        [['--cluster', '127.0.0.1:9'], /slotgate doctor: /],
        [[], /give --redis URL, --cluster host:port/],
      ];
      for (const [args, message] of cases) {
        const run = await doctor(...args);
        expect(run.code, args.join(' ')).toBe(2);
        expect(run.stderr).toMatch(message);
        expect(run.stderr, 'no stack trace').not.toMatch(/\n\s+at /);
      }
    },
  );
});

describe('slotgate doctor with nothing under its prefix', () => {
  it('names the prefixes it saw instead, or says it saw none', SEVERAL_RUNS, async () => {
    const server = await RedisServer.start();
    cleanups.push(() => server.stop());
    const empty = await doctor('--redis', server.url);
    expect(empty.code, empty.stderr).toBe(0);
    expect(empty.stdout).toContain('prefix "slotgate", 0 key(s) scanned on 1 node');
    expect(empty.stdout).toContain('nor a key of another slotgate prefix among those seen');

    const redis = new Redis(server.url);
    cleanups.push(() => void redis.disconnect());
    await redis.set('other-app:v1:{a}:cooldown', '1');
    await redis.set('team-b:v1:epoch', '1');
    await redis.set('unrelated', '1');
    const hinted = await doctor('--redis', server.url);
    expect(hinted.code).toBe(0);
    expect(hinted.stdout).toContain(
      'hint: no key under this prefix; keys were seen under "other-app", "team-b" (check with --prefix)',
    );
    const json = await doctor('--redis', server.url, '--prefix', 'x', '--json');
    expect(JSON.parse(json.stdout)).toMatchObject({
      nodes: 1,
      scanned: 0,
      prefixesSeen: ['other-app', 'team-b'],
    });
  });
});
