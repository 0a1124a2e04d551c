/**
 * A pub/sub subscription on a Redis Cluster, on one node at a time. Classic pub/sub messages reach every node of a
 * cluster (the cluster bus forwards them), so any node will do. ioredis's own Cluster subscriber never reconnects its
 * connection and does not always notice that its node went away (its comments say so), which would leave an instance
 * deaf to its grants until the safety poll. This one reconnects to its node like any connection, moves to another
 * node of the cluster after a few failed attempts, subscribes again there, and emits 'close' and 'ready' like a
 * single node's subscriber, so the listeners' resync runs after every gap.
 */
import { EventEmitter } from 'node:events';
import { Redis } from 'ioredis';
import type { Cluster, RedisOptions } from 'ioredis';

/** Failed reconnects to one node before the subscription moves to another. */
const ATTEMPTS_PER_NODE = 3;

export class NodeSubscriber extends EventEmitter {
  private connection: Redis | undefined;
  private readonly channels = new Set<string>();
  private next = 0;
  private closed = false;

  constructor(
    private readonly cluster: Cluster,
    private readonly options: RedisOptions,
  ) {
    super();
    this.connect();
  }

  /** The addresses to try: the cluster's nodes as it knows them now, else its seed nodes. */
  private addresses(): { host: string; port: number }[] {
    const known = this.cluster.nodes().map((n) => ({ host: n.options.host!, port: n.options.port! }));
    if (known.length) return known;
    // before the client has connected: its seed nodes (not in its typings)
    const seeds = (
      this.cluster as unknown as { startupNodes: (string | number | { host?: string; port?: number })[] }
    ).startupNodes;
    return seeds.map((n) =>
      typeof n === 'object'
        ? { host: n.host ?? '127.0.0.1', port: n.port ?? 6379 }
        : { host: '127.0.0.1', port: Number(n) },
    );
  }

  private connect(): void {
    const addresses = this.addresses();
    const { host, port } = addresses[this.next++ % addresses.length]!;
    const connection = new Redis({
      ...this.options,
      host,
      port,
      retryStrategy: (times) => (times >= ATTEMPTS_PER_NODE ? null : Math.min(100 * 2 ** times, 1000)),
    });
    this.connection = connection;
    connection.on('error', (err: Error) => this.emit('error', err));
    connection.on('close', () => this.emit('close'));
    connection.on('ready', () => {
      if (this.channels.size) void connection.subscribe(...this.channels).catch(() => {});
      this.emit('ready');
    });
    connection.on('message', (channel: string, message: string) => this.emit('message', channel, message));
    // no more retries on this node: try the next one
    connection.on('end', () => {
      if (this.closed || this.connection !== connection) return;
      this.connect();
    });
  }

  /** Subscribes on the current node and on every node the subscription moves to. */
  async subscribe(...channels: string[]): Promise<void> {
    for (const c of channels) this.channels.add(c);
    await this.connection!.subscribe(...channels);
  }

  disconnect(): void {
    this.closed = true;
    this.connection?.disconnect();
  }
}
