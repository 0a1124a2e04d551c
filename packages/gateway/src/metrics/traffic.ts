/**
 * The gateway's traffic: its responses by source and status; per channel its upstream calls, retries and cooldowns.
 * Labels are channel ids, reasons and status codes: a bounded set, never tokens.
 */
import { Counter, Histogram, Registry } from 'prom-client';

/** Upstream time to first byte: an LLM's first token comes after 50 ms to 30 s (a long prompt, a busy provider). */
const TTFB_BUCKETS = [0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60];
/** Whole upstream calls: an embedding in tens of ms, a long streamed answer in minutes. */
const UPSTREAM_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600];

/** An upstream answer's status class; `error` when the call got no answer (unreachable, time-out, broken). */
export type StatusClass = '2xx' | '3xx' | '4xx' | '5xx' | 'error';
/** Why the proxy tried another channel after an upstream call. */
export type RetryReason = 'upstream_429' | 'upstream_5xx' | 'unreachable';
/** What started a cooldown: an upstream 429, an error answer with rate-limit wording, or the admin API. */
export type CooldownReason = 'upstream_429' | 'rate_limit_message' | 'admin';

export function statusClass(status: number | 'error'): StatusClass {
  if (status === 'error' || status < 200 || status > 599) return 'error';
  return `${Math.floor(status / 100)}xx` as StatusClass;
}

/** What the proxy reports about its upstream calls. */
export interface UpstreamMetrics {
  /** An upstream call's answer (its headers arrived) or its failure, with the time to first byte when answered. */
  upstreamAnswered(channel: string, status: number | 'error', ttfbSeconds?: number): void;
  /** An upstream answer's body has ended, `seconds` after the call started. */
  upstreamEnded(channel: string, seconds: number): void;
  retried(channel: string, reason: RetryReason): void;
  cooldownStarted(channel: string, reason: CooldownReason): void;
}

/** Counted by the gateway as requests go, in a registry of their own. */
export class TrafficMetrics implements UpstreamMetrics {
  readonly registry = new Registry();
  private readonly responses = new Counter({
    name: 'slotgate_responses_total',
    help: "Client API responses by source (gateway = slotgate's own answer, upstream = passed on) and status code",
    labelNames: ['source', 'code'],
    registers: [this.registry],
  });
  private readonly upstreamResponses = new Counter({
    name: 'slotgate_upstream_responses_total',
    help: 'Upstream calls by channel and status class of their answer (error: no answer; each retry counts)',
    labelNames: ['channel', 'class'],
    registers: [this.registry],
  });
  private readonly upstreamTtfbSeconds = new Histogram({
    name: 'slotgate_upstream_ttfb_seconds',
    help: "Upstream time to first byte: from the call's start until the status line and headers arrived",
    labelNames: ['channel'],
    buckets: TTFB_BUCKETS,
    registers: [this.registry],
  });
  private readonly upstreamSeconds = new Histogram({
    name: 'slotgate_upstream_duration_seconds',
    help: "Upstream call duration: from the call's start until the answer's body ended (calls that completed)",
    labelNames: ['channel'],
    buckets: UPSTREAM_BUCKETS,
    registers: [this.registry],
  });
  private readonly upstreamRetries = new Counter({
    name: 'slotgate_upstream_retries_total',
    help: 'Requests retried on another channel, by the channel that failed and why',
    labelNames: ['channel', 'reason'],
    registers: [this.registry],
  });
  private readonly cooldowns = new Counter({
    name: 'slotgate_cooldowns_total',
    help: 'Cooldowns this instance started, by channel and cause (upstream_429, rate_limit_message, admin)',
    labelNames: ['channel', 'reason'],
    registers: [this.registry],
  });
  /** Upstream 429 answers by channel, for the dashboard's history (the status classes above lump them with 4xx). */
  private readonly tooMany = new Map<string, number>();

  countResponse(source: 'gateway' | 'upstream', status: number): void {
    this.responses.inc({ source, code: String(status) });
  }

  upstreamAnswered(channel: string, status: number | 'error', ttfbSeconds?: number): void {
    this.upstreamResponses.inc({ channel, class: statusClass(status) });
    if (status === 429) this.tooMany.set(channel, (this.tooMany.get(channel) ?? 0) + 1);
    if (ttfbSeconds !== undefined) this.upstreamTtfbSeconds.observe({ channel }, ttfbSeconds);
  }

  /** The channel's upstream 429 answers since start. */
  upstream429s(channel: string): number {
    return this.tooMany.get(channel) ?? 0;
  }

  upstreamEnded(channel: string, seconds: number): void {
    this.upstreamSeconds.observe({ channel }, seconds);
  }

  retried(channel: string, reason: RetryReason): void {
    this.upstreamRetries.inc({ channel, reason });
  }

  cooldownStarted(channel: string, reason: CooldownReason): void {
    this.cooldowns.inc({ channel, reason });
  }
}
