/**
 * A waiter's member in a channel's queue is "<max>|<lifetime ms>|<token>" (lua/includes/queue.lua): the lifetime is
 * the one it registered with, so a leave or a poll must name the same member whatever the settings are now. This
 * store remembers the member of each of its registrations until it ends here.
 */
import type { WaiterRef } from '../../store.js';

/** The longest a registration lives: `wait_timeout_ms` at its bound (60 s) plus the 2 s margin (queue.lua MAX_LIVE_MS). */
export const MAX_REGISTRATION_LIVE_MS = 62_000;

/** Members remembered at most (past it, a member not remembered is rebuilt with the latest lifetime). */
const MEMBERS_LIMIT = 100_000;

export const queueMember = (w: WaiterRef, liveMs: number): string => `${w.max}|${liveMs}|${w.token}`;

/** The registration lifetime a member names (NaN for a member of another shape). */
export const memberLifetime = (member: string): number => Number(member.split('|')[1]);

const placeOf = (channelId: string, token: string) => `${channelId}\n${token}`;

export class Members {
  private readonly members = new Map<string, string>();
  /** The lifetime of this store's latest registration. */
  private latest: number | undefined;

  /** How long a registration lives as this store last registered one (the longest before the first). */
  liveMs(): number {
    return this.latest ?? MAX_REGISTRATION_LIVE_MS;
  }

  /** The member `w` stands under: the one it registered with, else one with the latest lifetime. */
  of(w: WaiterRef): string {
    return this.members.get(placeOf(w.channelId, w.token)) ?? queueMember(w, this.liveMs());
  }

  /** Remembers the member `w` registers under, living `liveMs` past its arrival; returns it. */
  remember(w: WaiterRef, liveMs: number): string {
    this.latest = liveMs;
    if (this.members.size >= MEMBERS_LIMIT) this.members.clear();
    const member = queueMember(w, liveMs);
    this.members.set(placeOf(w.channelId, w.token), member);
    return member;
  }

  /** The registration ended here (left, granted, found gone). */
  forget(channelId: string, token: string): void {
    this.members.delete(placeOf(channelId, token));
  }
}
