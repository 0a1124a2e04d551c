/**
 * The messages on an instance's grants channel (`<prefix>:v1:grants:<instanceId>`), sent by the scripts
 * (lua/includes/queue.lua) and delivered to the instance's QueueListener: a slot granted to one of its waiters
 * (`g\n<token>\n<channel>`), and a queue formed on a channel where it holds a slot (`q\n<channel>`). The channel id
 * is the rest of the message, whatever it holds.
 */
import type { Cluster, Redis } from 'ioredis';
import type { Listening, QueueListener } from '../../store.js';
import { subscriberOf } from '../connection/connection.js';
import type { KeyBuilder } from '../keys.js';
import type { Members } from './members.js';
import type { QueueHints } from './queue-hints.js';

export const GRANT_MESSAGE = 'g';
export const QUEUED_MESSAGE = 'q';

/** A message as sent: what it says, and of which channel and token; undefined for another shape. */
export function parseMessage(
  message: string,
): { kind: 'grant'; token: string; channelId: string } | { kind: 'queued'; channelId: string } | undefined {
  let [kind, rest] = [message.slice(0, 2), message.slice(2)];
  // an older release sends `G` and `Q` with a time first
  if (kind === 'G\n' || kind === 'Q\n') {
    rest = rest.slice(rest.indexOf('\n') + 1);
    kind = kind.toLowerCase();
  }
  if (kind === `${QUEUED_MESSAGE}\n`) return { kind: 'queued', channelId: rest };
  const cut = rest.indexOf('\n');
  if (kind !== `${GRANT_MESSAGE}\n` || cut <= 0) return undefined;
  return { kind: 'grant', token: rest.slice(0, cut), channelId: rest.slice(cut + 1) };
}

export class GrantMessages {
  private readonly listeners = new Map<string, QueueListener>();

  constructor(
    private readonly deps: { client: Redis | Cluster; keys: KeyBuilder; hints: QueueHints; members: Members },
  ) {}

  /** The listener of an instance listening through this store. */
  listenerOf(instanceId: string): QueueListener | undefined {
    return this.listeners.get(instanceId);
  }

  /**
   * Subscribes to the instance's grants channel on a connection of its own. Messages sent while it reconnects are
   * lost: once the subscription is back, every waiter checks its queues (QueueListener.resync).
   */
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
        listener.grant({ kind: 'claim', channelId: message.channelId, token: message.token });
      } else if (message?.kind === 'queued') {
        hints.mark(message.channelId);
        listener.queued(message.channelId);
      }
    });
    // with Redis down at start, the subscription completes when it answers
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
