/**
 * The Lua scripts, loaded from lua/*.lua and registered on an ioredis client with `defineCommand` (EVALSHA first,
 * EVAL on NOSCRIPT, so a restarted Redis reloads them transparently). Command names carry the schema version so two
 * releases sharing one Redis never run each other's scripts. Replies are mapped to results in exactly one place.
 */
import { readFileSync } from 'node:fs';
import type { Cluster, Redis } from 'ioredis';
import type { AcquireReply } from '../store.js';
import { SCHEMA_VERSION } from './keys.js';

function lua(name: string): string {
  return readFileSync(new URL(`./lua/${name}.lua`, import.meta.url), 'utf8');
}

export const SCRIPTS = {
  acquire: { name: `slotgate_${SCHEMA_VERSION}_acquire`, file: 'acquire', numberOfKeys: undefined },
  renew: { name: `slotgate_${SCHEMA_VERSION}_renew`, file: 'renew', numberOfKeys: undefined },
  registerWaiter: {
    name: `slotgate_${SCHEMA_VERSION}_register_waiter`,
    file: 'registerWaiter-1',
    numberOfKeys: 1,
  },
} as const;

type Reply = unknown;
/** The script commands as they appear on a client after `defineScripts`. */
export interface ScriptClient {
  /** numkeys, KEYS..., ARGV... */
  [SCRIPTS.acquire.name]: (...args: (string | number)[]) => Promise<Reply>;
  [SCRIPTS.renew.name]: (...args: (string | number)[]) => Promise<Reply>;
  [SCRIPTS.registerWaiter.name]: (...args: (string | number)[]) => Promise<Reply>;
}

const sources = new Map<string, string>();

/** Registers every script on the client (idempotent). */
export function defineScripts(client: Redis | Cluster): ScriptClient {
  for (const script of Object.values(SCRIPTS)) {
    if (typeof (client as unknown as Record<string, unknown>)[script.name] === 'function') continue;
    let source = sources.get(script.file);
    if (!source) sources.set(script.file, (source = lua(script.file)));
    client.defineCommand(script.name, {
      lua: source,
      ...(script.numberOfKeys === undefined ? {} : { numberOfKeys: script.numberOfKeys }),
    });
  }
  return client as unknown as ScriptClient;
}

const ACQUIRE_CODES: Record<number, AcquireReply> = { 0: 'full', 1: 'acquired', 2: 'cooling' };

/**
 * Splits the acquire script's flat reply into one list of codes per request: a request's codes end at its first
 * "acquired" or after its channels.
 */
export function splitAcquireReply(
  reply: Reply,
  requests: readonly { targets: readonly unknown[] }[],
): AcquireReply[][] {
  if (!Array.isArray(reply)) throw new TypeError(`unexpected acquire reply ${JSON.stringify(reply)}`);
  const codes = parseAcquireReply(reply);
  const out: AcquireReply[][] = [];
  let at = 0;
  for (const { targets } of requests) {
    const start = at;
    while (at < codes.length && at - start < targets.length) {
      if (codes[at++] === 'acquired') break;
    }
    out.push(codes.slice(start, at));
  }
  if (at !== codes.length || out.some((c) => c.length === 0)) {
    throw new TypeError(`unexpected acquire reply ${JSON.stringify(reply)} for ${requests.length} requests`);
  }
  return out;
}

export function parseAcquireReply(reply: Reply): AcquireReply[] {
  if (!Array.isArray(reply)) throw new TypeError(`unexpected acquire reply ${JSON.stringify(reply)}`);
  return reply.map((code) => {
    const parsed = ACQUIRE_CODES[Number(code)];
    if (!parsed) throw new TypeError(`unexpected acquire reply code ${JSON.stringify(code)}`);
    return parsed;
  });
}
