/**
 * RedisStore's turn on Redis Cluster (topology.ts): releases are held to the end of the event-loop turn as on one
 * node, so one withdrawn in the same turn (a slot handed to another request of the instance) costs no command, and the
 * turn's acquires of one channel share one acquireSlots call. Measured on a private 3-master cluster only this file
 * uses (INFO commandstats of every master, Lua-internal commands included), and on the store's node connections.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Cluster, Redis } from 'ioredis';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import { uniquePrefix } from '../helpers/redis.js';

const HOUSEKEEPING = new Set([
  'info',
  'client',
  'ping',
  'hello',
  'select',
  'command',
  'config',
  'quit',
  'cluster',
]);
const opts = (token: string) => ({ token, leaseTtlMs: 60_000, checkCooldown: true });

let cluster: RedisCluster;
let store: RedisStore;
/** Command names the store's node connections sent, lower case. */
const sent: string[] = [];

beforeAll(async () => {
  cluster = await RedisCluster.start();
  store = new RedisStore({ cluster: { nodes: cluster.addresses }, prefix: uniquePrefix('turn') });
  const client = (store as unknown as { client: Cluster }).client;
  const watch = (node: Redis) => {
    const send = node.sendCommand.bind(node);
    node.sendCommand = ((command: { name: string }, ...rest: unknown[]) => {
      sent.push(command.name.toLowerCase());
      return (send as (...a: unknown[]) => unknown)(command, ...rest);
    }) as typeof node.sendCommand;
  };
  client.on('+node', watch);
  client.nodes().forEach(watch);
  // the first call of a script on a node is an EVAL with its body: warm the channels up on every node used below
  for (const id of ['a', 'b', 'wd']) {
    await store.acquireFirst([{ channelId: id, max: 4 }], opts(`${id}:warm`));
    expect(await store.release({ channelId: id, token: `${id}:warm` }, 60_000).done).toBe(true);
  }
}, 60_000);

afterAll(async () => {
  await store?.close();
  await cluster?.stop();
});

async function measure(op: () => Promise<unknown>) {
  const before = (await cluster.commandstats()).total;
  sent.length = 0;
  await op();
  const client = [...sent].filter((n) => !HOUSEKEEPING.has(n));
  const after = (await cluster.commandstats()).total;
  const server: Record<string, number> = {};
  for (const [name, calls] of Object.entries(after)) {
    const d = calls - (before[name] ?? 0);
    if (d > 0 && !HOUSEKEEPING.has(name)) server[name] = d;
  }
  return { client, server };
}

describe('RedisStore turn on Redis Cluster', () => {
  it('the acquires of one channel in a turn share one acquireSlots call; another channel gets its own', async () => {
    const m = await measure(async () => {
      const replies = await Promise.all([
        ...Array.from({ length: 5 }, (_, i) =>
          store.acquireFirst([{ channelId: 'a', max: 4 }], opts(`a:${i}`)),
        ),
        ...Array.from({ length: 3 }, (_, i) =>
          store.acquireFirst([{ channelId: 'b', max: 4 }], opts(`b:${i}`)),
        ),
      ]);
      expect(replies.map((r) => r[0])).toEqual([
        ...Array.from({ length: 4 }, () => 'acquired'),
        'full',
        ...Array.from({ length: 3 }, () => 'acquired'),
      ]);
    });
    expect(m.client).toEqual(['evalsha', 'evalsha']);
    expect(m.server).toMatchObject({ evalsha: 2, time: 2, zadd: 7 });
  });

  it('a release taken back in the same turn is never sent; one not taken back goes out at the end of the turn', async () => {
    await store.acquireFirst([{ channelId: 'wd', max: 2 }], opts('wd:1'));
    await store.acquireFirst([{ channelId: 'wd', max: 2 }], opts('wd:2'));
    const m = await measure(async () => {
      const first = store.release({ channelId: 'wd', token: 'wd:1' }, 60_000);
      const second = store.release({ channelId: 'wd', token: 'wd:2' }, 60_000);
      expect([first.withdrawable, second.withdrawable]).toEqual([true, true]);
      expect(first.withdraw()).toBe(true);
      expect(first.withdraw()).toBe(false); // at most once per token and turn
      expect(await first.done).toBe(true);
      expect(await second.done).toBe(true);
      expect(second.withdraw()).toBe(false); // on its way: too late
    });
    expect(m.client).toEqual(['evalsha']);
    expect(m.server).toMatchObject({ evalsha: 1, zrem: 1 });
    expect((await store.readLoads(['wd'])).get('wd')!.active).toBe(1); // wd:1 still holds its slot
  });
});
