/**
 * Admin and operations routes (settings, channels, clients, cooldowns, status, stats, history, fleet), behind the
 * admin token (compared in constant time). No response ever carries a channel key, a client token or the admin token.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { SlotgateError, StoreUnavailableError, type ChannelStats } from 'slotgate';
import type { GatewayChannel } from '../channels.js';
import { History, readAdmission, type HistoryOptions } from '../history.js';
import { HttpError, echo } from '../http-errors.js';
import type { TrafficMetrics, UpstreamMetrics } from '../metrics/traffic.js';
import type { HandlerContext } from '../proxy/context.js';
import { kindOf, parseJson, presentedToken } from '../proxy/request.js';
import { gatewaySettings, type GatewaySettings, type GatewaySettingsUpdate } from '../settings.js';

export interface AdminContext extends HandlerContext {
  /** Applies a validated settings update: to the store (every instance) or to this process. */
  putSettings: (update: GatewaySettingsUpdate) => Promise<GatewaySettings>;
  /** Where each setting in force comes from (default, config file, override) and the overrides' last change. */
  settingsSource?: () => Record<string, unknown>;
  status: () => Promise<Record<string, unknown>>;
  /** Counts the cooldowns the admin API starts; the history reads the upstream 429s counted. */
  metrics: Pick<UpstreamMetrics, 'cooldownStarted'> & Partial<Pick<TrafficMetrics, 'upstream429s'>>;
  /** The sampling of GET /admin/history. @default every 5 s, 180 points */
  history?: HistoryOptions;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

const ADMIN_HEADERS = {
  'cache-control': 'no-store',
  'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
};

/** Constant-time comparison of the presented token with the configured one (equal-length digests). */
export function adminAuthorized(request: FastifyRequest, token: string | undefined): boolean {
  if (!token) return false;
  const presented = presentedToken(request, 'admin') ?? '';
  return timingSafeEqual(digest(presented), digest(token)) && presented.length > 0;
}

/** base_url without credentials: no user:password, and query parameters that may hold a key masked. */
export function safeUrl(url: string | undefined): string | undefined {
  if (!url) return url;
  try {
    const u = new URL(url);
    u.username = '';
    u.password = '';
    for (const key of [...u.searchParams.keys()])
      if (/key|token|secret|sig/i.test(key)) u.searchParams.set(key, '***');
    return u.toString();
  } catch {
    return '(invalid url)';
  }
}

export function publicChannel({ id, config: c }: GatewayChannel): Record<string, unknown> {
  return {
    id,
    type: c.type,
    base_url: safeUrl(c.base_url),
    groups: c.groups,
    models: c.models,
    priority: c.priority,
    weight: c.weight,
    max_concurrency: c.max_concurrency,
    max_waiting: c.max_waiting ?? null,
    enabled: c.enabled,
    adaptive: c.adaptive ?? null,
    has_key: Boolean(c.key),
  };
}

const REASON_MAX_CHARS = 200;

const cooldownBody = z.strictObject({
  seconds: z.int().min(1).max(3600).optional(),
  reason: z.string().min(1).max(REASON_MAX_CHARS).optional(),
});
const EXPECTED = { seconds: 'an integer in 1–3600', reason: `a string of 1–${REASON_MAX_CHARS} characters` };

