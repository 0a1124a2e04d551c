/**
 * token → expiry (ms), with expired members dropped on demand. `removing` hears the count (expired members included,
 * as Redis counts them) just before members go: the high-water mark (../peak.ts).
 */
export class ExpiringSet {
  readonly members = new Map<string, number>();

  constructor(private readonly removing: (held: number) => void = () => {}) {}

  /** Whether the token held a member. */
  remove(token: string): boolean {
    if (!this.members.has(token)) return false;
    this.removing(this.members.size);
    return this.members.delete(token);
  }

  live(now: number): number {
    let n = 0;
    for (const expiry of this.members.values()) if (expiry > now) n++;
    return n;
  }

  prune(now: number): void {
    const held = this.members.size;
    for (const [token, expiry] of this.members) if (expiry <= now) this.members.delete(token);
    if (this.members.size < held) this.removing(held);
  }

  /** Whether `max` live members fill it (the expired are dropped when it looks full). */
  full(max: number, now: number): boolean {
    if (this.members.size >= max) this.prune(now);
    return this.members.size >= max;
  }
}
