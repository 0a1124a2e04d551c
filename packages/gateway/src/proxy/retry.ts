/**
 * The retry chain of one request: which failed attempts go on to another channel, the answer the client gets when
 * none succeeds, and the cooldown an upstream error answer starts on its channel.
 */
import type { FastifyBaseLogger } from 'fastify';
import type { GatewayChannel } from '../channels.js';
import type { GatewayConfig } from '../config-schema.js';
import { HttpError } from '../http-errors.js';
import type { RetryReason } from '../metrics/traffic.js';
import type { GatewaySettings } from '../settings.js';
import type { UpstreamResponse } from '../upstream.js';
import type { ProxyContext } from './context.js';
import { cooldownDecision, cooldownFromHeaders } from './rate-limit.js';

/** An upstream error answer, read whole so it can be inspected and passed on after the retries. */
export interface BufferedAnswer {
  channel: string;
  status: number;
  headers: UpstreamResponse['headers'];
  body: Buffer;
}

export class RetryChain {
  readonly tried = new Set<string>();
  attempts = 0;
  waitedMs = 0;
  /** What the client gets if the chain gives up: set by every failed attempt. */
  last: BufferedAnswer | HttpError | undefined;
  /** Counted once the retry is admitted, so the metric agrees with the access line's `retries`. */
  private pending: { channel: string; reason: RetryReason } | undefined;

  constructor(
    private readonly ctx: ProxyContext,
    private readonly log: FastifyBaseLogger,
    private readonly patterns: GatewayConfig['retry'],
  ) {}

  admitted(channel: string, waitedMs: number): void {
    this.waitedMs += waitedMs;
    this.tried.add(channel);
    this.attempts++;
    if (this.pending) this.ctx.metrics.retried(this.pending.channel, this.pending.reason);
    this.pending = undefined;
  }

  /** No answer: retried while attempts remain. A real answer seen earlier beats slotgate's own 502 (its status goes on). */
  unreachable(channel: string, message: string, settings: GatewaySettings): boolean {
    if (!this.last || this.last instanceof HttpError)
      this.last = new HttpError('upstream_unreachable', `slotgate: ${message}`);
    return this.retry(channel, 'unreachable', this.attempts <= settings.retry_times);
  }

  /**
   * An error answer: it may cool its channel down; a 429 or a 5xx other than 504 is retried, unless the request's
   * signal fired meanwhile (the client left, or the slot was lost).
   */
  async answered(
    channel: GatewayChannel,
    answer: BufferedAnswer,
    settings: GatewaySettings,
    stop: AbortSignal,
  ): Promise<boolean> {
    await this.coolDown(channel, answer, settings);
    this.last = answer;
    const { status } = answer;
    const retryable = status === 429 || (status >= 500 && status !== 504);
    const reason = status === 429 ? 'upstream_429' : 'upstream_5xx';
    return this.retry(
      channel.id,
      reason,
      retryable && this.attempts <= settings.retry_times && !stop.aborted,
    );
  }

  private retry(channel: string, reason: RetryReason, retry: boolean): boolean {
    if (retry) this.pending = { channel, reason };
    return retry;
  }

  /**
   * An adaptive channel whose limit can still shrink takes a short Retry-After (or none) as the overload its release
   * reported, not as a reason to stop using the channel: a cooldown stays for a limit at its floor, and for a
   * Retry-After longer than `adaptive.retry_after_cooldown_s` (a rate window, not concurrency).
   */
  private adaptsInstead(channel: GatewayChannel, answer: BufferedAnswer): boolean {
    const adaptive = channel.config.adaptive;
    const limit = this.ctx.admission.limits([channel]).get(channel.id);
    if (!adaptive || !limit?.enforced || limit.limit <= limit.floor) return false;
    return (cooldownFromHeaders(answer.headers) ?? 0) <= adaptive.retry_after_cooldown_s;
  }

  /** A cooldown that could not be stored is logged; the request goes on. */
  private async coolDown(channel: GatewayChannel, answer: BufferedAnswer, settings: GatewaySettings) {
    const text = answer.body.toString('utf8');
    const decision = cooldownDecision({ ...answer, text }, settings, this.patterns);
    if (decision.kind === 'quota')
      this.log.warn({ channel: channel.id }, 'upstream 429 says quota/balance is exhausted: no cooldown');
    if (decision.kind !== 'cooldown' || this.adaptsInstead(channel, answer)) return;
    const { seconds, reason } = decision;
    try {
      await this.ctx.admission.cooldown(channel, { ms: seconds * 1000, reason });
      this.ctx.metrics.cooldownStarted(channel.id, decision.cause);
      this.log.warn({ channel: channel.id, seconds, reason }, 'channel cooling down');
    } catch (err) {
      this.log.error({ channel: channel.id, err: (err as Error).message }, 'could not store the cooldown');
    }
  }
}
