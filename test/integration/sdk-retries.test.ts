/**
 * The official openai SDK's automatic retries against a full channel (issue 34, item 5): one channel of max 1 with a
 * queue of 4 and a 400 ms wait, on a fake upstream that holds each call 200 ms, and 20 concurrent calls with the SDK's
 * default 2 retries. Every slotgate 429 carries its own jittered retry-after-ms, the SDK waits at least that long, the
 * retries spread out instead of coming back in one instant, and at least as many calls succeed as with the old fixed
 * `Retry-After: 1` (8). The Anthropic SDK waits what retry-after-ms says as well. Orderings and shares only: no
 * wall-clock windows on a busy machine.
 */
import { performance } from 'node:perf_hooks';
import Anthropic from '@anthropic-ai/sdk';
import { beforeEach, describe, expect, it } from 'vitest';
import { runSdkBurst, summarize } from '../../bench/sdk-burst.js';
import { FakeUpstream } from '../helpers/fake-upstream.js';
import { SECRETS, configDoc, expectNoSecretsLogged, startGateway } from '../helpers/gateway.js';
import { useCleanups } from '../helpers/cleanups.js';
import { CHAT_COMPLETION } from '../helpers/sdk.js';

const cleanups = useCleanups();
expectNoSecretsLogged();

let up: FakeUpstream;
beforeEach(async () => {
  up = await FakeUpstream.start({ keepRequests: false });
  cleanups.push(() => up.close());
});

describe('SDK retries against a full channel', () => {
  it('20 concurrent calls, default retries: jittered retry-after-ms, retries spread out, at least 8 succeed', async () => {
    up.on('one', { delayMs: 200, json: CHAT_COMPLETION });
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

  it('the Anthropic SDK honours retry-after-ms too: its retry waits at least what the 429 said', async () => {
    up.on('an', {
      delayMs: 200,
      json: {
        id: 'msg_1',
        type: 'message',
        role: 'assistant',
        model: 'claude-x',
        content: [{ type: 'text', text: 'ok' }],
        stop_reason: 'end_turn',
        stop_sequence: null,
        usage: { input_tokens: 1, output_tokens: 1 },
      },
    });
    const gw = await startGateway(
      configDoc({
        channels: [
          {
            id: 'an',
            type: 'anthropic',
            base_url: up.url('an'),
            key: SECRETS.anthropicKey,
            models: ['claude-x'],
            max_concurrency: 1,
            max_waiting: 1,
          },
        ],
        settings: { wait_timeout_ms: 400 },
      }),
    );
    cleanups.push(() => gw.close());
    const seen: { call: number; sentAt: number; answeredAt: number; status: number; ms: number }[] = [];
    const client = (call: number) =>
      new Anthropic({
        baseURL: gw.url,
        apiKey: SECRETS.clientToken,
        maxRetries: 1,
        fetch: async (input, init) => {
          const sentAt = performance.now();
          const res = await fetch(input, init);
          const ms = Number(res.headers.get('retry-after-ms'));
          seen.push({ call, sentAt, answeredAt: performance.now(), status: res.status, ms });
          return res;
        },
      });
    const calls = [0, 1, 2, 3].map((i) =>
      client(i).messages.create({
        model: 'claude-x',
        max_tokens: 8,
        messages: [{ role: 'user', content: 'hi' }],
      }),
    );
    await Promise.allSettled(calls);
    const refused = seen.filter((a) => a.status === 429);
    expect(refused.length).toBeGreaterThan(0);
    for (const first of refused) {
      expect(first.ms).toBeGreaterThanOrEqual(100);
      const retry = seen.find((a) => a.call === first.call && a.sentAt > first.sentAt);
      if (retry) expect(retry.sentAt - first.answeredAt).toBeGreaterThanOrEqual(first.ms - 2);
    }
    // at least one call was retried after a 429
    expect(refused.some((r) => seen.some((a) => a.call === r.call && a.sentAt > r.sentAt))).toBe(true);
  }, 60_000);
});
