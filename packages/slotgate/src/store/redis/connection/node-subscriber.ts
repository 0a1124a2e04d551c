/**
 * A pub/sub subscription on a Redis Cluster, on any one node (the cluster bus forwards messages to all). ioredis's
 * own does not always notice its node went away, leaving an instance deaf to its grants; this one moves to another
 * node after a few failed reconnects and emits 'close' and 'ready', so listeners resync after every gap.
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

  /** The cluster's nodes as it knows them, else (before it connected) its seed nodes. */
  private addresses(): { host: string; port: number }[] {
    const known = this.cluster.nodes().map((n) => ({ host: n.options.host!, port: n.options.port! }));
    if (known.length) return known;
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
    connection.on('end', () => {
      if (this.closed || this.connection !== connection) return;
      this.connect();
    });
  }

  async subscribe(...channels: string[]): Promise<void> {
    for (const c of channels) this.channels.add(c);
    await this.connection!.subscribe(...channels);
  }

  disconnect(): void {
    this.closed = true;
    this.connection?.disconnect();
  }
}