/** The body of POST /admin/channels/:id/cooldown: none or `{}` for the default length; rejected whole otherwise. */
export function cooldownRequest(raw: unknown, defaultSeconds: number): { seconds: number; reason: string } {
  const empty = raw === undefined || (Buffer.isBuffer(raw) && raw.length === 0);
  const body = empty ? {} : parseJson(raw);
  const result = cooldownBody.safeParse(body);
  if (result.success) {
    const { seconds = defaultSeconds, reason = 'set by admin' } = result.data;
    return { seconds, reason };
  }
  const issues = result.error.issues;
  const issue = issues.find((i) => i.code === 'unrecognized_keys') ?? issues[0]!;
  const field = issue.path[0] as keyof typeof EXPECTED | undefined;
  const invalid = (message: string) => new HttpError('invalid_request_error', message);
  if (issue.code === 'unrecognized_keys')
    throw invalid(`Unknown field ${echo(issue.keys[0])} (valid fields: seconds, reason)`);
  if (!field) {
    const expected = 'a JSON object with `seconds` and/or `reason` (or no body)';
    throw invalid(`Expected the body to be ${expected}, got ${kindOf(body)}`);
  }
  const value = (body as Record<string, unknown>)[field];
  throw invalid(`Expected \`${field}\` to be ${EXPECTED[field]}, got ${echo(value)}`);
}

/**
 * A settings update that validated but that the store failed to take: 503, like an admission the store failed.
 * slotgate's own errors and programming errors keep their answers.
 */
function settingsNotStored(err: unknown): unknown {
  if (err instanceof HttpError || err instanceof TypeError || err instanceof RangeError) return err;
  if (err instanceof SlotgateError && !(err instanceof StoreUnavailableError)) return err;
  return new HttpError(
    'admission_store_unavailable',
    'slotgate: the admission store is unavailable, so the settings update was not applied; retry shortly',
    { 'retry-after': '1' },
  );
}

const thisInstance = (stats: ChannelStats | undefined) => ({
  active: stats?.active ?? 0,
  waiting: stats?.waiting ?? 0,
});

/**
 * GET /admin/fleet: who holds each bounded channel's slots, by instance (one store read per bounded channel), and the
 * most held at once lately (the high-water mark: one read per 50 channels).
 */
async function fleet(ctx: AdminContext): Promise<Record<string, unknown>> {
  const bounded = ctx.registry().channels.filter((c) => c.maxConcurrency > 0);
  const [holders, peaks] = await Promise.all([
    ctx.admission.readHolders(bounded),
    ctx.admission.readPeaks(bounded),
  ]);
  return {
    instance_id: ctx.admission.instanceId,
    channels: bounded.map((c) => {
      const byInstance = [...(holders.get(c.id) ?? new Map<string, number>())]
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([instance, slots]) => ({ instance, slots }));
      const inUse = byInstance.reduce((n, h) => n + h.slots, 0);
      const peak = peaks.get(c.id);
      return {
        id: c.id,
        max_concurrency: c.maxConcurrency,
        in_use: inUse,
        peak: peak?.peak ?? inUse,
        peak_window_s: peak ? Math.round(peak.windowMs / 1000) : 0,
        holders: byInstance,
      };
    }),
  };
}

/** GET /admin/channels: loads through the load view (shared with admission, cached), or with `fresh` from the store. */
async function channels(ctx: AdminContext, fresh: boolean): Promise<Record<string, unknown>> {
  const { channels } = ctx.registry();
  const loads = await (fresh ? ctx.admission.readLoads(channels) : ctx.admission.viewLoads(channels));
  const local = ctx.admission.stats().channels;
  const limits = ctx.admission.limits(channels);
  return {
    channels: channels.map((c) => {
      const load = loads.get(c.id);
      return {
        ...publicChannel(c),
        active: load?.active ?? 0,
        waiting: load?.waiting ?? 0,
        cooling: load?.coolingDown ?? false,
        cooldown_remaining_ms: load?.coolingDown ? load.cooldownRemainingMs : 0,
        adaptive_limit: limits.get(c.id)?.limit ?? null,
        this_instance: thisInstance(local[c.id]),
      };
    }),
  };
}

