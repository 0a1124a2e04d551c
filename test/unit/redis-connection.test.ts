/** The store's connection descriptions: addresses, and exactly one way to reach Redis. No server is contacted. */
import { describe, expect, it } from 'vitest';
import { parseAddress } from '../../packages/slotgate/src/store/redis/connection/connection.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';

describe('parseAddress', () => {
  it('reads host:port, bracketed IPv6 and objects', () => {
    expect(parseAddress('10.0.0.1:7000')).toEqual({ host: '10.0.0.1', port: 7000 });
    expect(parseAddress(' redis-a.internal:6379 ')).toEqual({ host: 'redis-a.internal', port: 6379 });
    expect(parseAddress('[::1]:7001')).toEqual({ host: '::1', port: 7001 });
    expect(parseAddress({ host: 'h', port: 1 })).toEqual({ host: 'h', port: 1 });
  });

  it.each(['localhost', 'localhost:', ':6379', 'h:0', 'h:65536', 'h:63x', 'redis://h:6379'])(
    'rejects %j with a TypeError naming it',
    (address) => {
      expect(() => parseAddress(address)).toThrow(
        new TypeError(`Expected an address as host:port, got ${JSON.stringify(address)}`),
      );
    },
  );
});

describe('RedisStore connection options', () => {
  it('needs one of url, cluster, sentinel or client', () => {
    expect(() => new RedisStore({})).toThrow(/needs one of `url`, `cluster`, `sentinel` or `client`/);
  });

  it('takes only one of url, cluster and sentinel', () => {
    expect(() => new RedisStore({ url: 'redis://127.0.0.1:1', cluster: { nodes: ['127.0.0.1:2'] } })).toThrow(
      /takes one of `url`, `cluster` and `sentinel`, got url and cluster/,
    );
    expect(
      () =>
        new RedisStore({
          cluster: { nodes: ['127.0.0.1:2'] },
          sentinel: { sentinels: ['127.0.0.1:3'], name: 'm' },
        }),
    ).toThrow(/got cluster and sentinel/);
  });

  it('rejects a bad cluster node before connecting to anything', () => {
    expect(() => new RedisStore({ cluster: { nodes: ['no-port'] } })).toThrow(
      'Expected an address as host:port, got "no-port"',
    );
  });

  it('rejects an empty or missing node list and a Sentinel set without a name, naming the option', () => {
    expect(() => new RedisStore({ cluster: { nodes: [] } })).toThrow(
      'Expected `cluster.nodes` to be a non-empty list of seed nodes (host:port)',
    );
    expect(() => new RedisStore({ cluster: ['127.0.0.1:1'] as unknown as { nodes: string[] } })).toThrow(
      'Expected `cluster.nodes`',
    );
    expect(() => new RedisStore({ sentinel: { sentinels: [], name: 'm' } })).toThrow(
      'Expected `sentinel.sentinels` to be a non-empty list',
    );
    expect(
      () =>
        new RedisStore({
          sentinel: { sentinels: ['127.0.0.1:1'] } as unknown as { sentinels: string[]; name: string },
        }),
    ).toThrow('Expected `sentinel.name`');
  });
});
