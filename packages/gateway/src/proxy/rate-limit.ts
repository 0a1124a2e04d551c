/**
 * Whether an upstream error answer starts a cooldown on its channel, and for how long. Pure functions of the answer,
 * the settings and the clock, so every header form is unit-tested without a server.
 */
import type { UpstreamSignal } from 'slotgate';
import type { GatewayConfig } from '../config-schema.js';
import type { GatewaySettings } from '../settings.js';
import type { UpstreamResponse } from '../upstream.js';

type Headers = UpstreamResponse['headers'];

/** Cooldowns taken from upstream headers stay within 1 s–1 h, whatever the upstream says. */
const MIN_SECONDS = 1;
const MAX_SECONDS = 3600;

const clamp = (seconds: number) => Math.min(MAX_SECONDS, Math.max(MIN_SECONDS, Math.ceil(seconds)));

/** OpenAI's reset durations: a bare number of seconds, or units like "6m0s", "1s", "250ms", "1h2m3.5s". */
export function parseDuration(text: string): number | undefined {
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  let total = 0;
  let matched = false;
  for (const m of text.matchAll(/(\d+(?:\.\d+)?)(ms|h|m|s)/g)) {
    matched = true;
    const n = Number(m[1]);
    total += m[2] === 'h' ? n * 3600 : m[2] === 'm' ? n * 60 : m[2] === 's' ? n : n / 1000;
  }
  return matched ? total : undefined;
}

/**
 * Cooldown seconds from the first header that gives one: Retry-After, retry-after-ms, OpenAI's x-ratelimit-reset-*,
 * then Anthropic's anthropic-ratelimit-*-reset; undefined when none says anything usable.
 */
export function cooldownFromHeaders(headers: Headers, now = Date.now()): number | undefined {
  const first = (name: string) => {
    const v = headers[name];
    return Array.isArray(v) ? v[0] : v;
  };
  const retryAfter = first('retry-after');
  if (retryAfter) {
    const seconds = Number(retryAfter);
    if (Number.isFinite(seconds)) return clamp(seconds);
    const date = Date.parse(retryAfter);
    if (Number.isFinite(date)) return clamp((date - now) / 1000);
  }
  const retryAfterMs = Number(first('retry-after-ms'));
  if (Number.isFinite(retryAfterMs) && retryAfterMs > 0) return clamp(retryAfterMs / 1000);
  for (const name of ['x-ratelimit-reset-requests', 'x-ratelimit-reset-tokens', 'x-ratelimit-reset']) {
    const v = first(name);
    const seconds = v ? parseDuration(v) : undefined;
    if (seconds !== undefined) return clamp(seconds);
  }
  for (const name of ['anthropic-ratelimit-requests-reset', 'anthropic-ratelimit-tokens-reset']) {
    const v = first(name);
    const date = v ? Date.parse(v) : NaN;
    if (Number.isFinite(date)) return clamp((date - now) / 1000);
  }
  return undefined;
}

/** An upstream error answer, its body decoded. */
export interface ErrorAnswer {
  status: number;
  headers: Headers;
  text: string;
}

export type CooldownSettings = Pick<
  GatewaySettings,
  'cooldown_enabled' | 'cooldown_on_status_429' | 'cooldown_on_message_match' | 'cooldown_seconds'
>;

/** What an error answer means for its channel: `quota` (a 429 about quota or balance) is not cured by waiting. */
export type CooldownDecision =
  | { kind: 'none' }
  | { kind: 'quota' }
  | { kind: 'cooldown'; seconds: number; reason: string; cause: 'upstream_429' | 'rate_limit_message' };

const matches = (text: string, patterns: readonly string[]) => {
  const lower = text.toLowerCase();
  return patterns.some((p) => lower.includes(p.toLowerCase()));
};

export function cooldownDecision(
  answer: ErrorAnswer,
  settings: CooldownSettings,
  patterns: GatewayConfig['retry'],
  now = Date.now(),
): CooldownDecision {
  if (!settings.cooldown_enabled) return { kind: 'none' };
  let reason: string | undefined;
  let cause: 'upstream_429' | 'rate_limit_message' = 'upstream_429';
  if (answer.status === 429) {
    if (matches(answer.text, patterns.quota_patterns)) return { kind: 'quota' };
    if (settings.cooldown_on_status_429) reason = 'upstream 429';
  }
  if (!reason && settings.cooldown_on_message_match && matches(answer.text, patterns.rate_limit_patterns)) {
    reason = `upstream ${answer.status} with rate-limit wording`;
    cause = 'rate_limit_message';
  }
  if (!reason) return { kind: 'none' };
  return {
    kind: 'cooldown',
    seconds: cooldownFromHeaders(answer.headers, now) ?? settings.cooldown_seconds,
    reason,
    cause,
  };
}

/**
 * What an upstream answer says of its channel's capacity, for an adaptive limit (docs/admission.md, "Adaptive
 * limits"): a 429 (not about quota), a 529, or a 503 saying "overloaded" is an overload; so is a success whose
 * `x-ratelimit-remaining-requests` or `anthropic-ratelimit-requests-remaining` is 0 (the next request would be
 * refused). Any other success reports its time to first byte; any other error, nothing.
 */
export function capacitySignal(
  answer: { status: number; headers: Headers; text?: string },
  firstByteMs: number,
  patterns: GatewayConfig['retry'],
): UpstreamSignal | undefined {
  const { status, headers, text = '' } = answer;
  if (status < 400) {
    for (const name of ['x-ratelimit-remaining-requests', 'anthropic-ratelimit-requests-remaining']) {
      const v = headers[name];
      const remaining = Array.isArray(v) ? v[0] : v;
      if (remaining !== undefined && remaining.trim() !== '' && Number(remaining) === 0) return OVERLOADED;
    }
    return { kind: 'ok', firstByteMs };
  }
  if (status === 429) return matches(text, patterns.quota_patterns) ? undefined : OVERLOADED;
  if (status === 529 || (status === 503 && /overload/i.test(text))) return OVERLOADED;
  return undefined;
}

const OVERLOADED: UpstreamSignal = { kind: 'overloaded' };
