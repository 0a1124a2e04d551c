import { randomBytes } from 'node:crypto';

/** A random instance id: 12 url-safe characters, unique per gateway process. */
export function randomInstanceId(): string {
  return randomBytes(9).toString('base64url');
}

/** A lease token: the instance id and a sequence number (LeaseManager.nextToken). */
export function tokenOf(instanceId: string, seq: number): string {
  return `${instanceId}:${seq}`;
}

/** The instance id of a token, everything before its last `:` (lua/includes/queue.lua reads it the same way). */
export function instanceOfToken(token: string): string {
  const cut = token.lastIndexOf(':');
  return cut < 0 ? token : token.slice(0, cut);
}
