/**
 * A queue member is "<max>|<lifetime ms>|<token>" (lua/includes/queue.lua): a leave or poll must name the member a
 * waiter registered with, whatever the settings are now, so the store remembers each until it ends.
 */
import type { WaiterRef } from '../../store.js';

/** `wait_timeout_ms` at its bound plus the 2 s margin (queue.lua MAX_LIVE_MS). */
export const MAX_REGISTRATION_LIVE_MS = 62_000;

/** Past it, a member not remembered is rebuilt with the latest lifetime. */
const MEMBERS_LIMIT = 100_000;

const queueMember = (w: WaiterRef, liveMs: number): string => `${w.max}|${liveMs}|${w.token}`;

/** NaN for a member of another shape. */
export const memberLifetime = (member: string): number => Number(member.split('|')[1]);

const placeOf = (channelId: string, token: string) => `${channelId}\n${token}`;

export class Members {
  private readonly members = new Map<string, string>();
  private latest: number | undefined;

  /** The lifetime of this store's latest registration (the longest before the first). */
  liveMs(): number {
    return this.latest ?? MAX_REGISTRATION_LIVE_MS;
  }

  /** The member `w` registered with, else one with the latest lifetime. */
  of(w: WaiterRef): string {
    return this.members.get(placeOf(w.channelId, w.token)) ?? queueMember(w, this.liveMs());
  }

  remember(w: WaiterRef, liveMs: number): string {
    this.latest = liveMs;
    if (this.members.size >= MEMBERS_LIMIT) this.members.clear();
    const member = queueMember(w, liveMs);
    this.members.set(placeOf(w.channelId, w.token), member);
    return member;
  }

  forget(channelId: string, token: string): void {
    this.members.delete(placeOf(channelId, token));
  }
}
