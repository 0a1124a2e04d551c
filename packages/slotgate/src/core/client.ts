/**
 * A client (an API key, a user, a team) with a max concurrency holds one slot of its own, fleet-wide, per request in
 * flight, stored as a resource like a channel's. A client without a limit costs nothing.
 */
import { fieldError, isFiniteNumber, isInt, RESERVED_ID_START, type Candidate } from './channel.js';

export interface Client {
  /** Names the client: requests with the same id share its limit, on every instance. */
  id: string;
  /** > 0 bounds the client's requests in flight across every instance; 0 (default) = no limit, no store command. */
  maxConcurrency?: number;
  /** The client's share of a saturated channel against other clients. @default 1 */
  weight?: number;
  /** Bound of the client's own wait queue (requests waiting for one of its slots). @default as a channel's */
  maxWaiting?: number;
}

/** The resource id prefix of a client's slots: no channel id can start with it, so their keys never meet. */
export const CLIENT_RESOURCE_PREFIX = `${RESERVED_ID_START}client:`;

export const isClientResource = (id: string): boolean => id.startsWith(CLIENT_RESOURCE_PREFIX);

export const clientIdOf = (resourceId: string): string => resourceId.slice(CLIENT_RESOURCE_PREFIX.length);

/** How an operator reads a resource id: `channel "<id>"`, or `client "<id>"` for a limited client's own slots. */
export const describeResource = (id: string): string =>
  isClientResource(id) ? `client ${JSON.stringify(clientIdOf(id))}` : `channel ${JSON.stringify(id)}`;

export const isLimited = (client: Client | undefined): client is Client & { maxConcurrency: number } =>
  client !== undefined && (client.maxConcurrency ?? 0) > 0;

/** The candidate an admission pass acquires for a limited client's own slot. */
export function clientResource(client: Client & { maxConcurrency: number }): Candidate {
  return {
    id: CLIENT_RESOURCE_PREFIX + client.id,
    maxConcurrency: client.maxConcurrency,
    ...(client.maxWaiting !== undefined ? { maxWaiting: client.maxWaiting } : {}),
  };
}

/** Rejects a client the acquire could not use correctly. */
export function validateClient(client: Client): void {
  const bad = (field: string, expected: string, got: unknown) => fieldError('client', field, expected, got);
  if (typeof client !== 'object' || client === null) throw bad('(client)', 'an object', client);
  if (typeof client.id !== 'string' || client.id.length === 0)
    throw bad('id', 'a non-empty string', client.id);
  if (client.maxConcurrency !== undefined && !isInt(client.maxConcurrency, 0)) {
    throw bad(`maxConcurrency of ${client.id}`, 'an integer ≥ 0 (0 = no limit)', client.maxConcurrency);
  }
  if (client.maxWaiting !== undefined && !isInt(client.maxWaiting, 1)) {
    throw bad(`maxWaiting of ${client.id}`, 'an integer ≥ 1', client.maxWaiting);
  }
  if (client.weight !== undefined && !(isFiniteNumber(client.weight) && client.weight > 0)) {
    throw bad(`weight of ${client.id}`, 'a finite number > 0', client.weight);
  }
}
