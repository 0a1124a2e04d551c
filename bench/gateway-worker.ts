/**
 * One gateway instance of the HTTP scenario, in its own process (forked by http.ts):
 *   { type: 'start', spec }  → { type: 'listening', url }
 *   { type: 'counters' }     → { type: 'counters', counters }
 *   { type: 'stop' }         → closes the gateway, { type: 'stopped' }, exits
 */
import { startGatewayNode, type GatewayNode, type GatewaySpec } from './gateway-node.js';

let node: GatewayNode | undefined;

type Message = { type: 'start'; spec: GatewaySpec } | { type: 'counters' } | { type: 'stop' };

async function onMessage(message: Message): Promise<void> {
  if (message.type === 'start') {
    node = await startGatewayNode(message.spec);
    process.send!({ type: 'listening', url: node.url });
  } else if (message.type === 'counters') {
    process.send!({ type: 'counters', counters: node!.counters() });
  } else {
    await node?.close();
    process.send!({ type: 'stopped' }, () => process.exit(0));
  }
}

process.on('message', (message: Message) => {
  onMessage(message).catch((err: unknown) => {
    process.send!(
      { type: 'error', message: err instanceof Error ? (err.stack ?? err.message) : String(err) },
      () => process.exit(1),
    );
  });
});
process.on('disconnect', () => process.exit(0));