/** GET /admin/clients: each client's limit and, for limited ones, its slots across the fleet. Token names, never keys. */
async function clients(ctx: AdminContext): Promise<Record<string, unknown>> {
  const infos = ctx.registry().clients();
  const loads = await ctx.admission.readClients(infos.map((i) => i.client));
  const local = ctx.admission.stats().clients;
  return {
    clients: infos.map(({ client, tokens }) => {
      const load = loads.get(client.id);
      return {
        client: client.id,
        tokens,
        max_concurrency: client.maxConcurrency ?? 0,
        weight: client.weight ?? 1,
        active: load?.active ?? null,
        waiting: load?.waiting ?? null,
        // a client without a limit holds no slots of its own: nothing is counted for it
        this_instance: load ? thisInstance(local[client.id]) : null,
      };
    }),
  };
}

function settingsSpec(): Record<string, unknown> {
  const { keys, table, describe } = gatewaySettings;
  return Object.fromEntries(
    keys.map((k) => [k, { default: table[k].default, valid: describe(k), doc: table[k].doc }]),
  );
}

export function registerAdminRoutes(app: FastifyInstance, ctx: AdminContext): void {
  // sampled from the moment the app is ready until it closes, whether or not anyone looks
  const history: History = new History(
    () =>
      readAdmission(
        ctx.admission,
        ctx.registry().channels,
        () => history.now(),
        (id) => ctx.metrics.upstream429s?.(id) ?? 0,
      ),
    ctx.history,
  );
  app.addHook('onReady', async () => void history.start());
  app.addHook('onClose', async () => history.stop());

  app.register(async (admin) => {
    admin.addHook('onRequest', async (request) => {
      if (!adminAuthorized(request, ctx.config().admin.token))
        throw new HttpError('unauthorized_admin', 'admin routes need `Authorization: Bearer <admin token>`');
    });
    // JSON for the dashboard and tools: never cached, never rendered as a page, never framed
    admin.addHook('onSend', (_request, reply, payload, done) => {
      reply.headers(ADMIN_HEADERS);
      done(null, payload);
    });
    const channelOf = (id: string): GatewayChannel => {
      const channel = ctx.registry().get(id);
      if (!channel) throw new HttpError('not_found', `no channel ${echo(id)}`);
      return channel;
    };
    type WithId = { Params: { id: string } };

    admin.get('/admin/settings', async () => ({
      settings: ctx.settings(),
      ...(ctx.settingsSource ? { source: ctx.settingsSource() } : {}),
      spec: settingsSpec(),
    }));
    admin.put('/admin/settings', async (request) => {
      const body = parseJson(request.body);
      const update = gatewaySettings.parse(body);
      for (const warning of gatewaySettings.warnings(body)) request.log.warn(warning);
      try {
        return { settings: await ctx.putSettings(update) };
      } catch (err) {
        request.log.warn({ err: (err as Error).message }, 'settings update not stored');
        throw settingsNotStored(err);
      }
    });
    admin.get<{ Querystring: { fresh?: string } }>('/admin/channels', async (request) =>
      channels(ctx, request.query.fresh === '1' || request.query.fresh === 'true'),
    );
    admin.get('/admin/clients', async () => clients(ctx));
    admin.post<WithId>('/admin/channels/:id/cooldown', async (request) => {
      const channel = channelOf(request.params.id);
      const { seconds, reason } = cooldownRequest(request.body, ctx.admission.settings.cooldown_seconds);
      await ctx.admission.cooldown(channel, { ms: seconds * 1000, reason });
      if (ctx.admission.settings.cooldown_enabled) ctx.metrics.cooldownStarted(channel.id, 'admin');
      return { channel: channel.id, cooling: ctx.admission.settings.cooldown_enabled, seconds, reason };
    });
    admin.delete<WithId>('/admin/channels/:id/cooldown', async (request) => {
      const channel = channelOf(request.params.id);
      await ctx.admission.clearCooldown(channel);
      return { channel: channel.id, cooling: false };
    });
    admin.get('/admin/status', async () => ctx.status());
    admin.get('/admin/stats', async () => ctx.admission.stats());
    admin.get('/admin/history', async () => history.toJSON(ctx.registry().channels.map((c) => c.id)));
    admin.get('/admin/fleet', async () => fleet(ctx));
  });
}
