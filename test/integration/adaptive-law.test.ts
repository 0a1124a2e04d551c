/**
 * The adaptive limit's law has two forms: lua/includes/limit.lua, where Redis keeps the limit, and core/adaptive.ts,
 * where the MemoryStore does. Random report sequences go through both, on a clock the test sets, and every stored
 * field must agree after every report.
 */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  nextLimit,
  type LimitLaw,
  type LimitState,
  type UpstreamSignal,
} from '../../packages/slotgate/src/core/adaptive.js';
import { reportArg } from '../../packages/slotgate/src/store/redis/queues/release-call.js';
import { redisUrl, uniquePrefix } from '../helpers/redis.js';

const LIMIT_LUA = readFileSync(
  new URL('../../packages/slotgate/src/store/redis/lua/includes/limit.lua', import.meta.url),
  'utf8',
);
/** reportLimit on a clock of the test's (ARGV[4]) instead of Redis's. */
const HARNESS = `local function redisNow() return tonumber(ARGV[4]) end
${LIMIT_LUA}
return tostring(reportLimit(KEYS[1], ARGV[1], tonumber(ARGV[2]), function() return ARGV[3] == '1' end))`;

let client: Redis;
beforeAll(() => {
  client = new Redis(redisUrl(), { maxRetriesPerRequest: 1 });
});
afterAll(() => client?.disconnect());

interface Step {
  signal: UpstreamSignal;
  inFlight: number;
  demand: boolean;
  dtMs: number;
  heldMs: number;
}

const step: fc.Arbitrary<Step> = fc.record({
  signal: fc.oneof(
    fc.constant<UpstreamSignal>({ kind: 'overloaded' }),
    fc.constant<UpstreamSignal>({ kind: 'ok' }),
    fc.integer({ min: 20, max: 3000 }).map((ms): UpstreamSignal => ({ kind: 'ok', firstByteMs: ms })),
  ),
  inFlight: fc.integer({ min: 1, max: 40 }),
  demand: fc.boolean(),
  // mostly within a window, now and then across a latency bucket or two
  dtMs: fc.oneof(fc.integer({ min: 0, max: 800 }), fc.integer({ min: 25_000, max: 70_000 })),
  heldMs: fc.integer({ min: 0, max: 3000 }),
});

const law: fc.Arbitrary<LimitLaw> = fc.record({
  floor: fc.integer({ min: 1, max: 6 }),
  ceiling: fc.integer({ min: 1, max: 40 }),
  probeAfter: fc.integer({ min: 1, max: 40 }),
  tolerance: fc.constantFrom(0, 1.5, 2, 3),
});

/** The hash as core/adaptive.ts's state (fields named in includes/limit.lua). */
function stateOf(h: Record<string, string>): LimitState {
  const n = (v: string | undefined) => (v === undefined || v === '' ? undefined : Number(v));
  return {
    limit: Number(h.l),
    windowAt: Number(h.w),
    windowBase: Number(h.wb),
    failedLevel: Number(h.f),
    successes: Number(h.k),
    slowedAt: Number(h.d),
    bucket: Number(h.mb),
    least: n(h.m),
    leastBefore: n(h.mp),
  };
}

describe('the adaptive law in Lua and in TypeScript', () => {
  it('agree field by field after every report of random sequences', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(law, fc.array(step, { minLength: 1, maxLength: 60 }), async (l, steps) => {
        const key = `${uniquePrefix('law')}:${run++}:limit`;
        let now = 1_760_000_000_000;
        let model: LimitState | undefined;
        try {
          for (const s of steps) {
            now += s.dtMs;
            const report = reportArg({ report: { signal: s.signal, law: l, heldMs: s.heldMs } });
            const lua = await client.eval(HARNESS, 1, key, report, s.inFlight, s.demand ? '1' : '0', now);
            model = nextLimit(model, { ...s, now, law: l });
            expect(Number(lua)).toBe(model.limit);
            expect(stateOf(await client.hgetall(key))).toEqual(model);
          }
          expect(await client.pttl(key)).toBeGreaterThan(0);
        } finally {
          await client.del(key);
        }
      }),
      { numRuns: 150 },
    );
  }, 120_000);
});
