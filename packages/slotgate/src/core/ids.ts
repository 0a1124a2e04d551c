import { randomBytes } from 'node:crypto';

/** A random instance id: 12 url-safe characters, unique per gateway process. */
export function randomInstanceId(): string {
  return randomBytes(9).toString('base64url');
}
