import { randomBytes } from 'node:crypto';

/** A random instance id: 12 url-safe characters, unique per gateway process. */
export function randomInstanceId(): string {
  return randomBytes(9).toString('base64url');
}

/**
 * A lease token: `<instanceId>:<seq>`, then for a request with a client `~<weight>~<client>` (percent-encoded), so
 * the fair share reads clients and weights from tokens alone (here and in lua/includes/queue.lua).
 */
export function tokenOf(instanceId: string, seq: number, share = ''): string {
  return `${instanceId}:${seq}${share}`;
}

/** The token suffix of a request's client, `''` without one; cached per client object, checked for changes. */
export function shareSuffix(client: { id: string; weight?: number } | undefined): string {
  if (!client) return '';
  const known = suffixes.get(client);
  if (known && known.id === client.id && known.weight === client.weight) return known.suffix;
  const suffix = encodeShare(client);
  suffixes.set(client, { id: client.id, weight: client.weight, suffix });
  return suffix;
}

const suffixes = new WeakMap<object, { id: string; weight: number | undefined; suffix: string }>();

function encodeShare(client: { id: string; weight?: number }): string {
  const id = client.id.replace(
    // eslint-disable-next-line no-control-regex -- control characters are encoded too
    /[%:~|\u0000-\u001f]/g,
    (c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`,
  );
  return `~${client.weight ?? 1}~${id}`;
}

/** The share suffix a token was made with, `''` for none. */
export function suffixOfToken(token: string): string {
  return /:[^:~]*(~[^~:]*~[^:]*)?$/.exec(token)?.[1] ?? '';
}

/** A token's share: its client (as encoded) and weight; `''` and 1 for a token without one. */
export function shareOfToken(token: string): { client: string; weight: number } {
  const m = /:[^:~]*~([^~:]*)~([^:]*)$/.exec(token);
  if (!m) return { client: '', weight: 1 };
  const weight = Number(m[1]);
  return { client: m[2]!, weight: weight > 0 ? weight : 1 };
}

/** The instance id of a token: everything before its last `:` (as lua/includes/queue.lua reads it). */
export function instanceOfToken(token: string): string {
  const cut = token.lastIndexOf(':');
  return cut < 0 ? token : token.slice(0, cut);
}
