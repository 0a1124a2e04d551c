/**
 * Admin and operations routes (settings, channels, cooldowns, status, stats), behind the admin token (compared in
 * constant time). No response ever carries a channel key, a client token or the admin token.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Admission } from 'slotgate';
import { gatewaySettings, type GatewaySettings, type GatewaySettingsUpdate } from '../settings.js';
import type { ChannelRegistry, GatewayChannel } from '../channels.js';
import type { GatewayConfig } from '../config.js';
import { HttpError } from '../http-errors.js';
import { parseJson, presentedToken } from '../proxy/request.js';

export interface AdminContext {
  admission: Admission;
  registry: () => ChannelRegistry;
  config: () => GatewayConfig;
  /** Applies a validated settings update: to Redis (every instance) or to this process. */
  putSettings: (update: GatewaySettingsUpdate) => Promise<GatewaySettings>;
  settings: () => GatewaySettings;
  status: () => Promise<Record<string, unknown>>;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Constant-time comparison of the presented token with the configured one (equal-length digests). */
export function adminAuthorized(request: FastifyRequest, token: string | undefined): boolean {
  if (!token) return false;
  const presented = presentedToken(request, 'admin') ?? '';
  return timingSafeEqual(digest(presented), digest(token)) && presented.length > 0;
}

/** base_url without any user:password part. */
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

export function publicChannel(c: GatewayChannel): Record<string, unknown> {
  const cfg = c.config;
  return {
    id: c.id,
    type: cfg.type,
    base_url: safeUrl(cfg.base_url),
    groups: cfg.groups,
    models: cfg.models,
    priority: cfg.priority,
    weight: cfg.weight,
    max_concurrency: cfg.max_concurrency,
    max_waiting: cfg.max_waiting ?? null,
    enabled: cfg.enabled,
    has_key: Boolean(cfg.key),
  };
}

export function registerAdminRoutes(app: FastifyInstance, ctx: AdminContext): void {
  app.register(async (admin) => {
    admin.addHook('onRequest', async (request) => {
      if (!adminAuthorized(request, ctx.config().admin.token)) {
        throw new HttpError('unauthorized_admin', 'admin routes need `Authorization: Bearer <admin token>`');
      }
    });

    admin.get('/admin/settings', async () => ({
      settings: ctx.settings(),
      spec: Object.fromEntries(
        gatewaySettings.keys.map((k) => [
          k,
          {
            default: gatewaySettings.table[k].default,
            valid: gatewaySettings.describe(k),
            doc: gatewaySettings.table[k].doc,
          },
        ]),
      ),
    }));

    admin.put('/admin/settings', async (request) => {
      const update = gatewaySettings.parse(parseJson(request.body));
      return { settings: await ctx.putSettings(update) };
    });

    // Loads come through the load view (cached for load_cache_ttl_ms, shared with admission), so a dashboard that
    // refreshes every second costs next to nothing; `?fresh=1` reads the store directly.
    admin.get<{ Querystring: { fresh?: string } }>('/admin/channels', async (request) => {
      const registry = ctx.registry();
      const fresh = request.query.fresh === '1' || request.query.fresh === 'true';
      const loads = fresh
        ? await ctx.admission.readLoads(registry.channels)
        : await ctx.admission.viewLoads(registry.channels);
      const local = ctx.admission.stats().channels;
      return {
        channels: registry.channels.map((c) => {
          const load = loads.get(c.id);
          return {
            ...publicChannel(c),
            active: load?.active ?? 0,
            waiting: load?.waiting ?? 0,
            cooling: load?.coolingDown ?? false,
            cooldown_remaining_ms: load?.coolingDown ? load.cooldownRemainingMs : 0,
            this_instance: { active: local[c.id]?.active ?? 0, waiting: local[c.id]?.waiting ?? 0 },
          };
        }),
      };
    });

    admin.post<{ Params: { id: string } }>('/admin/channels/:id/cooldown', async (request) => {
      const channel = ctx.registry().get(request.params.id);
      if (!channel) throw new HttpError('not_found', `no channel "${request.params.id}"`);
      const body =
        request.body === undefined || (Buffer.isBuffer(request.body) && request.body.length === 0)
          ? {}
          : parseJson(request.body);
      const seconds = (body as { seconds?: unknown }).seconds ?? ctx.admission.settings.cooldown_seconds;
      if (typeof seconds !== 'number' || !Number.isInteger(seconds) || seconds < 1 || seconds > 3600) {
        throw new HttpError(
          'invalid_request_error',
          `Expected \`seconds\` to be an integer in 1–3600, got ${JSON.stringify(seconds)}`,
        );
      }
      const reason =
        typeof (body as { reason?: unknown }).reason === 'string'
          ? (body as { reason: string }).reason.slice(0, 200)
          : 'set by admin';
      await ctx.admission.cooldown(channel, { ms: seconds * 1000, reason });
      return { channel: channel.id, cooling: ctx.admission.settings.cooldown_enabled, seconds, reason };
    });

    admin.delete<{ Params: { id: string } }>('/admin/channels/:id/cooldown', async (request) => {
      const channel = ctx.registry().get(request.params.id);
      if (!channel) throw new HttpError('not_found', `no channel "${request.params.id}"`);
      await ctx.admission.clearCooldown(channel);
      return { channel: channel.id, cooling: false };
    });

    admin.get('/admin/status', async () => ctx.status());

    admin.get('/admin/stats', async () => ctx.admission.stats());
  });
}
