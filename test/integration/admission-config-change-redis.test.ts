/**
 * Waiting requests follow a configuration change on a real Redis, with two instances (two engines, each with its own
 * client and grants subscription) on one prefix: both lower a channel's max or disable a channel while waiters of
 * both wait. The test counts what is in flight itself, at the moment each ticket is handed out, and releases tickets
 * one at a time, so every assertion is about the order of events: after the change nobody is admitted while the new
 * max is reached, the waiters keep their arrival order across the instances, and a disabled channel admits nobody.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { createAdmission } from '../../packages/slotgate/src/admission/admission.js';
import type { Admission, Ticket } from '../../packages/slotgate/src/admission/types.js';
import type { Candidate } from '../../packages/slotgate/src/core/channel.js';
import { RedisStore } from '../../packages/slotgate/src/store/redis/redis-store.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
const SETTINGS = { wait_timeout_ms: 30_000, max_waiting_per_channel: 20 };

let prefix: string;
let client: Redis;
afterEach(async () => {
  const keys = await client.keys(`${prefix}:*`);
  if (keys.length) await client.del(...keys);
  client.disconnect();
});

/** Two instances on one Redis and prefix, sharing one configuration that can be replaced (new objects each time). */
async function fleet(...channels: Candidate[]) {
  prefix = uniquePrefix('cfg');
  client = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
  let current = channels;
  const instance = (): { admission: Admission; store: RedisStore } => {
    const store = new RedisStore({ url: redisUrl(), prefix });
    const admission = createAdmission({ store, settings: SETTINGS });
    cleanups.push(() => store.close());
    cleanups.push(() => admission.close());
    return { admission, store };
  };
  const a = instance();
  const b = instance();
  return {
    a: a.admission,
    b: b.admission,
    keys: a.store.keys,
    resolve: () => current,
    get channels() {
      return current;
    },
    /** A reload on both instances. */
    change(...next: Candidate[]) {
      current = next;
      a.admission.configChanged();
      b.admission.configChanged();
    },
  };
}

/** Tickets handed out, with how many of their channel were in flight (themselves included) when each was. */
function counter() {
  const inFlight = new Map<string, number>();
  const admitted: { name: string; channel: string; inFlight: number; ticket: Ticket<Candidate> }[] = [];
  return {
    admitted,
    /** Counts the ticket in the moment it is handed out. */
    track(name: string, work: Promise<Ticket<Candidate>>) {
      void work.then((ticket) => {
        const n = (inFlight.get(ticket.channel.id) ?? 0) + 1;
        inFlight.set(ticket.channel.id, n);
        admitted.push({ name, channel: ticket.channel.id, inFlight: n, ticket });
      });
      work.catch(() => {});
      return work;
    },
    async release(ticket: Ticket<Candidate>) {
      inFlight.set(ticket.channel.id, inFlight.get(ticket.channel.id)! - 1);
      await ticket.release();
    },
  };
}

async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within 10 s`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe('a configuration change reaches the waiters of every instance (Redis)', () => {
  it('max 3 → 1 on both instances: the waiters are admitted one at a time, in their arrival order', async () => {
    const f = await fleet({ id: 'm', maxConcurrency: 3 });
    const c = counter();
    const old = await Promise.all(
      [0, 1, 2].map((i) => c.track(`old${i}`, f.a.acquire({ candidates: f.channels }))),
    );
    expect(old.map((t) => t.channel.id)).toEqual(['m', 'm', 'm']);
    // four waiters, alternating instances, each enqueued before the next arrives
    const names = ['a1', 'b1', 'a2', 'b2'];
    const waiters = [];
    for (const [i, name] of names.entries()) {
      const on = name.startsWith('a') ? f.a : f.b;
      waiters.push(c.track(name, on.acquire({ candidates: f.channels, resolve: f.resolve })));
      await until(async () => (await client.zcard(f.keys.queue('m'))) === i + 1, `${name} queued`);
    }

    // the old slots end right after the change: none of them may go to a waiter while another is in flight
    f.change({ id: 'm', maxConcurrency: 1 });
    for (const t of old) await c.release(t);
    for (let served = 0; served < 4; served++) {
      await until(() => c.admitted.length > 3 + served, `waiter ${served + 1} admitted`);
      await c.release(c.admitted[3 + served]!.ticket);
    }
    await Promise.all(waiters);
    const afterChange = c.admitted.slice(3);
    expect(afterChange.map((x) => [x.name, x.inFlight])).toEqual(names.map((n) => [n, 1]));
    expect(await client.exists(f.keys.queue('m'))).toBe(0);
  });

  it('a channel disabled on both instances: its waiters leave its queue, its freed slots go to nobody, the other channel serves them', async () => {
    const f = await fleet({ id: 'x', maxConcurrency: 1 }, { id: 'y', maxConcurrency: 1 });
    const c = counter();
    const onX = await c.track('holdX', f.a.acquire({ candidates: [f.channels[0]!] }));
    const onY = await c.track('holdY', f.b.acquire({ candidates: [f.channels[1]!] }));
    const names = ['a1', 'b1', 'a2'];
    const waiters = [];
    for (const [i, name] of names.entries()) {
      const on = name.startsWith('a') ? f.a : f.b;
      waiters.push(c.track(name, on.acquire({ candidates: f.channels, resolve: f.resolve })));
      await until(async () => (await client.zcard(f.keys.queue('y'))) === i + 1, `${name} queued`);
    }
    expect(await client.zcard(f.keys.queue('x'))).toBe(3);

    // x's slot ends right after the change: it must go to nobody
    f.change({ id: 'x', maxConcurrency: 1, enabled: false }, { id: 'y', maxConcurrency: 1 });
    await c.release(onX);
    await c.release(onY);
    for (let served = 0; served < 3; served++) {
      await until(() => c.admitted.length > 2 + served, `waiter ${served + 1} admitted`);
      await c.release(c.admitted[2 + served]!.ticket);
    }
    await Promise.all(waiters);
    const afterChange = c.admitted.slice(2);
    expect(afterChange.map((x) => [x.name, x.channel, x.inFlight])).toEqual(names.map((n) => [n, 'y', 1]));
    await until(
      async () => (await client.exists(f.keys.queue('x'), f.keys.slots('x'))) === 0,
      "x's keys gone",
    );
  });
});
