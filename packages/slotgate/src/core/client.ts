/**
 * Clients: who a request is for (an API key, a user, a team). A client with a max concurrency holds one slot of its
 * own, fleet-wide, for each request in flight, beside the channel slot; it is stored as a resource of its own with
 * the same lease, renewal, fencing, queue and crash recovery as a channel. A client without a limit costs nothing.
 */
import type { Candidate } from './channel.js';

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

/** Channel ids may not start with this (validateCandidate): ids that do are the engine's own resources. */
export const RESERVED_ID_START = '\u0000';

/**
 * A client's slots live under a resource id no channel can have (it starts with RESERVED_ID_START, which the Redis
 * key builder percent-encodes), so a client's keys never meet a channel's.
 */
export const CLIENT_RESOURCE_PREFIX = `${RESERVED_ID_START}client:`;

export const isClientResource = (id: string): boolean => id.startsWith(CLIENT_RESOURCE_PREFIX);

/** The client id of a client resource id. */
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

/** Rejects a client the acquire could not use correctly, naming the field, what it expects and what came in. */
export function validateClient(client: Client): void {
  const bad = (field: string, expected: string, got: unknown) =>
    new TypeError(
      `Expected client \`${field}\` to be ${expected}, got ${JSON.stringify(got) ?? String(got)}`,
    );
  if (typeof client !== 'object' || client === null) throw bad('(client)', 'an object', client);
  if (typeof client.id !== 'string' || client.id.length === 0)
    throw bad('id', 'a non-empty string', client.id);
  const int = (v: unknown, min: number) => typeof v === 'number' && Number.isInteger(v) && v >= min;
  if (client.maxConcurrency !== undefined && !int(client.maxConcurrency, 0)) {
    throw bad(`maxConcurrency of ${client.id}`, 'an integer ≥ 0 (0 = no limit)', client.maxConcurrency);
  }
  if (client.maxWaiting !== undefined && !int(client.maxWaiting, 1)) {
    throw bad(`maxWaiting of ${client.id}`, 'an integer ≥ 1', client.maxWaiting);
  }
  if (
    client.weight !== undefined &&
    !(typeof client.weight === 'number' && Number.isFinite(client.weight) && client.weight > 0)
  ) {
    throw bad(`weight of ${client.id}`, 'a finite number > 0', client.weight);
  }
}
