/**
 * Turning adaptive limits off and losing them, on real processes: two `slotgate serve` children on a private Redis,
 * one channel of max 8 whose upstream (hidden capacity K = 2, 429 past it) teaches the fleet a limit of 2–3. Then the
 * upstream holds every request at a gate, so what it has in flight is what the gateways admitted: the rollback
 * switch (`adaptive_enabled: false`) and a reload without the `adaptive:` block give the channel its max again, and
 * the switch stops every report; an empty Redis restart starts the limit again from the max, and it is learned anew.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { AdaptiveFleet, type FleetChannel } from '../helpers/adaptive-fleet.js';
import { until } from '../helpers/until.js';

const WAIT = { timeoutMs: 20_000, intervalMs: 50 };
const MAX = 8;
/** Latency ignored: the upstream's 429s alone move the limit. */
const CHANNEL: FleetChannel = { id: 'ch', max_concurrency: MAX, adaptive: { latency_tolerance: 0 } };

let fleet: AdaptiveFleet | undefined;
afterEach(async () => {
  await fleet?.close();
  fleet = undefined;
});

/** A fleet whose limit on `ch` has learned K = 2 (at most 3), with nothing in flight. */
async function learnedFleet(): Promise<AdaptiveFleet> {
  fleet = await AdaptiveFleet.start([CHANNEL]);
  await learnLow(fleet);
  return fleet;
}

async function learnLow(f: AdaptiveFleet): Promise<void> {
  f.capacity('ch', 2);
  const load = f.load('ch', 8);
  try {
    await until(async () => ((await f.limit('ch')) ?? MAX) < 4, 'the limit learning K = 2', WAIT);
  } finally {
    await load.stop();
  }
  await until(
    async () => (await f.fleetLoad('ch')).active === 0 && f.upstream.record('ch').current === 0,
    'nothing in flight',
    WAIT,
  );
}

const inFlight = (f: AdaptiveFleet) => f.upstream.record('ch').current;

/** 12 requests held at the upstream; resolves once each is in flight or waiting in the fleet. */
async function twelveHeld(f: AdaptiveFleet) {
  // a 429 the limit did not take (switched off, or at its floor) cools the channel down for its Retry-After
  await until(async () => !(await f.fleetLoad('ch')).cooling, 'the channel not cooling down', WAIT);
  const held = f.hold('ch');
  const answers = f.askMany('ch', 12);
  await until(
    async () => {
      const { active, waiting } = await f.fleetLoad('ch');
      if (active + waiting === 12 && inFlight(f) === active) return true;
      throw new Error(`${active} active, ${waiting} waiting, ${inFlight(f)} at the upstream`);
    },
    '12 requests admitted or waiting',
    WAIT,
  );
  return {
    finish: async () => {
      held.open();
      expect(await answers).toEqual(Array(12).fill(200));
    },
  };
}

/** Both gateways report `ch` in /admin/status (`on`), or neither does. */
async function switchInForce(f: AdaptiveFleet, on: boolean): Promise<void> {
  await until(
    async () => {
      const all = await Promise.all(f.gateways.map((_, i) => f.statusLimits(i)));
      return all.every((limits) => limits.some((l) => l.channel === 'ch') === on);
    },
    `adaptive limits ${on ? 'on' : 'off'} on both gateways`,
    WAIT,
  );
}

describe('adaptive limits switched off, reloaded away and lost', () => {
  it('the rollback switch: adaptive_enabled false on one gateway gives both the max and stops the reports; true brings the limit back', async () => {
    const f = await learnedFleet();
    const put = await f.admin(0, 'PUT', '/admin/settings', { adaptive_enabled: false });
    expect(put.status).toBe(200);
    await switchInForce(f, false);
    const stored = await f.limitHash('ch');
    expect(Number(stored.l)).toBeLessThan(4);

    const held = await twelveHeld(f);
    expect(inFlight(f)).toBe(MAX);
    await held.finish();
    // refusals past K and successes at full use: none of it is reported
    const { cap } = f.capacity('ch', 2);
    const load = f.load('ch', 8);
    try {
      await until(() => cap.events.filter((e) => e.kind === 'refused').length >= 30, '30 refusals', WAIT);
    } finally {
      await load.stop();
    }
    expect(await f.limitHash('ch')).toEqual(stored);

    expect((await f.admin(1, 'PUT', '/admin/settings', { adaptive_enabled: true })).status).toBe(200);
    await switchInForce(f, true);
    const again = await twelveHeld(f);
    expect(inFlight(f)).toBe(Math.floor(Number(stored.l)));
    await again.finish();
    f.capacity('ch', 2);
    const reporting = f.load('ch', 8);
    try {
      await until(
        async () => JSON.stringify(await f.limitHash('ch')) !== JSON.stringify(stored),
        'a report changing the limit again',
        WAIT,
      );
    } finally {
      await reporting.stop();
    }
    expect(f.upstream.record('ch').max).toBeLessThanOrEqual(MAX);
  }, 60_000);

  it('a reload without the adaptive block gives the max at once to the requests waiting and to new ones', async () => {
    const f = await learnedFleet();
    const learned = Math.floor((await f.limit('ch'))!);
    const held = await twelveHeld(f);
    expect(inFlight(f)).toBe(learned);

    const { adaptive: _off, ...plain } = CHANNEL;
    await f.reconfigure([plain]);
    // nothing was answered and no safety poll comes: the waiters moved to the channel without a limit, and the move
    // granted them the slots free under its max
    await until(() => inFlight(f) === MAX, 'the waiters admitted up to the max', WAIT);
    await held.finish();

    const fresh = await twelveHeld(f);
    expect(inFlight(f)).toBe(MAX);
    await fresh.finish();
    expect(f.upstream.record('ch').max).toBe(MAX);
  }, 60_000);

  it('an empty Redis restart: the limit starts again from the max, the upstream never sees more, and K is learned anew', async () => {
    const f = await learnedFleet();
    await f.redis.restart();
    expect(await f.limit('ch')).toBeUndefined();
    await until(
      async () => {
        const all = await Promise.all(f.gateways.map((_, i) => f.statusLimits(i)));
        return all.every((limits) => limits.find((l) => l.channel === 'ch')?.limit === MAX);
      },
      'both gateways reading the limit as the max',
      WAIT,
    );
    const held = await twelveHeld(f);
    expect(inFlight(f)).toBe(MAX);
    await held.finish();

    await learnLow(f);
    expect(f.upstream.record('ch').max).toBeLessThanOrEqual(MAX);
  }, 60_000);
});
