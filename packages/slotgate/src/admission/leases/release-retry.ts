/** A failed removal, retried with backoff until one is confirmed or the lease has expired anyway. */
import type { Clock } from '../../core/clock.js';
import { UNKNOWN_FLOOR, type SlotStore } from '../../store/store.js';
import type { Lease, LeaseEvent } from './lease-book.js';

export async function retryRelease(
  clock: Clock,
  store: SlotStore,
  lease: Lease,
  firstError: Error,
  emit: (event: LeaseEvent) => void,
): Promise<void> {
  const { channelId, token } = lease;
  let delay = 50;
  let error = firstError;
  for (let attempt = 1; ; attempt++) {
    if (clock.now() + delay >= lease.expiresAt) {
      emit({ type: 'release_abandoned', channelId, token, error });
      return;
    }
    emit({ type: 'release_retry', channelId, token, attempt, error });
    await clock.sleep(delay);
    delay = Math.min(delay * 2, 2000);
    try {
      await store.release(lease, lease.ttlMs, { floor: UNKNOWN_FLOOR }).done;
      return;
    } catch (err) {
      error = err as Error;
    }
  }
}
