/** token → expiry (ms), with expired members dropped on demand; `added` hears the live count after each add. */
export class ExpiringSet {
  readonly members = new Map<string, number>();

  constructor(private readonly added: (live: number, now: number) => void = () => {}) {}

  add(token: string, expiry: number, now: number): void {
    this.members.set(token, expiry);
    this.added(this.live(now), now);
  }

  live(now: number): number {
    let n = 0;
    for (const expiry of this.members.values()) if (expiry > now) n++;
    return n;
  }

  prune(now: number): void {
    for (const [token, expiry] of this.members) if (expiry <= now) this.members.delete(token);
  }

  /** Whether `max` live members fill it (the expired are dropped when it looks full). */
  full(max: number, now: number): boolean {
    if (this.members.size >= max) this.prune(now);
    return this.members.size >= max;
  }
}
