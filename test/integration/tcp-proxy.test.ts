/**
 * The partition proxy of the chaos tests, against a line echo server: it forwards, a cut holds the bytes of an open
 * connection both ways (no reply, no error, the socket stays open) and a heal delivers them in order, and a reset
 * ends every connection with ECONNRESET.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();

async function echoServer(): Promise<number> {
  const server: Server = createServer((socket) => {
    socket.on('error', () => {}); // the reset test's RST
    socket.pipe(socket);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const address = server.address();
  return typeof address === 'object' && address ? address.port : 0;
}

async function proxyTo(port: number): Promise<{ proxy: TcpProxy; port: number }> {
  const proxy = new TcpProxy(port);
  cleanups.push(() => proxy.close());
  return { proxy, port: await proxy.listen() };
}

/** A client whose received text can be read at any time. */
async function client(port: number): Promise<{ socket: Socket; received: () => string }> {
  const socket = connect(port, '127.0.0.1');
  socket.setEncoding('utf8');
  let text = '';
  socket.on('data', (d: string) => (text += d));
  socket.on('error', () => {});
  await once(socket, 'connect');
  cleanups.push(() => socket.destroy());
  return { socket, received: () => text };
}

async function until(check: () => boolean, ms = 2000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await sleep(5);
  }
  return true;
}

/**
 * Resolves once a byte written now to a fresh connection through a second proxy in front of the same echo server has
 * come back: the same hops, on this same event loop, as the bytes written before it through `proxy`, so by then those
 * would have come back too had the proxy forwarded them (an order of events, not a time window).
 */
async function echoedBehind(echoPort: number): Promise<void> {
  const probe = await client((await proxyTo(echoPort)).port);
  probe.socket.write('?');
  expect(await until(() => probe.received() === '?')).toBe(true);
}

describe('TcpProxy', () => {
  it('forwards; a cut holds the bytes of a live connection, a heal delivers them in order', async () => {
    const echo = await echoServer();
    const { proxy, port } = await proxyTo(echo);
    const c = await client(port);
    c.socket.write('a');
    expect(await until(() => c.received() === 'a')).toBe(true);

    proxy.cut();
    c.socket.write('b');
    c.socket.write('c');
    await echoedBehind(echo);
    expect(c.received()).toBe('a');
    expect(c.socket.destroyed).toBe(false);
    // a connection opened during the cut is accepted and held too
    const late = await client(port);
    late.socket.write('x');
    expect(await until(() => proxy.connections === 2)).toBe(true);
    await echoedBehind(echo);
    expect(late.received()).toBe('');
    expect(proxy.connections).toBe(2);

    proxy.heal();
    expect(await until(() => c.received() === 'abc' && late.received() === 'x')).toBe(true);
    c.socket.write('d');
    expect(await until(() => c.received() === 'abcd')).toBe(true);
  });

  it('reset ends every connection with ECONNRESET and still accepts new ones', async () => {
    const { proxy, port } = await proxyTo(await echoServer());
    const c = await client(port);
    const error = new Promise<NodeJS.ErrnoException>((resolve) => c.socket.once('error', resolve));
    c.socket.write('a');
    expect(await until(() => c.received() === 'a')).toBe(true);
    proxy.reset();
    expect((await error).code).toBe('ECONNRESET');
    const next = await client(port);
    next.socket.write('n');
    expect(await until(() => next.received() === 'n')).toBe(true);
  });
});
