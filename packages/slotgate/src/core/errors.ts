/** slotgate's errors: each has a stable `code` (the gateway maps it to an HTTP status); no message carries secrets. */
import { clientIdOf, isClientResource } from './client.js';

export type CapacityReason = 'full' | 'queue_full' | 'wait_timeout' | 'aborted';

export class SlotgateError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** Every candidate is full (and waiting was off, the queue was full, the wait timed out or was aborted). */
export class CapacityError extends SlotgateError {
  readonly reason: CapacityReason;
  /** A hint for Retry-After: how long until a slot is likely to free up. */
  readonly retryAfterMs: number;
  /** The bounded channels that were found saturated in this pass. */
  readonly channels: readonly string[];
  constructor(
    reason: CapacityReason,
    message: string,
    opts: { retryAfterMs: number; channels: readonly string[] },
  ) {
    super('channel_capacity_exhausted', message);
    this.reason = reason;
    this.retryAfterMs = opts.retryAfterMs;
    this.channels = opts.channels;
  }
}

/** The request's client has its own max concurrency in flight across the fleet, and no slot of its own came free. */
export class ClientLimitError extends SlotgateError {
  readonly reason: CapacityReason;
  readonly retryAfterMs: number;
  readonly clientId: string;
  constructor(reason: CapacityReason, message: string, opts: { retryAfterMs: number; clientId: string }) {
    super('client_concurrency_exceeded', message);
    this.reason = reason;
    this.retryAfterMs = opts.retryAfterMs;
    this.clientId = opts.clientId;
  }
}

/** The admission store (Redis) failed or timed out; bounded channels fail closed. */
export class StoreUnavailableError extends SlotgateError {
  /** What the store was doing when it failed (acquire, release, wait, load_read, ...). */
  readonly operation: string;
  constructor(operation: string, message: string, options?: { cause?: unknown }) {
    super('admission_store_unavailable', message, options);
    this.operation = operation;
  }
}

/** No enabled channel is left in the candidate set. */
export class NoChannelError extends SlotgateError {
  constructor(message = 'no channel is available for this request') {
    super('no_channel', message);
  }
}

/** Why a lease was lost for good: gone from the store with no free slot to take it back, or unrenewed at expiry. */
export type LeaseLostReason = 'missing' | 'expired';

/** The reason of a ticket's `lost` signal: another request may hold its slot, so the work it guards must end. */
export class LeaseLostError extends SlotgateError {
  readonly channelId: string;
  readonly reason: LeaseLostReason;
  constructor(channelId: string, reason: LeaseLostReason) {
    const what = isClientResource(channelId)
      ? { slot: `a slot of client ${JSON.stringify(clientIdOf(channelId))}`, owner: 'client' }
      : { slot: `the slot on channel ${JSON.stringify(channelId)}`, owner: 'channel' };
    super(
      'lease_lost',
      reason === 'missing'
        ? `${what.slot} was lost (the store no longer held it and the ${what.owner} was full)`
        : `${what.slot} expired before a renewal was confirmed (the store did not answer)`,
    );
    this.channelId = channelId;
    this.reason = reason;
  }
}

/** Invalid settings or configuration: names each bad key, its valid range and the value received. */
export class SettingsError extends SlotgateError {
  readonly issues: readonly string[];
  constructor(issues: readonly string[]) {
    super('invalid_settings', `invalid settings: ${issues.join('; ')}`);
    this.issues = issues;
  }
}

/** Every error code the library can raise, with what it means (docs/errors.md is checked against it). */
export const ERROR_CODES = {
  channel_capacity_exhausted:
    'every candidate channel is at its max concurrency (reason: full, queue_full, wait_timeout, aborted)',
  client_concurrency_exceeded:
    "the request's client has its own max concurrency in flight across the fleet (reason: full, queue_full, wait_timeout, aborted)",
  admission_store_unavailable:
    'the admission store (Redis) failed or timed out; bounded channels fail closed',
  no_channel: 'no enabled channel is left in the candidate set',
  invalid_settings: 'a settings update was rejected whole; nothing changed',
  lease_lost:
    "a ticket's slot was lost for good (store lost it and the channel was full, or no renewal confirmed before expiry): the work it guards is ended",
} as const;
