/**
 * The fair share between clients in the grant loop (lua/includes/queue.lua, grantFree), called through releaseSlot
 * directly on the real redis-server: a freed slot goes to the waiter whose client holds the fewest live slots of the
 * channel relative to its weight (the waiter's token says both: `~<weight>~<client>`, core/ids.ts), the oldest first
 * among equals; with one client's waiters in the window (the 64 oldest), plain FIFO; and a pick that cannot be served
 * under its own max leaves the choice to the oldest. Every waiter here is of the releasing instance `w`, so the reply
 * lists the waiters granted in the order they were granted.
 */
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { KeyBuilder } from '../../packages/slotgate/src/store/redis/keys.js';
import { SCRIPTS } from '../../packages/slotgate/src/store/redis/scripts.js';
import { redisMs } from '../../packages/slotgate/src/store/redis/loads/redis-offset.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';

const ID = 'fair';
const LEASE_TTL_MS = 60_000;
const LIVE_MS = 60_000;
/** The releasing instance: its waiters granted are named in the release's reply, in grant order. */
const RELEASER = 'w';

let client: Redis;
let keys: KeyBuilder;

beforeAll(() => {
  client = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
});

afterAll(() => {
  client.disconnect();
});

beforeEach(() => {
  keys = new KeyBuilder(uniquePrefix('fair'));
});

afterEach(async () => {
  const left = await client.keys(keys.pattern());
  if (left.length) await client.del(...left);
});

/** A token of `instance` for a request of `client` (none: no share) with `weight`. */
const token = (instance: string, seq: number, client?: string, weight = 1) =>
  `${instance}:${seq}${client === undefined ? '' : `~${weight}~${client}`}`;
/** A waiter of the releasing instance. */
const waiter = (seq: number, client?: string, weight = 1) => token(RELEASER, seq, client, weight);

interface Holder {
  token: string;
  /** A lease that ran out (not yet swept) rather than a live one. */
  expired?: boolean;
}

/**
 * The channel's slots (`holders`, live unless marked expired) and queue (`waiters`, oldest first, as [token, the
 * max it waits under]), written directly.
 */
async function channel(holders: (string | Holder)[], waiters: [string, number][]): Promise<void> {
  const time = await client.time();
  const nowMs = redisMs(time);
  const nowUs = Number(time[0]) * 1_000_000 + Number(time[1]);
  for (const h of holders) {
    const { token: t, expired } = typeof h === 'string' ? { token: h, expired: false } : h;
    await client.zadd(keys.slots(ID), expired ? nowMs - 5_000 : nowMs + LEASE_TTL_MS, t);
  }
  for (const [i, [t, max]] of waiters.entries()) {
    await client.zadd(keys.queue(ID), nowUs - (waiters.length - i) * 1_000, `${max}|${LIVE_MS}|${t}`);
  }
}

/** Releases `holder`'s slot: the releasing instance's waiters granted, in grant order. */
async function release(holder: string): Promise<string[]> {
  const reply = await SCRIPTS.releaseSlot.call(
    client,
    [keys.slots(ID), keys.queue(ID), keys.peak(ID), keys.limit(ID)],
    [holder, 5_000, LEASE_TTL_MS, keys.grants(), ID, '', RELEASER, ''],
  );
  expect(reply.removed).toBe(true);
  return reply.local;
}

describe('the fair share between clients in a grant (grantFree)', () => {
  it('the slot goes to the client holding the fewest live slots, the oldest of equals first', async () => {
    await channel(
      [token('h', 1, 'A'), token('h', 2, 'A'), token('h', 3, 'B')],
      [
        [waiter(1, 'A'), 3],
        [waiter(2, 'B'), 3],
        [waiter(3, 'C'), 3],
      ],
    );
    // A holds 2, B 0 (its slot just freed), C 0: B's and C's waiters tie, and B's is the older
    expect(await release(token('h', 3, 'B'))).toEqual([waiter(2, 'B')]);
    // now A 2, B 1, C 0
    expect(await release(token('h', 1, 'A'))).toEqual([waiter(3, 'C')]);
  });

  it('successive releases share the slots out by client, not by arrival alone', async () => {
    await channel(
      [token('h', 1, 'A'), token('h', 2, 'A'), token('h', 3, 'B'), token('h', 4, 'B')],
      [
        [waiter(1, 'A'), 4],
        [waiter(2, 'A'), 4],
        [waiter(3, 'A'), 4],
        [waiter(4, 'B'), 4],
      ],
    );
    expect(await release(token('h', 1, 'A'))).toEqual([waiter(1, 'A')]); // A 1, B 2
    expect(await release(token('h', 3, 'B'))).toEqual([waiter(4, 'B')]); // A 2, B 1: ahead of two older A's
    expect(await release(token('h', 2, 'A'))).toEqual([waiter(2, 'A')]); // A 1, B 2
  });

  it('relative to the weight its waiter names: a client of weight 4 holding 1 slot is served before one of weight 1 holding 1', async () => {
    await channel(
      [token('h', 1, 'A', 4), token('h', 2, 'A', 4), token('h', 3, 'B')],
      [
        [waiter(1, 'B'), 3],
        [waiter(2, 'A', 4), 3],
      ],
    );
    // A 1 slot / weight 4 = 0.25, B 1 / 1: A's waiter, though B's is older
    expect(await release(token('h', 1, 'A', 4))).toEqual([waiter(2, 'A', 4)]);
  });

  it('a lease that ran out counts for nobody', async () => {
    await channel(
      [token('h', 1, 'A'), token('h', 2, 'A'), { token: token('h', 3, 'B'), expired: true }],
      [
        [waiter(1, 'A'), 3],
        [waiter(2, 'B'), 3],
      ],
    );
    // A holds 1 live slot, B none (its lease ran out): B's waiter, though A's is older
    expect(await release(token('h', 1, 'A'))).toEqual([waiter(2, 'B')]);
  });

  it("plain FIFO while the window (the 64 oldest) holds one client's waiters only", async () => {
    const ofA = Array.from({ length: 65 }, (_, i) => [waiter(i + 1, 'A'), 3] as [string, number]);
    // A holds every slot, B none; B's waiter is the 66th, out of the window until two of A's have gone
    await channel(
      [token('h', 1, 'A'), token('h', 2, 'A'), token('h', 3, 'A')],
      [...ofA, [waiter(66, 'B'), 3]],
    );
    expect(await release(token('h', 1, 'A'))).toEqual([waiter(1, 'A')]);
    expect(await release(token('h', 2, 'A'))).toEqual([waiter(2, 'A')]);
    expect(await release(token('h', 3, 'A'))).toEqual([waiter(66, 'B')]); // in the window now: B holds none
  });

  it('a pick that cannot be served under its own max leaves the slot to the oldest', async () => {
    await channel(
      [token('h', 1, 'A'), token('h', 2, 'A'), token('h', 3, 'A'), token('h', 4, 'A')],
      [
        [waiter(1, 'A'), 4],
        [waiter(2, 'B'), 2], // B holds none, but waits under max 2 with 3 slots in use
      ],
    );
    expect(await release(token('h', 1, 'A'))).toEqual([waiter(1, 'A')]);
    expect(await client.zrange(keys.queue(ID), 0, -1)).toEqual([`2|${LIVE_MS}|${waiter(2, 'B')}`]);
  });
});
