/**
 * The official openai SDK's automatic retries against a full channel (issue 34, item 5): one channel of max 1 with a
 * queue of 4 and a 400 ms wait, on a fake upstream that holds each call 200 ms, and 20 concurrent calls with the SDK's
 * default 2 retries. Every slotgate 429 carries its own jittered retry-after-ms, the SDK waits at least that long, the
 * retries spread out instead of coming back in one instant, and at least as many calls succeed as with the old fixed
 * `Retry-After: 1` (8). Orderings and shares only: no wall-clock windows on a busy machine.
 */
import { beforeEach, describe, expect, it } from 'vitest';
import { runSdkBurst, summarize } from '../../bench/sdk-burst.js';
import { FakeUpstream } from '../helpers/fake-upstream.js';
import { SECRETS, configDoc, expectNoSecretsLogged, startGateway } from '../helpers/gateway.js';
import { useCleanups } from '../helpers/cleanups.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

let up: FakeUpstream;
beforeEach(async () => {
  up = await FakeUpstream.start({ keepRequests: false });
  cleanups.push(() => up.close());
});

const completion = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1,
  model: 'gpt-x',
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
};

describe('SDK retries against a full channel', () => {
  it('20 concurrent calls, default retries: jittered retry-after-ms, retries spread out, at least 8 succeed', async () => {
    up.on('one', { delayMs: 200, json: completion });
    const gw = await startGateway(
      configDoc({
        channels: [
          {
            id: 'one',
            type: 'openai',
            base_url: up.url('one'),
            key: SECRETS.channelKey,
            models: ['gpt-x'],
            max_concurrency: 1,
            max_waiting: 4,
          },
        ],
        settings: { wait_timeout_ms: 400 },
      }),
    );
    cleanups.push(() => gw.close());

    const result = await runSdkBurst({
      baseURL: `${gw.url}/v1`,
      apiKey: SECRETS.clientToken,
      model: 'gpt-x',
      calls: 20,
    });
    const summary = summarize(result);
    const rejected = result.attempts.filter((a) => a.status === 429);

    // the burst overflowed the queue, and the slot was never shared
    expect(rejected.length).toBeGreaterThan(0);
    expect(up.record('one').max).toBe(1);
    // every 429 says when: whole ms within the bounds, Retry-After its seconds rounded up
    for (const a of rejected) {
      expect(a.retryAfterMs).toMatch(/^\d+$/);
      const ms = Number(a.retryAfterMs);
      expect(ms).toBeGreaterThanOrEqual(100);
      expect(ms).toBeLessThanOrEqual(30_000);
      expect(a.retryAfter).toBe(String(Math.max(1, Math.ceil(ms / 1000))));
    }
    // jittered: the 429s do not all say the same (nearly all differ)
    expect(summary.distinctRetryAfterMs).toBeGreaterThan(rejected.length / 2);
    // the SDK honours retry-after-ms: each retry goes out no sooner than its 429 said (timers may fire 1 ms early)
    for (let call = 0; call < 20; call++) {
      const tries = result.attempts.filter((a) => a.call === call).sort((a, b) => a.try - b.try);
      for (let i = 1; i < tries.length; i++) {
        const before = tries[i - 1]!;
        expect(before.status).toBe(429);
        expect(tries[i]!.sentAt - before.answeredAt).toBeGreaterThanOrEqual(Number(before.retryAfterMs) - 2);
      }
    }
    // spread out: no 100 ms window holds more than a third of the retries
    expect(summary.retries).toBeGreaterThan(0);
    expect(summary.maxShareIn100ms).toBeLessThanOrEqual(1 / 3);
    // at least as many calls succeed as with the fixed Retry-After: 1 (8 of 20 in issue 34)
    expect(summary.succeeded).toBeGreaterThanOrEqual(8);
    expect(result.attempts.filter((a) => a.status === 200)).toHaveLength(summary.succeeded);
  }, 60_000);
});
