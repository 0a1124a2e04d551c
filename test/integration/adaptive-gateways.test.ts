/**
 * Adaptive limits on real processes: two `slotgate serve` children on a private Redis, each channel served by an
 * upstream of hidden capacity K that refuses past K with 429 (Retry-After: 1) and counts what it has in flight. The
 * fleet's one limit, read from Redis, follows K down and up, never leaves [min_concurrency, max_concurrency], and
 * does not grow without requests waiting; the upstream never sees more than the channel's max. Every assertion is an
 * order of events or a bound, polled with generous time-outs, never a time window.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AdaptiveFleet } from '../helpers/adaptive-fleet.js';
import { until } from '../helpers/until.js';

const WAIT = { timeoutMs: 20_000, intervalMs: 50 };

let fleet: AdaptiveFleet;
beforeAll(async () => {
  // latency ignored: the upstream's 429s alone move the limit (an instant refusal would otherwise make every
  // served answer look slow)
  fleet = await AdaptiveFleet.start([
    { id: 'drop', max_concurrency: 12, adaptive: { latency_tolerance: 0 } },
    { id: 'rise', max_concurrency: 12, adaptive: { latency_tolerance: 0 } },
    { id: 'floor', max_concurrency: 6, adaptive: { min_concurrency: 2, latency_tolerance: 0 } },
    { id: 'ceiling', max_concurrency: 4, adaptive: { latency_tolerance: 0 } },
  ]);
}, 40_000);

afterAll(async () => {
  await fleet?.close();
});

/** Polls the stored limit of `channel` until `stop`: every value seen. */
function sampleLimit(channel: string) {
  const seen: number[] = [];
  let running = true;
  const polling = (async () => {
    while (running) {
      const l = await fleet.limit(channel);
      if (l !== undefined) seen.push(l);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  })();
  return {
    seen,
    stop: async () => {
      running = false;
      await polling;
      return seen;
    },
  };
}

/** The limit in force: the whole part of the stored one (undefined: none stored yet). */
const inForce = async (channel: string) => {
  const l = await fleet.limit(channel);
  return l === undefined ? undefined : Math.floor(l);
};

/** Waits for `n` more answers (served or refused) of the hidden-capacity upstream; returns those. */
async function nextEvents(cap: { events: { kind: string }[] }, n: number, what: string) {
  const from = cap.events.length;
  await until(() => cap.events.length >= from + n, what, WAIT);
  return cap.events.slice(from, from + n);
}

describe('adaptive limits across two gateway processes', () => {
  it('convergence after a drop: K 8 → 3 brings the limit to 3–4 and the 429s down; the upstream never sees more than the max', async () => {
    const { cap, set } = fleet.capacity('drop', 8);
    const load = fleet.load('drop', 8);
    try {
      await until(async () => ((await inForce('drop')) ?? 12) <= 9, 'the limit learning K = 8', WAIT);
      set(3);
      await until(
        async () => {
          const l = await inForce('drop');
          return l !== undefined && l >= 3 && l <= 4;
        },
        'the limit within [3, 4] after K fell to 3',
        WAIT,
      );
      const after = await nextEvents(cap, 150, '150 upstream answers after converging');
      const refused = after.filter((e) => e.kind === 'refused').length / after.length;
      // one probe per probe_after successes per level; the static max would see most requests refused
      expect(refused).toBeLessThan(0.2);
    } finally {
      await load.stop();
    }
    expect(fleet.upstream.record('drop').max).toBeLessThanOrEqual(12);
    expect(load.statuses.get(200)).toBeGreaterThan(0);
  }, 60_000);

  it('growth after a rise: no growth while nobody waits; with requests waiting K 3 → 10 raises the limit to ≥ 8', async () => {
    const { cap, set } = fleet.capacity('rise', 3);
    const heavy = fleet.load('rise', 8);
    try {
      await until(async () => ((await inForce('rise')) ?? 12) <= 4, 'the limit learning K = 3', WAIT);
    } finally {
      await heavy.stop();
    }
    set(10);
    // every slot back, so no report of the load above comes later
    await until(async () => (await fleet.fleetLoad('rise')).active === 0, 'every slot released', WAIT);
    // as many clients as the limit: every slot in use, nobody waiting — successes that must not raise it
    const before = (await fleet.limit('rise'))!;
    const clients = Array.from({ length: Math.floor(before) }, async () => {
      for (let i = 0; i < 15; i++) expect(await fleet.ask('rise', 0)).toBe(200);
    });
    await Promise.all(clients);
    expect(await fleet.limit('rise')).toBe(before);

    const load = fleet.load('rise', 8);
    try {
      await until(
        async () => ((await inForce('rise')) ?? 0) >= 8,
        'the limit growing to ≥ 8 after K rose to 10',
        WAIT,
      );
    } finally {
      await load.stop();
    }
    expect(cap.events.some((e) => e.kind === 'served')).toBe(true);
    expect(fleet.upstream.record('rise').max).toBeLessThanOrEqual(12);
  }, 60_000);

  it('the floor: K = 1 under min_concurrency 2 keeps the limit at ≥ 2, and a 429 at the floor cools the channel down', async () => {
    const { cap } = fleet.capacity('floor', 1);
    const samples = sampleLimit('floor');
    const load = fleet.load('floor', 4);
    try {
      await until(async () => (await inForce('floor')) === 2, 'the limit down to its floor', WAIT);
      await until(async () => (await fleet.fleetLoad('floor')).cooling, 'a cooldown at the floor', WAIT);
      await nextEvents(cap, 30, 'more upstream answers at the floor');
    } finally {
      await load.stop();
    }
    const seen = await samples.stop();
    expect(seen.length).toBeGreaterThan(0);
    expect(Math.min(...seen)).toBeGreaterThanOrEqual(2);
    expect(fleet.upstream.record('floor').max).toBeLessThanOrEqual(6);
  }, 60_000);

  it('the ceiling: K above the max keeps the limit at ≤ max_concurrency, and the upstream reaches the max and no more', async () => {
    const { cap } = fleet.capacity('ceiling', 20);
    const samples = sampleLimit('ceiling');
    const load = fleet.load('ceiling', 6);
    try {
      await nextEvents(cap, 100, '100 upstream answers');
      await until(() => fleet.upstream.record('ceiling').max >= 4, 'the upstream reaching the max', WAIT);
    } finally {
      await load.stop();
    }
    const seen = await samples.stop();
    expect(seen.length).toBeGreaterThan(0);
    expect(Math.max(...seen)).toBeLessThanOrEqual(4);
    expect(fleet.upstream.record('ceiling').max).toBe(4);
    expect(cap.events.every((e) => e.kind === 'served')).toBe(true);
  }, 60_000);
});
