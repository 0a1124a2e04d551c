/**
 * An instance's grants channel: `c\n<claim deadline ms>\n<token>\n<channel>` (a slot granted to one of its waiters,
 * held that long from the grant with no claim) and `q\n<channel>` (a queue formed where it holds a slot), from
 * lua/includes/queue.lua. The channel id is the rest, whatever it holds.
 */
import type { Cluster, Redis } from 'ioredis';
import type { Listening, QueueListener } from '../../store.js';
import { subscriberOf } from '../connection/connection.js';
import type { KeyBuilder } from '../keys.js';
import type { Members } from './members.js';
import type { QueueHints } from './queue-hints.js';

type Message =
  | { kind: 'grant'; token: string; channelId: string; heldMs: number | undefined }
  | { kind: 'queued'; channelId: string };

function parseMessage(message: string): Message | undefined {
  let [kind, rest] = [message.slice(0, 2), message.slice(2)];
  let heldMs: number | undefined;
  if (kind === 'c\n') {
    const cut = rest.indexOf('\n');
    heldMs = Number(rest.slice(0, cut));
    if (!(heldMs > 0)) heldMs = undefined;
    rest = rest.slice(cut + 1);
    kind = 'g\n';
  }
  // older releases: `g` and `G` grants with no duration (claimed at once); `G` and `Q` carry a Redis time first
  if (kind === 'G\n' || kind === 'Q\n') {
    rest = rest.slice(rest.indexOf('\n') + 1);
    kind = kind.toLowerCase();
  }
  if (kind === 'q\n') return { kind: 'queued', channelId: rest };
  const cut = rest.indexOf('\n');
  if (kind !== 'g\n' || cut <= 0) return undefined;
  return { kind: 'grant', token: rest.slice(0, cut), channelId: rest.slice(cut + 1), heldMs };
}

export class GrantMessages {
  private readonly listeners = new Map<string, QueueListener>();

  constructor(
    private readonly deps: { client: Redis | Cluster; keys: KeyBuilder; hints: QueueHints; members: Members },
  ) {}

  listenerOf(instanceId: string): QueueListener | undefined {
    return this.listeners.get(instanceId);
  }

  /** Messages sent while the subscription reconnects are lost: once it is back, the listener resyncs. */
  listen(instanceId: string, listener: QueueListener): Listening {
    const { keys, hints, members } = this.deps;
    this.listeners.set(instanceId, listener);
    const channel = keys.grants(instanceId);
    const subscriber = subscriberOf(this.deps.client);
    subscriber.on('error', () => {}); // it reconnects and resubscribes by itself
    let lost = false;
    subscriber.on('close', () => (lost = true));
    subscriber.on('ready', () => {
      if (!lost) return;
      lost = false;
      const resync = () => listener.resync();
      subscriber.subscribe(channel).then(resync, resync);
    });
    subscriber.on('message', (from: string, text: string) => {
      const message = from === channel ? parseMessage(text) : undefined;
      if (message?.kind === 'grant') {
        members.forget(message.channelId, message.token);
        const { channelId, token, heldMs } = message;
        listener.grant({ kind: 'claim', channelId, token, heldMs });
      } else if (message?.kind === 'queued') {
        hints.mark(message.channelId);
        listener.queued(message.channelId);
      }
    });
    const ready = subscriber.subscribe(channel).then(
      () => undefined,
      () => undefined,
    );
    return {
      ready,
      stop: async () => {
        if (this.listeners.get(instanceId) === listener) this.listeners.delete(instanceId);
        subscriber.disconnect();
      },
    };
  }
}
