/**
 * The gateway's HTTP surface: one Fastify instance with its hooks, error and not-found handlers, body parser and
 * every route, built from explicit dependencies. It opens no port and no store connection of its own, so tests drive
 * it through `app.inject()` on a MemoryStore.
 */
import Fastify, {
  LogController,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { Admission } from 'slotgate';
import type { ChannelRegistry } from './channels.js';
import type { GatewayConfig } from './config-schema.js';
import { HttpError, echo, errorBody, toHttpError } from './http-errors.js';
import { clientErrorHandler, requestId, timeoutOptions } from './http-options.js';
import type { HistoryOptions } from './history.js';
import { logAccess, loggerOptions, noteError } from './logging.js';
import type { GatewayMetrics } from './metrics.js';
import type { ProxyResult } from './proxy/context.js';
import { shapeOf } from './proxy/request.js';
import { registerAdminRoutes } from './routes/admin.js';
import { registerClientRoutes } from './routes/client.js';
import { registerDashboardRoutes } from './routes/dashboard.js';
import { registerHealthRoutes } from './routes/health.js';
import { registerMetricsRoute } from './routes/metrics.js';
import { registerModelRoutes } from './routes/models.js';
import type { ReadinessCheck } from './readiness.js';
import type { GatewaySettings, GatewaySettingsUpdate } from './settings.js';
import type { UpstreamClient } from './upstream.js';

export interface AppDeps {
  admission: Admission;
  /** Getters: a config reload swaps the registry and the config between two requests. */
  registry: () => ChannelRegistry;
  config: () => GatewayConfig;
  settings: () => GatewaySettings;
  /** Applies a validated settings update: to the store (every instance) or to this process. */
  putSettings: (update: GatewaySettingsUpdate) => Promise<GatewaySettings>;
  /** The body of GET /admin/status. */
  status: () => Promise<Record<string, unknown>>;
  /** Where each setting in force comes from (default, config file, override) and the overrides' last change. */
  settingsSource?: () => Record<string, unknown>;
  /** GET /readyz: whether this instance should get traffic now, and why not. */
  ready: ReadinessCheck;
  metrics: GatewayMetrics;
  upstream: UpstreamClient;
  /** pino logger options, or false for none. @default from config.server.log_level and log_format */
  logger?: boolean | Record<string, unknown>;
  onResult?: (result: ProxyResult) => void;
  /** The sampling of the dashboard's history (GET /admin/history). @default every 5 s, 180 points */
  history?: HistoryOptions;
}

/** Apps shutting down through closeApp: each of their connections closes as soon as its last response has ended. */
const draining = new WeakSet<FastifyInstance>();

/**
 * Route parameters (channel ids) may be as long as the request line: the route answers an id too long to exist with
 * its own 404, after the admin token was checked, instead of the router answering 414 in Fastify's shape.
 */
const MAX_PARAM_LENGTH = 16 * 1024;

/** What an error of Fastify's own becomes: a client's mistake is a 4xx in slotgate's shape, never a 500. */
function fastifyHttpError(err: FastifyError, bodyLimit: number): HttpError | undefined {
  if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE')
    return new HttpError('request_too_large', `the request body is larger than ${bodyLimit} bytes`);
  if (err.code === 'FST_ERR_BAD_URL')
    return new HttpError('invalid_request_error', 'the URL is not valid: a malformed percent-encoding');
  if (err.code === 'ECONNRESET')
    return new HttpError(
      'invalid_request_error',
      'the client closed the connection before its request was in',
    );
  if (typeof err.code === 'string' && err.code.startsWith('FST_ERR_CTP'))
    return new HttpError('invalid_request_error', err.message);
  if (typeof err.code === 'string' && err.code.startsWith('FST_') && (err.statusCode ?? 500) < 500)
    return new HttpError('invalid_request_error', err.message);
  return undefined;
}

export function buildApp(deps: AppDeps): FastifyInstance {
  const config = deps.config();
  // Fixed at build time (like the rest of `server`): a reload does not change the limit Fastify enforces.
  const bodyLimit = config.server.body_limit_bytes;

  const answerError = (err: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const shape = shapeOf(request.url);
    const httpError = fastifyHttpError(err, bodyLimit) ?? toHttpError(err);
    if (httpError.code === 'internal_error') request.log.error({ err }, 'internal error');
    if (request.url.startsWith('/v1/')) deps.metrics.traffic.countResponse('gateway', httpError.status);
    noteError(request, httpError.code, err);
    if (reply.sent || reply.raw.headersSent) return;
    // frameworkErrors answer outside the hooks: the request id is set here for them
    void reply
      .code(httpError.status)
      .headers({ ...httpError.headers, 'x-request-id': request.id })
      .send(errorBody(httpError, shape));
  };

  const logger = loggerOptions(config.server, deps.logger);
  const app: FastifyInstance = Fastify({
    logger,
    // one access line of our own per request (logging.ts) instead of Fastify's two
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    requestIdHeader: false,
    genReqId: requestId,
    forceCloseConnections: 'idle',
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    frameworkErrors: (err, request, reply) => answerError(err, request, reply),
    clientErrorHandler: clientErrorHandler(() => app.log),
    ...timeoutOptions(config.server),
  });

  // One parser for every body: the raw bytes, forwarded as-is; the handlers parse what they need.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

  app.decorateRequest('access', null);
  if (logger !== false) {
    // 'close' comes once the response has ended (after 'finish'), or when the client left first
    app.addHook('onRequest', (request, reply, done) => {
      reply.raw.once('close', () => logAccess(request, reply));
      done();
    });
  }

  // (callback hooks: an async hook costs a promise and a microtask on every request)
  app.addHook('onSend', (request, reply, payload, done) => {
    reply.header('x-request-id', request.id);
    done(null, payload);
  });

  app.addHook('onResponse', (_request, _reply, done) => {
    if (draining.has(app)) setImmediate(() => app.server.closeIdleConnections());
    done();
  });

  app.setErrorHandler(answerError);

  app.setNotFoundHandler((request, reply) => {
    const err = new HttpError('not_found', `no route ${request.method} ${echo(request.url.split('?')[0]!)}`);
    noteError(request, err.code);
    void reply.code(404).send(errorBody(err, shapeOf(request.url)));
  });

  registerClientRoutes(app, {
    admission: deps.admission,
    registry: deps.registry,
    config: deps.config,
    upstream: deps.upstream,
    settings: deps.settings,
    metrics: deps.metrics.traffic,
    onResult: (result) => {
      deps.metrics.traffic.countResponse(result.source, result.status);
      deps.onResult?.(result);
    },
  });
  registerModelRoutes(app, deps.registry);
  registerHealthRoutes(app, deps.ready);
  registerDashboardRoutes(app);
  registerMetricsRoute(app, deps.metrics);
  registerAdminRoutes(app, { ...deps, metrics: deps.metrics.traffic });
  return app;
}

/**
 * Stops accepting and waits for in-flight requests, up to `forceAfterMs`, then drops every connection. On close, the
 * HTTP server drops only the keep-alive connections idle at that moment; one whose response was still streaming
 * would stay open until server.keep_alive_timeout_ms or the forced close and hold the shutdown with it, so while
 * draining each connection is dropped as soon as its last response has ended.
 */
export async function closeApp(app: FastifyInstance, forceAfterMs: number): Promise<void> {
  draining.add(app);
  const force = setTimeout(() => app.server.closeAllConnections?.(), forceAfterMs);
  force.unref();
  try {
    await app.close();
  } finally {
    clearTimeout(force);
  }
}
