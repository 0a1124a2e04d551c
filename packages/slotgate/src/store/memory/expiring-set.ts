/** token → expiry (ms), with expired members dropped on demand. */
export class ExpiringSet {
  readonly members = new Map<string, number>();

  live(now: number): number {
    let n = 0;
    for (const expiry of this.members.values()) if (expiry > now) n++;
    return n;
  }

  prune(now: number): void {
    for (const [token, expiry] of this.members) if (expiry <= now) this.members.delete(token);
  }
}
