/**
 * A small TCP proxy (node:net) in front of one server, for partition tests: `listen()` gives its port, `cut()` stops
 * forwarding in both directions while every socket stays open, `heal()` forwards again, `reset()` destroys every
 * connection with a RST, `close()` ends it all.
 *
 * A cut holds bytes rather than dropping them. That is what a partition does to a TCP connection that survives it:
 * the peers keep retransmitting, nothing is answered, and once the path is back the bytes arrive in order. (Dropping
 * bytes under a live connection would desynchronise a request/reply protocol such as RESP, which no real network
 * does to TCP.) While cut, the proxy stops reading, so the senders' writes back up in the kernel's buffers as they
 * would on a dead path. A connection made during a cut is accepted and then held like the others, as a SYN that the
 * peer's kernel answered would be.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

interface Direction {
  from: Socket;
  to: Socket;
  /** Chunks read while cut, written on heal. */
  held: Buffer[];
}

interface Pair {
  client: Socket;
  server: Socket;
  directions: [Direction, Direction];
}

export class TcpProxy {
  private server: Server | undefined;
  private readonly pairs = new Set<Pair>();
  private isCut = false;

  constructor(
    readonly targetPort: number,
    readonly targetHost = '127.0.0.1',
  ) {}

  /** Starts listening on 127.0.0.1 and a free port; resolves with the port. */
  async listen(): Promise<number> {
    const server = createServer((client) => this.accept(client));
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const address = server.address();
    if (typeof address !== 'object' || !address) throw new Error('the proxy has no address');
    return address.port;
  }

  /** Open connections (client side). */
  get connections(): number {
    return this.pairs.size;
  }

  get cutNow(): boolean {
    return this.isCut;
  }

  /** Stops forwarding both ways; the sockets stay open and what arrives is held. */
  cut(): void {
    this.isCut = true;
    for (const pair of this.pairs) for (const d of pair.directions) d.from.pause();
  }

  /** Forwards again, first what was held while cut, in order. */
  heal(): void {
    this.isCut = false;
    for (const pair of this.pairs) {
      for (const d of pair.directions) {
        for (const chunk of d.held.splice(0)) d.to.write(chunk);
        d.from.resume();
      }
    }
  }

  /** Destroys every connection with a RST (the peers see ECONNRESET); new connections are still accepted. */
  reset(): void {
    for (const pair of [...this.pairs]) {
      pair.client.resetAndDestroy();
      pair.server.resetAndDestroy();
      this.pairs.delete(pair);
    }
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const pair of [...this.pairs]) {
      pair.client.destroy();
      pair.server.destroy();
    }
    this.pairs.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    const server = connect(this.targetPort, this.targetHost);
    const pair: Pair = {
      client,
      server,
      directions: [
        { from: client, to: server, held: [] },
        { from: server, to: client, held: [] },
      ],
    };
    this.pairs.add(pair);
    const drop = () => {
      if (!this.pairs.delete(pair)) return;
      client.destroy();
      server.destroy();
    };
    for (const d of pair.directions) {
      d.from.on('data', (chunk: Buffer) => {
        if (this.isCut) {
          d.held.push(chunk);
          d.from.pause();
        } else {
          d.to.write(chunk);
        }
      });
      // A FIN is only read while forwarding (reading stops on a cut), so it is passed on in order.
      d.from.on('end', () => d.to.end());
      d.from.on('error', drop);
      d.from.on('close', drop);
    }
    if (this.isCut) for (const d of pair.directions) d.from.pause();
  }
}
