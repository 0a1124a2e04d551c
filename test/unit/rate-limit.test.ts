/**
 * How long an upstream's rate-limit answer cools its channel down: every header form the gateway reads, the 1–3600 s
 * bound, junk and repeated headers, which header wins when several are present, and when an error answer starts a
 * cooldown at all; and what an answer reports to an adaptive limit (capacitySignal). `now` is fixed, so no case
 * depends on the wall clock.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../packages/gateway/src/config.js';
import {
  capacitySignal,
  cooldownDecision,
  cooldownFromHeaders,
  parseDuration,
  type CooldownSettings,
} from '../../packages/gateway/src/proxy/rate-limit.js';
import { gatewaySettings } from '../../packages/gateway/src/settings.js';

const NOW = Date.parse('2025-03-14T12:00:00.000Z');
/** An RFC 3339 time `seconds` from NOW. */
const at = (seconds: number) => new Date(NOW + seconds * 1000).toISOString();
/** An HTTP date (IMF-fixdate) `seconds` from NOW. */
const httpDate = (seconds: number) => new Date(NOW + seconds * 1000).toUTCString();
const cooldown = (headers: Record<string, string | string[] | undefined>) =>
  cooldownFromHeaders(headers, NOW);

describe('parseDuration', () => {
  it.each([
    ['6m0s', 360],
    ['1s', 1],
    ['250ms', 0.25],
    ['1h2m3.5s', 3723.5],
    ['2m30s', 150],
    ['20', 20],
    ['1.5', 1.5],
  ])('%s is %s s', (text, seconds) => {
    expect(parseDuration(text)).toBe(seconds);
  });

  it.each(['', 'soon', 'ms', '-'])('%j is not a duration', (text) => {
    expect(parseDuration(text)).toBeUndefined();
  });
});

describe('cooldownFromHeaders', () => {
  it('reads Retry-After in seconds, rounded up', () => {
    expect(cooldown({ 'retry-after': '30' })).toBe(30);
    expect(cooldown({ 'retry-after': '2.5' })).toBe(3);
  });

  it('reads Retry-After as an HTTP date, relative to now', () => {
    expect(cooldown({ 'retry-after': httpDate(45) })).toBe(45);
    expect(cooldownFromHeaders({ 'retry-after': httpDate(45) }, NOW + 40_000)).toBe(5);
  });

  it('reads retry-after-ms', () => {
    expect(cooldown({ 'retry-after-ms': '1500' })).toBe(2);
    expect(cooldown({ 'retry-after-ms': '12000' })).toBe(12);
  });

  it.each([
    ['x-ratelimit-reset-requests', '6m0s', 360],
    ['x-ratelimit-reset-requests', '1s', 1],
    ['x-ratelimit-reset-tokens', '250ms', 1],
    ['x-ratelimit-reset-tokens', '1m2.5s', 63],
    ['x-ratelimit-reset', '17', 17],
  ])('reads OpenAI %s: %s', (name, value, seconds) => {
    expect(cooldown({ [name]: value })).toBe(seconds);
  });

  it.each(['anthropic-ratelimit-requests-reset', 'anthropic-ratelimit-tokens-reset'])(
    'reads Anthropic %s as an RFC 3339 time',
    (name) => {
      expect(cooldown({ [name]: at(42) })).toBe(42);
      expect(cooldown({ [name]: '2025-03-14T12:01:30Z' })).toBe(90);
    },
  );

  it('clamps to at least 1 s: zero, negative, sub-second and past values', () => {
    expect(cooldown({ 'retry-after': '0' })).toBe(1);
    expect(cooldown({ 'retry-after': '-10' })).toBe(1);
    expect(cooldown({ 'retry-after': '0.2' })).toBe(1);
    expect(cooldown({ 'retry-after': httpDate(-60) })).toBe(1);
    expect(cooldown({ 'retry-after-ms': '1' })).toBe(1);
    expect(cooldown({ 'x-ratelimit-reset-requests': '0s' })).toBe(1);
    expect(cooldown({ 'anthropic-ratelimit-requests-reset': at(-5) })).toBe(1);
  });

  it('clamps to at most 3600 s', () => {
    expect(cooldown({ 'retry-after': '86400' })).toBe(3600);
    expect(cooldown({ 'retry-after': httpDate(7200) })).toBe(3600);
    expect(cooldown({ 'retry-after-ms': '5000000' })).toBe(3600);
    expect(cooldown({ 'x-ratelimit-reset-requests': '1h2m3.5s' })).toBe(3600);
    expect(cooldown({ 'anthropic-ratelimit-tokens-reset': at(3 * 3600) })).toBe(3600);
  });

  it('gives nothing without a usable header', () => {
    expect(cooldown({})).toBeUndefined();
    expect(cooldown({ 'content-type': 'application/json', 'retry-after': undefined })).toBeUndefined();
    expect(cooldown({ 'retry-after': '' })).toBeUndefined();
    expect(cooldown({ 'retry-after': 'soon' })).toBeUndefined();
    expect(cooldown({ 'retry-after-ms': 'abc' })).toBeUndefined();
    expect(cooldown({ 'retry-after-ms': '0' })).toBeUndefined();
    expect(cooldown({ 'retry-after-ms': '-300' })).toBeUndefined();
    expect(cooldown({ 'x-ratelimit-reset-requests': 'later' })).toBeUndefined();
    expect(cooldown({ 'anthropic-ratelimit-requests-reset': 'not a time' })).toBeUndefined();
  });

  it('skips a junk header and reads the next one', () => {
    expect(cooldown({ 'retry-after': 'soon', 'retry-after-ms': '3000' })).toBe(3);
    expect(cooldown({ 'retry-after-ms': 'abc', 'x-ratelimit-reset-tokens': '4s' })).toBe(4);
    expect(cooldown({ 'x-ratelimit-reset-requests': 'later', 'x-ratelimit-reset-tokens': '5s' })).toBe(5);
    expect(
      cooldown({ 'anthropic-ratelimit-requests-reset': 'never', 'anthropic-ratelimit-tokens-reset': at(6) }),
    ).toBe(6);
  });

  it('reads the first of repeated header values', () => {
    expect(cooldown({ 'retry-after': ['7', '99'] })).toBe(7);
    expect(cooldown({ 'retry-after-ms': ['2000', '9000'] })).toBe(2);
    expect(cooldown({ 'x-ratelimit-reset-requests': ['3s', '1m'] })).toBe(3);
    expect(cooldown({ 'anthropic-ratelimit-requests-reset': [at(8), at(80)] })).toBe(8);
    expect(cooldown({ 'retry-after': [] })).toBeUndefined();
  });

  it('prefers Retry-After, then retry-after-ms, then OpenAI, then Anthropic headers', () => {
    const all = {
      'retry-after': '11',
      'retry-after-ms': '22000',
      'x-ratelimit-reset-requests': '33s',
      'x-ratelimit-reset-tokens': '44s',
      'x-ratelimit-reset': '55',
      'anthropic-ratelimit-requests-reset': at(66),
      'anthropic-ratelimit-tokens-reset': at(77),
    };
    const without = (...names: string[]) =>
      Object.fromEntries(Object.entries(all).filter(([name]) => !names.includes(name)));
    expect(cooldown(all)).toBe(11);
    expect(cooldown(without('retry-after'))).toBe(22);
    expect(cooldown(without('retry-after', 'retry-after-ms'))).toBe(33);
    expect(cooldown(without('retry-after', 'retry-after-ms', 'x-ratelimit-reset-requests'))).toBe(44);
    const openai = ['x-ratelimit-reset-requests', 'x-ratelimit-reset-tokens'];
    expect(cooldown(without('retry-after', 'retry-after-ms', ...openai))).toBe(55);
    expect(cooldown(without('retry-after', 'retry-after-ms', ...openai, 'x-ratelimit-reset'))).toBe(66);
    expect(
      cooldown(
        without(
          'retry-after',
          'retry-after-ms',
          ...openai,
          'x-ratelimit-reset',
          'anthropic-ratelimit-requests-reset',
        ),
      ),
    ).toBe(77);
  });
});

describe('cooldownDecision', () => {
  const patterns = parseConfig({}, 'test').retry;
  const defaults: CooldownSettings = gatewaySettings.defaults;
  const decide = (
    status: number,
    text: string,
    settings: Partial<CooldownSettings> = {},
    headers: Record<string, string> = {},
  ) => cooldownDecision({ status, headers, text }, { ...defaults, ...settings }, patterns, NOW);

  it('a 429 cools the channel for the header time, else cooldown_seconds', () => {
    expect(decide(429, '{"error":"slow down"}', {}, { 'retry-after': '12' })).toEqual({
      kind: 'cooldown',
      seconds: 12,
      reason: 'upstream 429',
      cause: 'upstream_429',
    });
    expect(decide(429, '', { cooldown_seconds: 45 })).toEqual({
      kind: 'cooldown',
      seconds: 45,
      reason: 'upstream 429',
      cause: 'upstream_429',
    });
  });

  it('a 429 about quota or balance starts no cooldown, whatever the settings', () => {
    expect(decide(429, 'You exceeded your current QUOTA')).toEqual({ kind: 'quota' });
    expect(
      decide(429, '{"error":{"code":"insufficient_quota"}}', { cooldown_on_message_match: true }),
    ).toEqual({ kind: 'quota' });
  });

  it('cooldown_on_status_429 off: a 429 cools only with rate-limit wording and message matching on', () => {
    expect(decide(429, 'Rate limit reached', { cooldown_on_status_429: false })).toEqual({ kind: 'none' });
    expect(
      decide(429, 'Rate limit reached', { cooldown_on_status_429: false, cooldown_on_message_match: true }),
    ).toMatchObject({
      kind: 'cooldown',
      reason: 'upstream 429 with rate-limit wording',
      cause: 'rate_limit_message',
    });
  });

  it('another status cools only with rate-limit wording and message matching on', () => {
    expect(decide(529, '{"type":"overloaded_error"}')).toEqual({ kind: 'none' });
    expect(
      decide(529, '{"type":"Overloaded_error"}', { cooldown_on_message_match: true }, { 'retry-after': '3' }),
    ).toEqual({
      kind: 'cooldown',
      seconds: 3,
      reason: 'upstream 529 with rate-limit wording',
      cause: 'rate_limit_message',
    });
    expect(decide(500, 'internal error', { cooldown_on_message_match: true })).toEqual({ kind: 'none' });
  });

  it('cooldown_enabled off: nothing starts a cooldown', () => {
    expect(decide(429, 'Rate limit reached', { cooldown_enabled: false })).toEqual({ kind: 'none' });
    expect(decide(429, 'insufficient_quota', { cooldown_enabled: false })).toEqual({ kind: 'none' });
  });
});

describe('capacitySignal', () => {
  const patterns = parseConfig({}, 'test').retry;
  const signal = (status: number, text = '', headers: Record<string, string | string[]> = {}) =>
    capacitySignal({ status, headers, text }, 120, patterns);
  const OVERLOADED = { kind: 'overloaded' };

  it('a success reports its time to first byte', () => {
    expect(signal(200)).toEqual({ kind: 'ok', firstByteMs: 120 });
    expect(signal(201, '', { 'x-ratelimit-remaining-requests': '5' })).toEqual({
      kind: 'ok',
      firstByteMs: 120,
    });
    expect(signal(200, '', { 'anthropic-ratelimit-requests-remaining': '1' })).toEqual({
      kind: 'ok',
      firstByteMs: 120,
    });
  });

  it('a success with no request left (either header at 0) is an overload; an empty or junk header is not', () => {
    expect(signal(200, '', { 'x-ratelimit-remaining-requests': '0' })).toEqual(OVERLOADED);
    expect(signal(200, '', { 'anthropic-ratelimit-requests-remaining': '0' })).toEqual(OVERLOADED);
    expect(signal(200, '', { 'x-ratelimit-remaining-requests': ['0', '7'] })).toEqual(OVERLOADED);
    expect(signal(200, '', { 'x-ratelimit-remaining-requests': '' })).toEqual({
      kind: 'ok',
      firstByteMs: 120,
    });
    expect(signal(200, '', { 'x-ratelimit-remaining-requests': 'none' })).toEqual({
      kind: 'ok',
      firstByteMs: 120,
    });
    // tokens running out says nothing about how many requests it takes at once
    expect(signal(200, '', { 'x-ratelimit-remaining-tokens': '0' })).toEqual({
      kind: 'ok',
      firstByteMs: 120,
    });
  });

  it('a 429 is an overload, unless its body speaks of quota or balance', () => {
    expect(signal(429, '{"error":{"message":"too many requests"}}')).toEqual(OVERLOADED);
    expect(signal(429, '')).toEqual(OVERLOADED);
    expect(signal(429, '{"error":{"code":"insufficient_quota"}}')).toBeUndefined();
    expect(signal(429, 'Your credit BALANCE is too low')).toBeUndefined();
  });

  it('a 529 is an overload; a 503 only when its body says overloaded', () => {
    expect(signal(529, '')).toEqual(OVERLOADED);
    expect(signal(503, '{"type":"error","error":{"type":"overloaded_error"}}')).toEqual(OVERLOADED);
    expect(signal(503, 'Server Overloaded')).toEqual(OVERLOADED);
    expect(signal(503, 'service unavailable')).toBeUndefined();
  });

  it('any other error reports nothing', () => {
    for (const status of [400, 401, 404, 500, 502, 504]) expect(signal(status, 'overloaded')).toBeUndefined();
  });
});
